"""Which compute rate a kernel's ``flops`` run at: a static look at the kernel's body.

A CPU or GPU does a matrix product (BLAS level 3, cuBLAS) at a large fraction of its peak, but
the other work NumPy kernels do (transcendental ufuncs, FFTs, random numbers, reductions) at a few
percent of it: on a 2-core EPYC VM a float64 GEMM of side 256 ran at ~90 GFLOP/s, an FFT of 2^16
points at ~3 GFLOP/s and ``sin`` at ~8 ns per element. One rate for every task is then wrong by
5-20x for one of the two kinds, so the cost model divides a task's ``flops`` by the rate of its
kernel's *compute class* (:mod:`streammap.cost.model`), which the front end decides here, once
per kernel, from the source alone (nothing is run):

``"blas"``
    The body calls a matrix product: the ``@`` operator, or a call of a function or method named
    ``matmul``, ``dot``, ``vdot``, ``inner``, ``einsum``, ``tensordot`` or ``multi_dot``, or
    anything under a ``linalg`` namespace (``np.linalg.cholesky``, ``xp.linalg.solve``,
    ``scipy.linalg.lu``), or a factorisation or solver by its usual name (``cholesky``,
    ``solve``, ``solve_triangular``, ``lstsq``, ``inv``, ``qr``, ``svd``, ``eigh``, ...) however it
    was imported.
``"fft"``
    Not a matrix product, but the body calls an FFT: anything under an ``fft`` namespace
    (``xp.fft.rfft``, ``scipy.fft.fft``) or a function by an FFT's usual name (``fft``, ``ifft``,
    ``rfft``, ``irfft``, ``fft2``, ``fftn``, ...). An FFT runs at its own rate, between the two
    others (~3-5 GFLOP/s on that VM, counted ``5 n log2 n``), and a kernel that calls one usually
    spends its time there; discovery measures it (``achieved_fft_flops``).
``"other"``
    Everything else.

Policy: one matrix product anywhere in the body (nested functions and branches included, whether
or not they run) makes the whole kernel ``"blas"``: a kernel that multiplies matrices usually
spends its time there, and its ``flops`` clause counts the product. Functions the kernel calls
are not followed (a helper defined elsewhere that multiplies matrices leaves the kernel
``"other"``): the look is local and cheap, and a wrong class costs an estimate, never a result.
"""

from __future__ import annotations

import ast

#: The classes, as the task graph's ``compute_class`` attribute carries them.
BLAS, FFT, OTHER = "blas", "fft", "other"

#: Names of calls that are matrix products or dense linear algebra (BLAS/LAPACK underneath),
#: whatever module or object they are reached through.
MATRIX_CALLS = frozenset({
    "matmul", "dot", "vdot", "inner", "einsum", "tensordot", "multi_dot", "matrix_power",
    "cholesky", "cho_solve", "cho_factor", "solve", "solve_triangular", "lstsq", "inv", "pinv",
    "qr", "svd", "eig", "eigh", "eigvals", "eigvalsh", "lu", "lu_factor", "lu_solve", "det",
    "slogdet",
})
#: Names of calls that are FFTs, whatever module they are reached through.
FFT_CALLS = frozenset({"fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2",
                       "irfft2", "fftn", "ifftn", "rfftn", "irfftn"})

#: A namespace whose every function counts as dense linear algebra (``np.linalg.norm`` too: it is
#: rare in kernels, and a simple rule is easier to predict than an exact one).
LINALG_NAMESPACE = "linalg"


def compute_class(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``"blas"`` when the body of ``fn`` calls a matrix product, else ``"fft"`` when it calls an
    FFT, else ``"other"`` (module docstring).

    Examples
    --------
    >>> import ast
    >>> from streammap.directives.kernel_class import compute_class
    >>> compute_class(ast.parse("def f(a, b):\\n    return a @ b").body[0])
    'blas'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.fft.fft(xp.sin(x))").body[0])
    'fft'
    >>> compute_class(ast.parse("def f(x):\\n    return xp.sin(x) * 2").body[0])
    'other'
    """
    found = OTHER
    for node in ast.walk(fn):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            return BLAS
        if isinstance(node, ast.Call):
            if _is_matrix_call(node.func):
                return BLAS
            if _is_fft_call(node.func):
                found = FFT
    return found


def _is_fft_call(func: ast.expr) -> bool:
    """Whether a called expression names an FFT (``xp.fft.rfft``, ``scipy.fft.fft``, ``fft``)."""
    if isinstance(func, ast.Name):
        return func.id in FFT_CALLS
    if isinstance(func, ast.Attribute):
        return func.attr in FFT_CALLS or any(
            isinstance(part, ast.Attribute) and part.attr == "fft" or isinstance(part, ast.Name) and part.id == "fft"
            for part in _chain(func.value))
    return False


def _is_matrix_call(func: ast.expr) -> bool:
    """Whether a called expression names a matrix product (``xp.matmul``, ``a.dot``, ``np.linalg.x``)."""
    if isinstance(func, ast.Name):
        return func.id in MATRIX_CALLS
    if isinstance(func, ast.Attribute):
        if func.attr in MATRIX_CALLS:
            return True
        return any(isinstance(part, ast.Attribute) and part.attr == LINALG_NAMESPACE
                   or isinstance(part, ast.Name) and part.id == LINALG_NAMESPACE
                   for part in _chain(func.value))
    return False


def _chain(expr: ast.expr):
    """``a.b.c`` -> the nodes ``a.b.c``, ``a.b``, ``a`` (stops at the first non-attribute)."""
    while True:
        yield expr
        if not isinstance(expr, ast.Attribute):
            return
        expr = expr.value
