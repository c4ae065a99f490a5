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
``"fft"``
    Not a matrix product, but the body calls an FFT: anything under an ``fft`` namespace
    (``xp.fft.rfft``, ``scipy.fft.fft``) or a function by an FFT's usual name (``fft``, ``ifft``,
    ``rfft``, ``irfft``, ``fft2``, ``fftn``, ...). An FFT runs at its own rate, between the two
    others (~3-5 GFLOP/s on that VM, counted ``5 n log2 n``), and a kernel that calls one usually
    spends its time there; discovery measures it (``achieved_fft_flops``).
``"other"``
    Everything else.

Policy: one factorisation anywhere in the body (nested functions and branches included, whether
or not they run) makes the whole kernel ``"lapack"``, else one matrix product makes it
``"blas"``: a kernel that factorises or multiplies matrices usually spends its time there, and
its ``flops`` clause counts that work; the slower of the two wins when a body has both. Functions the kernel calls
are not followed (a helper defined elsewhere that multiplies matrices leaves the kernel
``"other"``): the look is local and cheap, and a wrong class costs an estimate, never a result.
"""

from __future__ import annotations

import ast

#: The classes, as the task graph's ``compute_class`` attribute carries them.
LAPACK, BLAS, FFT, OTHER = "lapack", "blas", "fft", "other"

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

#: A namespace whose every function that is not a product counts as a factorisation
#: (``np.linalg.norm`` too: it is rare in kernels, and a simple rule is easier to predict than an exact one).
LINALG_NAMESPACE = "linalg"


def compute_class(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``"lapack"`` when the body of ``fn`` calls a factorisation or solver, else ``"blas"`` when it
    calls a matrix product, else ``"fft"`` when it calls an FFT, else ``"other"`` (module docstring).

    Examples
    --------
    >>> import ast
    >>> from streammap.directives.kernel_class import compute_class
    >>> compute_class(ast.parse("def f(a, b):\\n    return a @ b").body[0])
    'blas'
    >>> compute_class(ast.parse("def f(a):\\n    return xp.linalg.cholesky(a)").body[0])
    'lapack'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.fft.fft(xp.sin(x))").body[0])
    'fft'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.sin(x) * 2").body[0])
    'other'
    """
    found = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            found.add(BLAS)
        elif isinstance(node, ast.Call):
            found.add(_call_class(node.func))
    return next((c for c in (LAPACK, BLAS, FFT) if c in found), OTHER)


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
    return OTHER


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
