"""Tiled Cholesky factorisation: a linear-algebra DAG of POTRF, TRSM, SYRK and GEMM on tiles.

The T×T-tile symmetric positive definite matrix A (a Kac–Murdock–Szegő matrix,
A[p, q] = RHO ** |p - q|) is factorised as A = L Lᵀ tile by tile, the classic right-looking
algorithm that task runtimes (StarPU, PaRSEC) schedule. Each tile operation is a task; the loops
below are unrolled by StreamMAP into the DAG.

    python samples/tiled_cholesky.py
    streammap compile samples/tiled_cholesky.py --cluster local -D T=6 -o chol.yaml && streammap run chol.yaml
"""

import sys

import numpy as np

# @stream param
T = 6            # tiles per side
# @stream param
B = 256          # tile size

RHO = 0.5


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=3*B*B, out=8*B*B)
def tile(i, j):
    """Tile (i, j) of A, computed from global indices so that no task needs the whole matrix."""
    p = i * B + np.arange(B)[:, None]
    q = j * B + np.arange(B)[None, :]
    return RHO ** np.abs(p - q).astype(np.float64)


# @stream kernel(flops=B**3/3, bytes=16*B*B, out=8*B*B)
def potrf(a):
    """L_kk = chol(A_kk)."""
    return xp_of(a).linalg.cholesky(a)


# @stream kernel(flops=B**3, bytes=24*B*B, out=8*B*B)
def trsm(l_kk, a_ik):
    """L_ik = A_ik L_kkᵀ⁻¹ (a triangular solve, written as a general solve for portability)."""
    return xp_of(a_ik).linalg.solve(l_kk, a_ik.T).T


# @stream kernel(flops=B**3, bytes=24*B*B, out=8*B*B)
def syrk(a_ii, l_ik):
    """A_ii -= L_ik L_ikᵀ."""
    return a_ii - l_ik @ l_ik.T


# @stream kernel(flops=2*B**3, bytes=32*B*B, out=8*B*B)
def gemm(a_ij, l_ik, l_jk):
    """A_ij -= L_ik L_jkᵀ."""
    return a_ij - l_ik @ l_jk.T


# @stream kernel(bytes=8*T*T*B*B, out=8*T*T*B*B)
def assemble(*tiles):
    """The lower-triangular factor L from its tiles, given row by row (L_00, L_10, L_11, L_20, ...)."""
    xp = xp_of(tiles[0])
    full = xp.zeros((T * B, T * B))
    n = 0
    for i in range(T):
        for j in range(i + 1):
            full[i * B:(i + 1) * B, j * B:(j + 1) * B] = tiles[n]
            n += 1
    return full


# @stream graph
def cholesky():
    A = [[tile(i, j) for j in range(i + 1)] for i in range(T)]
    for k in range(T):
        A[k][k] = potrf(A[k][k])
        for i in range(k + 1, T):
            A[i][k] = trsm(A[k][k], A[i][k])
        for i in range(k + 1, T):
            A[i][i] = syrk(A[i][i], A[i][k])
            for j in range(k + 1, i):
                A[i][j] = gemm(A[i][j], A[i][k], A[j][k])
    return assemble(*[A[i][j] for i in range(T) for j in range(i + 1)])


if __name__ == "__main__":
    L = cholesky()
    n = T * B
    idx = np.arange(n)
    A = RHO ** np.abs(idx[:, None] - idx[None, :]).astype(np.float64)
    print(f"tiled_cholesky: {T}x{T} tiles of {B}, |A - L Lᵀ| / |A| = {np.linalg.norm(A - L @ L.T) / np.linalg.norm(A):.3e}")
