"""A data-parallel batch program: escape times of the Mandelbrot set, row by row.

Every row of the image is independent of the others, so the one heavy kernel, ``escape``, is
declared ``split=0``: StreamMAP may cut its input (the rows' imaginary parts) into k pieces, run
k shards on k devices and join their results, when the cost model says that pays (a large image,
many iterations). The result is the same image, bit for bit: every pixel is computed by the same
operations whichever shard it falls in.

    python samples/mandelbrot.py
    streammap compile samples/mandelbrot.py --cluster ../shared/benchmarks/clusters/hetero-2x4.yaml -o m.yaml
    streammap run m.yaml --emulate
"""

import sys

import numpy as np

# @stream param
ROWS = 1024                 # image height
# @stream param
COLS = 1024                 # image width
# @stream param
ITER = 128                  # iterations per pixel


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=ROWS, out=8*ROWS)
def rows():
    """The imaginary part of each row's points."""
    return np.linspace(-1.25, 1.25, ROWS)


# bytes: what NumPy moves. Every step is eight array passes over the points, each reading its
# operands and writing a temporary (z*z 32, +c 48, re*re 24, im*im 24, + 24, <= 9, count+= 9,
# where 33): about 200 bytes per point and step, not the 24 per point of a fused loop.
# @stream kernel(flops=10*ITER*ROWS*COLS, bytes=200*ITER*ROWS*COLS, out=4*ROWS*COLS, split=0)
def escape(ys):
    """For each point c of the rows ``ys``: how many of ITER steps of z = z*z + c stay within |z| <= 2."""
    xp = xp_of(ys)
    c = xp.linspace(-2.0, 0.5, COLS)[None, :] + 1j * ys[:, None]
    z = xp.zeros_like(c)
    count = xp.zeros(c.shape, dtype=xp.int32)
    for _ in range(ITER):
        z = z * z + c
        inside = z.real * z.real + z.imag * z.imag <= 4.0
        count += inside
        z = xp.where(inside, z, 2.0)        # escaped points stay bounded
    return count


# flops and bytes: what np.bincount executes, counted one per element of each pass as flops
# clauses count elementwise work: it casts the int32 counts to intp (read 4, write 8 bytes), finds
# their minimum and maximum (two compares, read 8) and counts (one increment, read 8): four
# operations and 28 bytes per pixel, not the one increment and 4 bytes of the counts alone.
# @stream kernel(flops=4*ROWS*COLS, bytes=28*ROWS*COLS, out=8*(ITER+1))
def histogram(counts):
    """How many pixels escaped after each number of steps."""
    return xp_of(counts).bincount(counts.ravel(), minlength=ITER + 1)


# @stream graph
def mandelbrot():
    counts = escape(rows())
    return {"counts": counts, "histogram": histogram(counts)}


if __name__ == "__main__":
    out = mandelbrot()
    print(f"mandelbrot: {out['counts'].shape[0]}x{out['counts'].shape[1]} pixels, "
          f"{int((out['counts'] == ITER).sum())} inside, checksum {int(out['counts'].sum())}")
