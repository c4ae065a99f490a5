"""Device-to-device hand-offs between the Ray actors of one node, through CUDA IPC.

The Ray executor runs each plan device in its own actor process. A result that a task on another
GPU of the *same node* consumes should go from GPU to GPU (NVLink or PCIe peer-to-peer), not
through host memory and Ray's object store, which costs a device-to-host and a host-to-device
copy, each at a fraction of the peer bandwidth. CUDA's inter-process memory handles do that:

Producer (:func:`share`, in the producing actor, after its task's stream has finished)
    copies each CuPy array of the result into its own ``cudaMalloc`` allocation (a
    :class:`cupy.cuda.Memory`, outside CuPy's pool, so the handle covers exactly the array and
    no pooled neighbour is exposed or recycled under the consumer), takes its IPC handle
    (``cudaIpcGetMemHandle``) and returns a picklable description (:class:`SharedArray`: handle,
    shape, dtype, CUDA ordinal) in place of the array. The allocations stay alive in the
    producer (``keep``) until the driver says every consumer has copied them.
Consumer (:func:`receive`, in the consuming actor)
    opens the handle (``cudaIpcOpenMemHandle`` with lazy peer access), copies the bytes into an
    array of its own GPU with ``cudaMemcpyPeerAsync`` on its stream, waits for the copy, and
    closes the handle. The copy is the only data movement: one peer transfer per edge.

Both processes must see both GPUs, so the executor starts GPU actors with
``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1`` (Ray then leaves ``CUDA_VISIBLE_DEVICES`` as the
node has it) and each actor selects its own GPU from ``ray.get_gpu_ids()``
(:func:`cuda_ordinal`), as Ray's own NCCL collectives and vLLM's workers do.

Tuples, lists and dict values are walked; other values (scalars, NumPy arrays) are passed as
they are. A handle that cannot be opened (its producer died) raises :class:`ShareLost`, which the
executor treats like any input lost with a node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from streammap.runtime.devices import leaves, map_leaves

#: The environment variable that stops Ray from narrowing ``CUDA_VISIBLE_DEVICES`` per actor.
NOSET_VISIBLE = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class SharedArray:
    """A CuPy array exported by another process of this node (see the module docstring)."""

    handle: bytes
    shape: tuple
    dtype: str
    nbytes: int
    device: int          # the CUDA ordinal of the producer's GPU (the node's numbering)


class ShareLost(Exception):
    """A shared array could not be opened or copied (its producer is gone)."""


def cuda_ordinal(gpu_id, visible: str | None = None) -> int:
    """The CUDA ordinal of Ray GPU ``gpu_id`` in a process that sees the node's GPUs.

    ``visible`` is that process's ``CUDA_VISIBLE_DEVICES`` (default: the environment's): when the
    node narrows it (``CUDA_VISIBLE_DEVICES=2,3 ray start``), Ray's GPU ids are those entries and
    the ordinal is the position of the id in the list; otherwise the id is the ordinal.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    gid = str(gpu_id).strip()
    if visible:
        items = [x.strip() for x in visible.split(",") if x.strip()]
        if gid in items:
            return items.index(gid)
    return int(gid)


def share(cp, value, ordinal: int, stream, keep: list):
    """``value`` with each CuPy array replaced by a :class:`SharedArray` of a copy of it.

    Call with device ``ordinal`` current, after ``stream`` (the producer's) finished the task.
    The copies' allocations are appended to ``keep``: free them (drop them) only once every
    consumer has received them.
    """
    rt = cp.cuda.runtime

    def one(a):
        a = cp.ascontiguousarray(a)
        nbytes = int(a.nbytes)
        mem = cp.cuda.Memory(max(1, nbytes))          # cudaMalloc: exactly this array's bytes
        if nbytes:
            rt.memcpyAsync(mem.ptr, a.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)
        stream.synchronize()
        keep.append(mem)
        return SharedArray(bytes(rt.ipcGetMemHandle(mem.ptr)), tuple(a.shape), str(a.dtype), nbytes, ordinal)

    return map_leaves(value, lambda v: one(v) if isinstance(v, cp.ndarray) else v)


def receive(cp, value, ordinal: int, stream):
    """``value`` with each :class:`SharedArray` copied into a new array on GPU ``ordinal``.

    Call with device ``ordinal`` current; the copies run on ``stream``, which is synchronised
    before each handle is closed (the mapping must outlive the copy that reads it).
    """
    rt = cp.cuda.runtime

    def one(s: SharedArray):
        out = cp.empty(s.shape, dtype=s.dtype)
        if s.nbytes == 0:
            return out
        try:
            ptr = rt.ipcOpenMemHandle(s.handle, rt.cudaIpcMemLazyEnablePeerAccess)
        except Exception as exc:       # noqa: BLE001 -- CUDARuntimeError: the producer is gone
            raise ShareLost(f"cannot open the shared array of GPU {s.device}: {exc}") from None
        try:
            rt.memcpyPeerAsync(out.data.ptr, ordinal, ptr, s.device, s.nbytes, stream.ptr)
            stream.synchronize()
        finally:
            rt.ipcCloseMemHandle(ptr)
        return out

    return map_leaves(value, lambda v: one(v) if isinstance(v, SharedArray) else v)


def has_shared(value) -> bool:
    """Whether ``value`` holds a :class:`SharedArray` (in tuples, lists, dict values)."""
    return any(isinstance(x, SharedArray) for x in leaves(value))
