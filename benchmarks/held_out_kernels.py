"""Held-out kernels for ``estimate_accuracy.py --first-estimate``: one of each compute class that
the rules for random numbers, transcendental functions, Gram products (``x @ x.T``), real FFTs
by working set and scans were written for, but that none of the samples the rules were checked
on contains; and a complex element-wise kernel beside mandelbrot's, at another size.

Each of JOBS jobs draws a B×B block of normal random numbers (``noise``: class ``random``), damps
it with a cosine and a fractional power (``wave``: ``transcendental``), shrinks it towards zero
with plain arithmetic (``shrink``, a soft threshold: ``other``), drives a damped complex
resonator with it for STEPS steps and keeps its power (``resonate``: complex arithmetic, class
``other``, priced at the element-wise rate; complex arrays of 576 KiB at B=192, where
mandelbrot's are 1 MiB), low-passes the flattened block
with a real FFT of B² points (``spectrum``: ``rfft``; 36,864 points at B=192, a length that is
not a power of two, measured by no discovery), takes each row's drawdown, how far its running sum
is below the running maximum of that sum (``drawdown``: two scans, class ``scan``), and forms its
Gram matrix (``gram``: ``x @ x.T``, class ``gram``); a last kernel adds the Gram matrices. The
clauses count as the README counts them, without looking at how fast NumPy runs each operation:
one FLOP per random number and per element of each elementwise operation or scan, ``5 n log2 n``
for a real FFT and its inverse of n points, ``B³`` for the symmetric product (the BLAS ``syrk``
convention, half the full product's ``2 B³``).

    python benchmarks/held_out_kernels.py
"""

import numpy as np

# @stream param
JOBS = 4
# @stream param
B = 192

OMEGA = 3.0
THRESHOLD = 0.1
# @stream param
STEPS = 24
#: The resonator's factor per step: a rotation by 0.3 rad, damped to 0.9 (|z| stays bounded).
RESONANCE = 0.9 * complex(0.955336489125606, 0.29552020666133955)


# @stream kernel(flops=B*B, out=8*B*B)
def noise(i):
    """A block of normal random numbers with mean 1 and deviation 0.5."""
    return np.random.default_rng(100 + i).normal(1.0, 0.5, size=(B, B))


# @stream kernel(flops=5*B*B, bytes=32*B*B, out=8*B*B)
def wave(x):
    """cos(OMEGA x) |x| ** 1.5, element by element (abs, multiply, cos, power, multiply)."""
    return np.cos(OMEGA * x) * np.abs(x) ** 1.5


# @stream kernel(flops=5*B*B, bytes=16*B*B, out=8*B*B)
def shrink(x):
    """sign(x) max(|x| - T, 0), element by element (sign, abs, subtract, maximum, multiply)."""
    return np.sign(x) * np.maximum(np.abs(x) - THRESHOLD, 0.0)


# bytes: a step reads z and writes z * R (32 per point), then reads that and x and writes the sum
# (40); the power reads the real and imaginary parts and writes three float64 arrays (72).
# @stream kernel(flops=2*STEPS*B*B+3*B*B, bytes=72*STEPS*B*B+72*B*B, out=8*B*B)
def resonate(x):
    """|z|² after STEPS steps of z = R z + x from z = 0 (R = RESONANCE, complex arithmetic)."""
    z = np.zeros(x.shape, dtype=np.complex128)
    for _ in range(STEPS):
        z = z * RESONANCE + x
    return z.real * z.real + z.imag * z.imag


# @stream kernel(flops=5*B*B*log2(B*B), bytes=24*B*B, out=8*B*B)
def spectrum(x):
    """The block with the upper half of its flattened spectrum removed (a real FFT and its inverse)."""
    f = np.fft.rfft(x.ravel())
    f[f.size // 2:] = 0
    return np.fft.irfft(f, n=x.size).reshape(x.shape)


# @stream kernel(flops=3*B*B, bytes=24*B*B, out=8*B*B)
def drawdown(x):
    """Per row: the running maximum of the running sum, minus the running sum (two scans, a subtraction)."""
    c = np.cumsum(x, axis=1)
    return np.maximum.accumulate(c, axis=1) - c


# @stream kernel(flops=B**3, bytes=16*B*B, out=8*B*B)
def gram(x):
    """The Gram matrix x xᵀ."""
    return x @ x.T


# @stream kernel(flops=JOBS*B*B, bytes=8*JOBS*B*B, out=8*B*B)
def total(*grams):
    """The sum of the Gram matrices."""
    out = grams[0].copy()
    for g in grams[1:]:
        out += g
    return out


# @stream graph
def held_out():
    return total(*[gram(drawdown(spectrum(resonate(shrink(wave(noise(i))))))) for i in range(JOBS)])


if __name__ == "__main__":
    print(f"held_out_kernels: {JOBS} Gram matrices of side {B}, trace of the sum {np.trace(held_out()):.4g}")
