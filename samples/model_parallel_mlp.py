"""Model parallelism: an MLP whose layers do not fit on one device.

LAYERS dense+ReLU layers of WIDTH x WIDTH float32 weights (1 MiB each at WIDTH=512: 8 MiB in
all) process BATCHES batches. On ``samples/clusters/tiny-gpus.yaml`` (four emulated GPUs of
6 MiB) no device can hold every layer, so the compiler cuts the network into consecutive groups
of layers by memory and speed, one group per device, and streams the batches through them
(``--strategy model``; ``auto`` chooses it when its estimate is the best).

    python samples/model_parallel_mlp.py
    streammap compile samples/model_parallel_mlp.py --cluster samples/clusters/tiny-gpus.yaml --strategy model -o mp.yaml
    streammap run mp.yaml --emulate
"""

import sys

import numpy as np

# @stream param
BATCHES = 4
# @stream param
ROWS = 64           # rows per batch
# @stream param
WIDTH = 512         # features
# @stream param
LAYERS = 8


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=2*WIDTH*WIDTH, out=4*WIDTH*WIDTH)
def weights(layer):
    """Layer weights, He-initialised from a seed per layer."""
    rng = np.random.default_rng(layer)
    return rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * np.float32(np.sqrt(2.0 / WIDTH))


# @stream kernel(flops=ROWS*WIDTH, out=4*ROWS*WIDTH)
def load_batch(b):
    """Batch b of the input (seeded)."""
    return np.random.default_rng(1000 + b).standard_normal((ROWS, WIDTH), dtype=np.float32)


# @stream kernel(flops=2*ROWS*WIDTH*WIDTH, bytes=4*(2*ROWS*WIDTH + WIDTH*WIDTH), out=4*ROWS*WIDTH)
def dense_relu(x, w):
    """max(x @ w, 0)."""
    return xp_of(x).maximum(x @ w, 0)


# @stream kernel(bytes=8*BATCHES*ROWS*WIDTH, out=4*BATCHES*ROWS*WIDTH)
def concat(*parts):
    return xp_of(parts[0]).concatenate(parts, axis=0)


# @stream graph
def mlp():
    w = [weights(layer) for layer in range(LAYERS)]
    outs = []
    for b in range(BATCHES):
        h = load_batch(b)
        for layer in range(LAYERS):
            h = dense_relu(h, w[layer])
        outs.append(h)
    return concat(*outs)


if __name__ == "__main__":
    y = mlp()
    print(f"model_parallel_mlp: output {y.shape}, mean {float(y.mean()):.6f}, checksum {float(y.sum()):.4f}")
