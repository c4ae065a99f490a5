"""Which compute rate a kernel's ``flops`` run at: a static look at the kernel's body.

A CPU or GPU does a matrix product (BLAS level 3, cuBLAS) at a large fraction of its peak, but
the other work NumPy kernels do (transcendental ufuncs, FFTs, random numbers, reductions) at a few
percent of it: on a 2-core EPYC VM a float64 GEMM of side 256 ran at ~90 GFLOP/s, an FFT of 2^16
points at ~3 GFLOP/s and ``sin`` at ~8 ns per element. One rate for every task is then wrong by
5-20x for one of the two kinds, so the cost model divides a task's ``flops`` by the rate of its
kernel's *compute class* (:mod:`streammap.cost.model`), which the front end decides here, once
per kernel, from the source alone (nothing is run):

``"lapack"``
    The body calls a factorisation or solver (LAPACK underneath): a function by its usual name
    (``cholesky``, ``solve``, ``solve_triangular``, ``lstsq``, ``inv``, ``qr``, ``svd``,
    ``eigh``, ...) however it was imported, or anything else under a ``linalg`` namespace
    (``np.linalg.cholesky``, ``xp.linalg.solve``, ``scipy.linalg.lu``) that is not a product. On
    tiles of a few hundred these run far below a product's rate (a Cholesky factorisation of side
    128 at ~4 GFLOP/s counted ``n³/3``, where the product of that side reached ~40 on a 2-core
    EPYC VM): their blocked algorithms spend their time in panels and small triangular steps, not
    in one big product. Discovery measures a Cholesky factorisation by side (``factor_curve``).
``"blas"``
    No factorisation, but the body calls a matrix product: the ``@`` operator, or a call of a
    function or method named ``matmul``, ``dot``, ``vdot``, ``inner``, ``einsum``,
    ``tensordot``, ``multi_dot`` or ``matrix_power``.
``"gram"``
    Every matrix product of the body multiplies an array by its own transpose (``l @ l.T``,
    ``x.T @ x``, ``np.dot(a, a.T)``): a symmetric rank-k update, whose ``flops`` clause
    conventionally counts the ``n² k`` of BLAS ``syrk`` (the symmetric half). NumPy's ``@`` does not
    know the result is symmetric and runs the full product, ``2 n² k``: twice what the clause
    counts. The cost model prices a ``"gram"`` task at half the GEMM curve's rate at the side of
    the full product (:func:`streammap.cost.model.compute_rates`); a clause that already counts the full
    product is then over-estimated 2x, a price a clause that follows the BLAS convention does not pay.
``"fft"``
    Not a matrix product, but the body calls an FFT: anything under an ``fft`` namespace
    (``xp.fft.rfft``, ``scipy.fft.fft``) or a function by an FFT's usual name (``fft``, ``ifft``,
    ``rfft``, ``irfft``, ``fft2``, ``fftn``, ...). An FFT runs at its own rate, between the two
    others (~3-5 GFLOP/s on that VM, counted ``5 n log2 n``), and a kernel that calls one usually
    spends its time there; discovery measures it (``achieved_fft_flops``).
``"rfft"``
    An ``"fft"`` body whose every transform is a real one (``rfft``, ``irfft``, their 2-D and n-D
    forms, ``hfft``, ``ihfft``; helpers such as ``rfftfreq`` and ``fftshift`` do not count): a
    real transform of n points is counted ``2.5 n log2 n`` and runs on arrays half the size of a
    complex one's, so at one working set its rate differs from the complex transform's (on a
    2-core EPYC VM ~7 GFLOP/s for both within the core's cache, but at 4 MiB a real pair ran at ~3
    against ~6 for the complex FFT). Discovery measures both by working set
    (``rfft_curve``, ``fft_curve``).
``"random"``
    None of those, but the body draws random numbers: anything under a ``random`` namespace
    (``np.random.default_rng``, ``cp.random.standard_normal``, ``xp.random.rand``) or a
    Generator method by name (``standard_normal``, ``normal``, ``uniform``, ``integers``, ...), and
    no transcendental function. A normal random number costs ~9 ns on that VM, twenty to forty
    times an addition, and clauses count it as one FLOP; discovery measures the rate
    (``achieved_random_flops``).
``"transcendental"``
    None of those, but the body calls a transcendental function NumPy evaluates one element at
    a time (``sin``, ``cos``, ``tan`` and their inverses and hyperbolic forms, ``power``,
    ``float_power``), or raises to a power whose exponent is not an integer literal
    (``RHO ** d``, ``x ** 0.5``), and draws no random numbers. ``exp`` and ``log`` are *not*
    transcendental here: NumPy evaluates them with vector instructions at ~1 ns per float64
    element, near an addition's cost, while ``sin`` takes ~8 ns and ``**`` ~4 ns on that VM.
    Discovery measures the rate of ``sin`` and ``**`` (``achieved_transcendental_flops``).
``"mixed"``
    A body that both draws random numbers and calls a transcendental function (a signal source
    with noise): neither rate alone describes it, so it runs at the measured mix of ``sin``, an
    FFT and random numbers (``achieved_other_flops``), the rate every such kernel had before
    plain arithmetic got one of its own.
``"scan"``
    None of those, but the body calls a scan: a running sum or product (``cumsum``, ``cumprod``,
    their ``nan`` forms and NumPy 2's ``cumulative_sum``/``cumulative_prod``) or a ufunc's
    ``accumulate`` (``np.maximum.accumulate``). Each element of a scan waits for the one before
    it, so NumPy cannot run it with vector instructions: ~3.3 ns per element on a 2-core EPYC VM,
    fifteen times an addition (~0.2 ns) and near a transcendental function's cost, while clauses
    count it one FLOP per element like an addition. Priced as plain arithmetic, a moving average
    built on ``cumsum`` was estimated 2.3-3.6x too fast. Discovery measures the rate
    (``achieved_scan_flops``). A body that also calls a transcendental function is
    ``"transcendental"`` (the slower of the two per element, as for the classes above).
``"other"``
    Everything else: plain element-wise arithmetic (``a * x + b``, ``abs``, comparisons,
    ``where``, the vectorised ``exp``/``log``/``sqrt``), reductions and indexing. NumPy runs an
    addition or a multiplication over an in-cache array at ~0.2-1 ns per element on that VM,
    several times faster per counted FLOP than the mix above; discovery measures a few such
    passes (``achieved_elementwise_flops``).

Policy: one factorisation anywhere in the body (nested functions and branches included, whether
or not they run) makes the whole kernel ``"lapack"``, else one matrix product makes it
``"blas"`` (``"gram"`` when every product is of an array with its own transpose): a kernel that
factorises or multiplies matrices usually spends its time there, and its ``flops`` clause counts
that work; the slower of the two wins when a body has both. Random numbers and transcendental
functions only decide among bodies without products or FFTs, and scans among bodies without those. Functions the kernel calls
are not followed (a helper defined elsewhere that multiplies matrices leaves the kernel
``"other"``): the look is local and cheap, and a wrong class costs an estimate, never a result.
"""

from __future__ import annotations

import ast

#: The classes, as the task graph's ``compute_class`` attribute carries them.
LAPACK, BLAS, GRAM, FFT, RFFT, RANDOM, TRANSCENDENTAL, MIXED, SCAN, OTHER = (
    "lapack", "blas", "gram", "fft", "rfft", "random", "transcendental", "mixed", "scan", "other")

#: Names of calls that are matrix products (BLAS level 3 underneath), whatever module or object
#: they are reached through.
MATRIX_CALLS = frozenset({"matmul", "dot", "vdot", "inner", "einsum", "tensordot", "multi_dot", "matrix_power"})
#: Names of calls that are factorisations or solvers (LAPACK underneath), whatever module or object
#: they are reached through.
FACTOR_CALLS = frozenset({
    "cholesky", "cho_solve", "cho_factor", "solve", "solve_triangular", "lstsq", "inv", "pinv",
    "qr", "svd", "eig", "eigh", "eigvals", "eigvalsh", "lu", "lu_factor", "lu_solve", "det",
    "slogdet",
})
#: Names of calls that are FFTs, whatever module they are reached through.
FFT_CALLS = frozenset({"fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2",
                       "irfft2", "fftn", "ifftn", "rfftn", "irfftn"})
#: The FFTs of :data:`FFT_CALLS` that are real transforms (a body that calls only these is ``"rfft"``).
REAL_FFT_CALLS = frozenset({"rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn", "hfft", "ihfft"})
#: Functions of an ``fft`` namespace that are not transforms: they neither make a body ``"rfft"`` nor keep it from being one.
FFT_HELPERS = frozenset({"fftfreq", "rfftfreq", "fftshift", "ifftshift"})
#: Names of Generator (and legacy ``RandomState``) methods that draw random numbers, called on a
#: generator object whatever it is named (``rng.normal``); calls under a ``random`` namespace count too.
RANDOM_CALLS = frozenset({"default_rng", "Generator", "RandomState", "standard_normal", "normal",
                          "uniform", "integers", "randint", "randn", "rand", "exponential", "poisson",
                          "binomial", "gamma", "beta", "permutation", "shuffle", "choice"})
#: Names of the ufuncs NumPy evaluates one element at a time through libm (several ns each), not
#: ``exp``/``log``/``sqrt``, which it runs with vector instructions near an addition's cost.
TRANSCENDENTAL_CALLS = frozenset({"sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2",
                                  "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
                                  "power", "float_power"})

#: Names of calls that are scans (each element depends on the one before it), whatever they are
#: reached through: ``np.cumsum``, ``x.cumsum()``, ``np.maximum.accumulate``.
SCAN_CALLS = frozenset({"cumsum", "cumprod", "nancumsum", "nancumprod", "cumulative_sum", "cumulative_prod",
                        "accumulate"})

#: A namespace whose every function that is not a product counts as a factorisation
#: (``np.linalg.norm`` too: it is rare in kernels, and a simple rule is easier to predict than an exact one).
LINALG_NAMESPACE = "linalg"


def compute_class(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The compute class of the body of ``fn``, the first that applies of ``"lapack"``,
    ``"blas"`` (``"gram"``), ``"rfft"``, ``"fft"``, ``"mixed"``, ``"random"``, ``"transcendental"``, ``"scan"``,
    ``"other"`` (module docstring).

    Examples
    --------
    >>> import ast
    >>> from streammap.directives.kernel_class import compute_class
    >>> compute_class(ast.parse("def f(a, b):\\n    return a @ b").body[0])
    'blas'
    >>> compute_class(ast.parse("def f(l):\\n    return l @ l.T").body[0])
    'gram'
    >>> compute_class(ast.parse("def f(a):\\n    return xp.linalg.cholesky(a)").body[0])
    'lapack'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.fft.fft(xp.sin(x))").body[0])
    'fft'
    >>> compute_class(ast.parse("def f(y):\\n    return xp.fft.irfft(xp.fft.rfft(y) * 2)").body[0])
    'rfft'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.sin(x) * 2").body[0])
    'transcendental'
    >>> compute_class(ast.parse("def f(i):\\n    return np.random.default_rng(i).normal(size=9)").body[0])
    'random'
    >>> compute_class(ast.parse("def f(n):\\n    return xp.sin(xp.arange(n)) + xp.random.rand(n)").body[0])
    'mixed'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.cumsum(x)[8:] / 8").body[0])
    'scan'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.exp(x) / x.sum()").body[0])
    'other'
    """
    found, products, transforms = set(), [], set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            found.add(BLAS)
            products.append((node.target, node.value) if isinstance(node, ast.AugAssign) else (node.left, node.right))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not _integer_literal(node.right):
            found.add(TRANSCENDENTAL)
        elif isinstance(node, ast.Call):
            cls = _call_class(node.func)
            found.add(cls)
            if cls == BLAS:
                products.append(_dot_operands(node))
            elif cls == FFT:
                transforms.add(_transform_kind(node.func))
    if BLAS in found and LAPACK not in found and products and all(_is_gram(*ops) for ops in products):
        return GRAM
    if RANDOM in found and TRANSCENDENTAL in found:
        found.add(MIXED)                          # a mix of both: the mix's rate (docstring)
    if transforms - {None} == {RFFT}:
        found.add(RFFT)                           # only real transforms: their own curve (docstring)
    return next((c for c in (LAPACK, BLAS, RFFT, FFT, MIXED, RANDOM, TRANSCENDENTAL, SCAN) if c in found), OTHER)


def _call_class(func: ast.expr) -> str:
    """The class of one called expression: ``np.linalg.solve`` -> lapack, ``a.dot`` -> blas, ``xp.fft.rfft`` -> fft."""
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name in MATRIX_CALLS:
        return BLAS
    if name in FACTOR_CALLS:
        return LAPACK
    if isinstance(func, ast.Attribute) and _under(func.value, LINALG_NAMESPACE):
        return LAPACK
    if name in FFT_CALLS or isinstance(func, ast.Attribute) and _under(func.value, "fft"):
        return FFT
    if name in RANDOM_CALLS or isinstance(func, ast.Attribute) and _under(func.value, "random"):
        return RANDOM
    if name in TRANSCENDENTAL_CALLS:
        return TRANSCENDENTAL
    if name in SCAN_CALLS:
        return SCAN
    return OTHER


def _transform_kind(func: ast.expr) -> str | None:
    """``RFFT`` for a real transform (``xp.fft.rfft``), ``None`` for a helper (``rfftfreq``),
    ``FFT`` for any other call of the ``fft`` class (a complex transform)."""
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name in FFT_HELPERS:
        return None
    return RFFT if name in REAL_FFT_CALLS else FFT


def _integer_literal(expr: ast.expr) -> bool:
    """Whether a ``**`` exponent is an integer literal (``x ** 2``, ``x ** -1``): NumPy turns those into
    multiplications; any other exponent (``0.5``, a variable, an array) runs ``pow`` per element."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        expr = expr.operand
    return isinstance(expr, ast.Constant) and type(expr.value) is int


def _dot_operands(call: ast.Call) -> tuple:
    """The two operands of a product call: ``np.dot(a, b)`` -> (a, b), ``a.dot(b)`` -> (a, b);
    ``(None, None)`` for calls of another shape (``einsum``, ``multi_dot``), which are never a Gram product."""
    args = call.args
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("dot", "matmul") and len(args) == 1:
        return call.func.value, args[0]
    if len(args) == 2 and isinstance(call.func, (ast.Name, ast.Attribute)) and \
            (call.func.id if isinstance(call.func, ast.Name) else call.func.attr) in ("dot", "matmul"):
        return args[0], args[1]
    return None, None


def _is_gram(left, right) -> bool:
    """Whether ``left @ right`` multiplies an array by its own transpose: ``x @ x.T``, ``x.T @ x``
    (also ``x.transpose()``, ``x.conj().T`` and ``.mT``), the same source text on both sides."""
    if left is None or right is None:
        return False
    a, ta = _untransposed(left)
    b, tb = _untransposed(right)
    return ta != tb and ast.dump(a) == ast.dump(b)


def _untransposed(expr: ast.expr) -> tuple[ast.expr, bool]:
    """``x.T`` -> (x, True), ``x.transpose()`` -> (x, True), ``x.conj()`` -> (x, False), ``x`` -> (x, False)."""
    transposed = False
    while True:
        if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT", "H"):
            transposed, expr = not transposed, expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args \
                and expr.func.attr in ("transpose", "conj", "conjugate"):
            transposed ^= expr.func.attr == "transpose"
            expr = expr.func.value
        else:
            return expr, transposed


def _under(expr: ast.expr, namespace: str) -> bool:
    """Whether ``expr`` (what a called attribute hangs off) names ``namespace`` or a part of it (``np.linalg``, ``linalg``)."""
    return any(isinstance(part, ast.Attribute) and part.attr == namespace
               or isinstance(part, ast.Name) and part.id == namespace
               for part in _chain(expr))


def _chain(expr: ast.expr):
    """``a.b.c`` -> the nodes ``a.b.c``, ``a.b``, ``a`` (stops at the first non-attribute)."""
    while True:
        yield expr
        if not isinstance(expr, ast.Attribute):
            return
        expr = expr.value
