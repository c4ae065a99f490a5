"""A fake CuPy, to exercise the executor's GPU path on machines without one, and the count of real
CUDA devices (tests on a real GPU skip on 0).

Tests get the fake through the ``fake_cupy`` fixture (tests/conftest.py), which also installs it as
``cupy`` for the test's duration; :func:`make_fake_cupy` builds one without installing it.
"""

from __future__ import annotations

import threading as _threading
import time as _time
import types as _types

import numpy as _np


def cuda_device_count() -> int:
    """CUDA devices CuPy sees here (0 without CuPy, a driver or a device): real-GPU tests skip on 0."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001
        return 0


# -- a fake CuPy, to exercise the executor's GPU path on machines without one -----------------
# It models what the executor relies on: per-thread current device and stream, streams and events,
# arrays that live on one device and refuse to mix with arrays of another device or with NumPy
# arrays (as CuPy's kernels do), uploads, peer copies and downloads. Events complete at once.

def make_fake_cupy(n_devices: int = 2) -> _types.ModuleType:
    tls = _threading.local()
    stats = {"uploads": 0, "peer_copies": 0, "downloads": 0, "waits": 0, "null_stream_uploads": 0,
             "ipc_copies": 0, "ipc_open": 0}
    # device memory by address, for the raw calls (cudaMemcpy*, cudaIpc*): an array's address is
    # that of its NumPy buffer; a Memory is a byte buffer that disappears when it is freed
    memory: dict = {}

    def _bytes(ptr):
        try:
            return memory[ptr].reshape(-1).view(_np.uint8)
        except KeyError:
            raise RuntimeError(f"cudaErrorInvalidValue: no device memory at {ptr:#x}") from None

    def current() -> int:
        return getattr(tls, "device", 0)

    def streams() -> dict:
        if not hasattr(tls, "streams"):
            tls.streams = {}
        return tls.streams

    class Device:
        def __init__(self, i=None):
            self.id = current() if i is None else i
            if not 0 <= self.id < n_devices:
                raise RuntimeError(f"invalid device ordinal {self.id}")

        def __enter__(self):
            tls.__dict__.setdefault("dev_stack", []).append(current())
            tls.device = self.id
            return self

        def __exit__(self, *exc):
            tls.device = tls.dev_stack.pop()

    class Event:
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            self.t = None

        @property
        def done(self):
            return self.t is not None

        def record(self, stream=None):
            self.t = _time.perf_counter()

        def synchronize(self):
            assert self.t is not None, "synchronising an event never recorded"

    class Stream:
        null = None

        def __init__(self, null=False, non_blocking=False, ptds=False):
            self.is_null = null
            self.ptr = 0
            self.device_id = -1 if null else current()

        def __enter__(self):
            dev = current() if self.device_id == -1 else self.device_id
            if dev != current():
                raise RuntimeError(f"stream of device {dev} used while device {current()} is current")
            streams().setdefault(dev, []).append(self)
            return self

        def __exit__(self, *exc):
            streams()[current() if self.device_id == -1 else self.device_id].pop()

        def record(self, event=None):
            event = event or Event()
            event.record(self)
            return event

        def wait_event(self, event):
            assert event.t is not None, "waiting on an event never recorded"
            stats["waits"] += 1

        def synchronize(self):
            pass

    Stream.null = Stream(null=True)

    def current_stream():
        stack = streams().get(current())
        return stack[-1] if stack else Stream.null

    class Pointer:
        def __init__(self, arr):
            self.arr = arr
            self.device_id = arr.device_id

        @property
        def ptr(self):
            a = self.arr._a
            memory[a.__array_interface__["data"][0]] = a
            return a.__array_interface__["data"][0]

        def copy_from_device_async(self, src, size, stream=None):
            assert stream is not None and stream.device_id == self.device_id
            assert size == src.arr.nbytes
            self.arr._a[...] = src.arr._a
            stats["peer_copies"] += 1

    class ndarray:
        __array_priority__ = 100

        def __init__(self, a, device_id):
            self._a = a
            self.device_id = device_id

        data = property(lambda self: Pointer(self))
        shape = property(lambda self: self._a.shape)
        dtype = property(lambda self: self._a.dtype)
        size = property(lambda self: self._a.size)
        nbytes = property(lambda self: self._a.nbytes)
        flags = property(lambda self: self._a.flags)
        ndim = property(lambda self: self._a.ndim)

        def _here(self):
            if self.device_id != current():
                raise ValueError(f"array on device {self.device_id} used while device {current()} is current")

        def _operand(self, other):
            self._here()
            if isinstance(other, ndarray):
                other._here()
                return other._a
            if isinstance(other, _np.ndarray):
                raise TypeError("Unsupported type <class 'numpy.ndarray'>")
            return other

        def get(self, stream=None):
            stats["downloads"] += 1
            return self._a.copy()

        def copy(self):
            self._here()
            return ndarray(self._a.copy(), self.device_id)

        def __len__(self):
            return len(self._a)

        def __getitem__(self, key):
            self._here()
            return ndarray(self._a[key], self.device_id)

        def __add__(self, other):
            return ndarray(self._a + self._operand(other), self.device_id)

        __radd__ = __add__

        def __mul__(self, other):
            return ndarray(self._a * self._operand(other), self.device_id)

        __rmul__ = __mul__

        def __sub__(self, other):
            return ndarray(self._a - self._operand(other), self.device_id)

        def __iadd__(self, other):
            self._a += self._operand(other)
            return self

        def sum(self):
            self._here()
            return ndarray(_np.asarray(self._a.sum()), self.device_id)

    ndarray.__module__ = "cupy"

    def asarray(x, dtype=None):
        if isinstance(x, ndarray):
            if x.device_id == current():
                return x
            out = empty(x.shape, x.dtype)
            out._a[...] = x._a
            return out
        if current_stream().is_null:
            stats["null_stream_uploads"] += 1
        stats["uploads"] += 1
        return ndarray(_np.array(x, dtype=dtype, copy=True), current())

    def empty(shape, dtype=float):
        return ndarray(_np.empty(shape, dtype), current())

    def ascontiguousarray(a):
        a._here()
        return ndarray(_np.ascontiguousarray(a._a), a.device_id)

    class Pool:
        def used_bytes(self):
            return 4096

    class Memory:                         # cudaMalloc'ed bytes, freed with the object
        def __init__(self, size):
            self.device_id = current()
            self._buf = _np.zeros(size, _np.uint8)
            self.ptr = self._buf.__array_interface__["data"][0]
            memory[self.ptr] = self._buf

        def __del__(self):
            memory.pop(self.ptr, None)

    def memcpy_async(dst, src, size, kind, stream):
        _bytes(dst)[:size] = _bytes(src)[:size]

    def memcpy_peer_async(dst, dst_device, src, src_device, size, stream):
        _bytes(dst)[:size] = _bytes(src)[:size]
        stats["ipc_copies"] += 1

    def ipc_get(ptr):
        _bytes(ptr)
        return b"fake-ipc:" + str(ptr).encode()

    def ipc_open(handle, flags):
        ptr = int(handle.split(b":")[1])
        _bytes(ptr)                        # a freed allocation cannot be opened
        stats["ipc_open"] += 1
        return ptr

    pool = Pool()
    cupy = _types.ModuleType("cupy")
    cupy.ndarray = ndarray
    cupy.asarray = asarray
    cupy.empty = empty
    cupy.ascontiguousarray = ascontiguousarray
    cupy.asnumpy = lambda a: a.get() if isinstance(a, ndarray) else _np.asarray(a)
    cupy.get_default_memory_pool = lambda: pool
    cupy.cuda = _types.SimpleNamespace(
        Device=Device, Stream=Stream, Event=Event, Memory=Memory,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        runtime=_types.SimpleNamespace(
            getDeviceCount=lambda: n_devices, memcpyAsync=memcpy_async, memcpyPeerAsync=memcpy_peer_async,
            memcpyDeviceToDevice=3, ipcGetMemHandle=ipc_get, ipcOpenMemHandle=ipc_open,
            ipcCloseMemHandle=lambda ptr: None, cudaIpcMemLazyEnablePeerAccess=1),
    )
    cupy.fake_stats = stats
    return cupy
