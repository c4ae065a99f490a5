"""FM radio as a stream: frames of baseband flow through the receiver's stages (a pipeline).

Each item is one frame of FRAME samples. A frame is received (generated from its index, so any
device can make any frame), low-pass filtered, demodulated, split into BANDS equaliser bands,
summed, and smoothed. Two stages keep state from one frame to the next, as a real receiver does:
the demodulator needs the last sample of the previous frame for the phase step across the frame
boundary, and the smoother's moving average runs over the boundary. Those two are ``stateful``:
StreamMAP runs each on one device, frames in order; the stateless stages are replicated where
that raises throughput.

    python samples/fm_stream.py
    streammap compile samples/fm_stream.py --cluster ../shared/benchmarks/clusters/hetero-2x4.yaml -o s.yaml
    streammap run s.yaml --emulate
"""

import math
import sys

import numpy as np

# @stream param
FRAMES = 32                 # items: frames in the stream
# @stream param
FRAME = 1 << 14             # samples per frame
# @stream param
BANDS = 4                   # equaliser bands

RATE = 250_000.0            # samples per second
DEVIATION = 75_000.0        # FM frequency deviation (Hz)
CUTOFF = 100_000.0          # low-pass cut-off before demodulation (Hz)
TONES = ((0.5, 440.0), (0.3, 3_000.0), (0.2, 12_000.0))   # (amplitude, Hz) of the message
SMOOTH = 8                  # taps of the output moving average


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=60*FRAME, out=16*FRAME)
def receive(i):
    """Frame i of FM baseband: the phase is the message's integral in closed form, plus noise."""
    t = (i * FRAME + np.arange(FRAME)) / RATE
    phase = sum(-DEVIATION * a / f * np.cos(2 * np.pi * f * t) for a, f in TONES)
    noise = np.random.default_rng(1000 + i).normal(scale=0.01, size=(2, FRAME))
    return np.exp(1j * phase) + noise[0] + 1j * noise[1]


# @stream kernel(flops=10*FRAME*log2(FRAME), bytes=48*FRAME, out=16*FRAME)
def lowpass(x):
    """Keep |f| < CUTOFF in this frame (an ideal FFT low-pass)."""
    xp = xp_of(x)
    spectrum = xp.fft.fft(x)
    spectrum[xp.abs(xp.fft.fftfreq(x.shape[0], d=1.0 / RATE)) >= CUTOFF] = 0
    return xp.fft.ifft(spectrum)


_demod = {"last": None}


# @stream kernel(flops=12*FRAME, bytes=24*FRAME, out=8*FRAME, stateful=True)
def demodulate(x):
    """FM discriminator across frames: the first step uses the previous frame's last sample."""
    xp = xp_of(x)
    last = x[:1] if _demod["last"] is None else xp.asarray(_demod["last"])
    _demod["last"] = x[-1:].copy()
    prev = xp.concatenate([last, x[:-1]])
    return xp.angle(x * xp.conj(prev)) * RATE / (2 * np.pi * DEVIATION)


def band_edges(k):
    """Band k of BANDS log-spaced bands between 50 Hz and 20 kHz."""
    lo, hi = math.log(50.0), math.log(20_000.0)
    return math.exp(lo + (hi - lo) * k / BANDS), math.exp(lo + (hi - lo) * (k + 1) / BANDS)


# @stream kernel(flops=5*FRAME*log2(FRAME), bytes=24*FRAME, out=8*FRAME)
def bandpass(y, k):
    """Band k of the equaliser, with gain 1 + k/BANDS."""
    xp = xp_of(y)
    spectrum = xp.fft.rfft(y)
    freqs = xp.fft.rfftfreq(y.shape[0], d=1.0 / RATE)
    lo, hi = band_edges(k)
    spectrum[(freqs < lo) | (freqs >= hi)] = 0
    return (1.0 + k / BANDS) * xp.fft.irfft(spectrum, n=y.shape[0])


# @stream kernel(flops=FRAME*BANDS, bytes=8*FRAME*BANDS, out=8*FRAME)
def combine(*bands):
    total = bands[0].copy()
    for b in bands[1:]:
        total += b
    return total


_smooth = {"tail": None}


# @stream kernel(flops=4*FRAME, bytes=16*FRAME, out=8*FRAME, stateful=True)
def smooth(y):
    """A SMOOTH-tap moving average that runs over frame boundaries (keeps the last taps)."""
    xp = xp_of(y)
    tail = xp.zeros(SMOOTH - 1) if _smooth["tail"] is None else xp.asarray(_smooth["tail"])
    joined = xp.concatenate([tail, y])
    _smooth["tail"] = joined[-(SMOOTH - 1):].copy()
    csum = xp.cumsum(xp.concatenate([xp.zeros(1), joined]))
    return (csum[SMOOTH:] - csum[:-SMOOTH]) / SMOOTH


# @stream pipeline(items=FRAMES)
def fm_stream(i):
    x = lowpass(receive(i))
    audio = demodulate(x)
    bands = [bandpass(audio, k) for k in range(BANDS)]
    return smooth(combine(*bands))


if __name__ == "__main__":
    out = np.stack([fm_stream(i) for i in range(FRAMES)])
    print(f"fm_stream: {out.shape[0]} frames of {out.shape[1]} samples, rms {float(np.sqrt(np.mean(out ** 2))):.6f}, "
          f"peak {float(np.max(np.abs(out))):.6f}")
