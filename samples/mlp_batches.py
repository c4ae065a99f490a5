"""A batch pipeline: a small MLP's forward pass over many batches.

Each batch is loaded, passes through DEPTH dense+ReLU layers that share their weights, and ends in
a row-wise softmax; the batches are independent (data parallelism), the layers of one batch form a
chain, and the weights fan out to every batch. The results are concatenated in batch order.

    python samples/mlp_batches.py
    streammap compile samples/mlp_batches.py --cluster local -o mlp.yaml && streammap run mlp.yaml
"""

import sys

import numpy as np

# @stream param
BATCHES = 8
# @stream param
ROWS = 256        # rows per batch
# @stream param
WIDTH = 256       # features
# @stream param
DEPTH = 3         # hidden layers


def xp_of(a):
    """NumPy or CuPy, whichever module the array ``a`` belongs to (kernels stay library-neutral)."""
    return sys.modules[type(a).__module__.partition(".")[0]]


# @stream kernel(flops=ROWS*WIDTH, out=4*ROWS*WIDTH)
def load_batch(b):
    """Batch b of the input (seeded, so every run sees the same data)."""
    return np.random.default_rng(1000 + b).standard_normal((ROWS, WIDTH), dtype=np.float32)


# @stream kernel(flops=WIDTH*WIDTH, out=4*WIDTH*WIDTH)
def weights(layer):
    """Layer weights, He-initialised from a seed per layer."""
    rng = np.random.default_rng(layer)
    return (rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * np.float32(np.sqrt(2.0 / WIDTH)))


# @stream kernel(flops=2*ROWS*WIDTH*WIDTH, bytes=4*(2*ROWS*WIDTH + WIDTH*WIDTH), out=4*ROWS*WIDTH, split=0)
def dense_relu(x, w):
    """max(x @ w, 0)."""
    return xp_of(x).maximum(x @ w, 0)


# @stream kernel(flops=5*ROWS*WIDTH, bytes=8*ROWS*WIDTH, out=4*ROWS*WIDTH, split=0)
def softmax(x):
    xp = xp_of(x)
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# @stream kernel(bytes=8*BATCHES*ROWS*WIDTH, out=4*BATCHES*ROWS*WIDTH)
def concat(*parts):
    return xp_of(parts[0]).concatenate(parts, axis=0)


# @stream graph
def mlp():
    w = [weights(layer) for layer in range(DEPTH)]
    outs = []
    for b in range(BATCHES):
        h = load_batch(b)
        for layer in range(DEPTH):
            h = dense_relu(h, w[layer])
        outs.append(softmax(h))
    return concat(*outs)


if __name__ == "__main__":
    y = mlp()
    print(f"mlp_batches: output {y.shape}, row sums {float(y.sum(axis=1).mean()):.6f}, "
          f"checksum {float((y * np.arange(y.shape[1])).sum()):.4f}")
