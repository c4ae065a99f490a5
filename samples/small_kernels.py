"""A parameter sweep of small kernels that each need a quarter of a GPU (the ``share`` clause).

Each of JOBS jobs simulates heat diffusion along a rod of CELLS cells for STEPS explicit steps,
with its own diffusion coefficient; a last kernel stacks the final temperatures. One rod is far
too small to fill a modern GPU, so each kernel declares ``share=SHARE``: the mapper may run up to
1 / SHARE of them at once on one device (several CUDA streams), and ``-D SHARE=1`` gives the
whole-device placement to compare with.

    python samples/small_kernels.py
    streammap compile samples/small_kernels.py --cluster local -o sweep.yaml && streammap run sweep.yaml
"""

import numpy as np

# @stream param
JOBS = 32
# @stream param
CELLS = 4096
# @stream param
STEPS = 200
# @stream param
SHARE = 0.25


# bytes: what NumPy moves, not the fused stencil's 16 per cell: each step makes five array passes
# (2.0*u, -, +, a*, +=), each reading its operands and writing a temporary: 104 bytes per cell.
# @stream kernel(flops=5*CELLS*STEPS, bytes=104*CELLS*STEPS, out=8*CELLS, share=SHARE)
def rod(j):
    """Temperatures after STEPS steps of u += a * laplacian(u), a hot spot in the middle."""
    a = 0.05 + 0.4 * j / max(1, JOBS - 1)
    u = np.zeros(CELLS)
    u[CELLS // 2] = 1.0
    for _ in range(STEPS):
        u[1:-1] += a * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return u


# @stream kernel(flops=JOBS*CELLS, out=8*JOBS*CELLS)
def stack(*rods):
    """The rods' final temperatures, one row per job."""
    return np.stack([np.asarray(r) for r in rods])


# @stream graph
def sweep():
    return stack(*[rod(j) for j in range(JOBS)])


if __name__ == "__main__":
    out = sweep()
    print(f"small_kernels: {out.shape[0]} rods, peak temperature {out.max():.4f}")
