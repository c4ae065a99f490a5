"""FM radio: a software receiver with an 8-band equaliser (the StreamIt benchmark, with FFTs).

A complex baseband FM signal is low-pass filtered, demodulated to audio, split into BANDS
frequency bands (each an FFT band-pass with its own gain: a static fan-out), and the bands are
summed back into one signal (a fan-in). The bands are independent, so StreamMAP spreads them over
the devices it has.

Run it directly (plain NumPy, no StreamMAP involved)::

    python samples/fm_radio.py

or through StreamMAP::

    streammap compile samples/fm_radio.py --cluster local -D N=65536 -o plan.yaml
    streammap run plan.yaml -o out.npz
"""

import math
import sys

import numpy as np

# @stream param
N = 1 << 16                 # samples in the block
# @stream param
BANDS = 8                   # equaliser bands

RATE = 250_000.0            # samples per second
DEVIATION = 75_000.0        # FM frequency deviation (Hz)
CUTOFF = 100_000.0          # low-pass cut-off before demodulation (Hz)


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=40*N, out=16*N)
def source():
    """A block of FM-modulated baseband: three audio tones plus a little noise (seeded)."""
    t = np.arange(N) / RATE
    message = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 3_000 * t) + 0.2 * np.sin(2 * np.pi * 12_000 * t)
    phase = 2 * np.pi * DEVIATION * np.cumsum(message) / RATE
    noise = np.random.default_rng(7).normal(scale=0.01, size=(2, N))
    return np.exp(1j * phase) + noise[0] + 1j * noise[1]


# @stream kernel(flops=10*N*log2(N), bytes=48*N, out=16*N)
def lowpass(x):
    """Keep |f| < CUTOFF (an ideal FFT low-pass)."""
    xp = xp_of(x)
    spectrum = xp.fft.fft(x)
    freqs = xp.fft.fftfreq(x.shape[0], d=1.0 / RATE)
    spectrum[xp.abs(freqs) >= CUTOFF] = 0
    return xp.fft.ifft(spectrum)


# @stream kernel(flops=12*N, bytes=24*N, out=8*N)
def demodulate(x):
    """FM discriminator: the phase step between samples is proportional to the audio."""
    xp = xp_of(x)
    step = xp.angle(x[1:] * xp.conj(x[:-1])) * RATE / (2 * np.pi * DEVIATION)
    return xp.concatenate([step[:1], step])


def band_edges(k):
    """Band k of BANDS log-spaced bands between 50 Hz and 20 kHz."""
    lo, hi = math.log(50.0), math.log(20_000.0)
    return math.exp(lo + (hi - lo) * k / BANDS), math.exp(lo + (hi - lo) * (k + 1) / BANDS)


# @stream kernel(flops=5*N*log2(N), bytes=24*N, out=8*N)
def bandpass(y, k):
    """Band k of the equaliser, with gain 1 + k/BANDS (treble lifted)."""
    xp = xp_of(y)
    spectrum = xp.fft.rfft(y)
    freqs = xp.fft.rfftfreq(y.shape[0], d=1.0 / RATE)
    lo, hi = band_edges(k)
    spectrum[(freqs < lo) | (freqs >= hi)] = 0
    return (1.0 + k / BANDS) * xp.fft.irfft(spectrum, n=y.shape[0])


# @stream kernel(flops=N*BANDS, bytes=8*N*BANDS, out=8*N)
def combine(*bands):
    """Sum the bands back into one audio signal."""
    total = bands[0].copy()
    for b in bands[1:]:
        total += b
    return total


# @stream graph
def fm_radio():
    x = source()
    audio = demodulate(lowpass(x))
    bands = [bandpass(audio, k) for k in range(BANDS)]
    return combine(*bands)


if __name__ == "__main__":
    out = fm_radio()
    print(f"fm_radio: {out.shape[0]} samples, rms {float(np.sqrt(np.mean(out ** 2))):.6f}, "
          f"peak {float(np.max(np.abs(out))):.6f}")
