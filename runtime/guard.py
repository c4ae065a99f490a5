"""Guards around kernel calls: read-only inputs, deadlines (``timeout=``), input checksums.

Every executor (:mod:`.local`, :mod:`.shared`, :mod:`.pipeline`, :mod:`.ray.executor`) calls
kernels through the same three guards, so that a kernel misbehaves the same way on every backend.

Read-only inputs
----------------
A result is handed to its consumers as it is, without a copy: under ``--emulate`` the consumers
on other (emulated) devices read the very array the producer returned. A kernel that wrote into
its input would change what the other consumers see, depending on who ran first. So on the host
every stored result is replaced by a **read-only view** (:func:`read_only`: ``ndarray.view()``
with ``writeable=False``, a flag flip per array, never a copy; the producer's own array stays
writable, so a stateful kernel can go on updating the array it returned). An in-place write then
raises NumPy's ``ValueError: ... is read-only``, which :func:`explain` turns into
:class:`InputWritten`, naming the kernel, the argument and the task, with the hint to copy first.
The outputs handed back to the caller are made writable again (:func:`writable`).

CuPy arrays have no read-only flag: on GPUs the check is opt-in (``check_inputs=True``,
``streammap run --check-inputs``): :func:`checked_kernels` wraps every kernel so that each of its
array arguments is checksummed before and after the call (on the device, on the current stream,
then synchronised), and a changed checksum raises :class:`InputWritten`. It works on NumPy too.

Deadlines
---------
A task with a ``timeout`` runs its kernel through :func:`with_deadline`: the call is made on a
new helper thread (with the device, and on a GPU the caller's stream, current), and the worker
waits for it at most ``timeout`` seconds; on a GPU the helper synchronises the stream before it
returns, so the deadline covers the GPU work. A Python thread cannot be killed, so a call past its
deadline is **abandoned**: the helper goes on running it in the background until it returns or
the process ends, its result (or error) is dropped, and the worker raises
:class:`KernelTimeout`, which the executor handles like a kernel's error (retries, then the run
fails). On a GPU the abandoned call may still hold the device's stream, so the device is marked
``abandoned`` (not synchronised again in this run) and the task is not retried: the run fails.
On Ray the actor that ran the call is killed when the run fails, which ends the call for good.
Tasks without a timeout are called directly: the guard costs them nothing.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import os
import re
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import numpy

from streammap.runtime.context import array_module, set_current_device
from streammap.runtime.devices import leaves, map_leaves

_HERE = os.path.dirname(os.path.abspath(__file__))
_ndarray = numpy.ndarray


class GuardError(Exception):
    """An error a guard raised about a kernel call (reported without the executor's frames)."""


class InputWritten(GuardError):
    """A kernel wrote into one of its inputs (see *Read-only inputs*)."""


class KernelTimeout(GuardError):
    """A kernel call ran past its task's ``timeout`` and was abandoned (see *Deadlines*).

    ``retry`` is False when the call cannot be retried (it ran on a GPU, now abandoned)."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry

    def __reduce__(self):                 # picklable with its flag (Ray hands errors back)
        return (type(self), (str(self), self.retry))


# -- read-only inputs ---------------------------------------------------------------------------

def read_only(value):
    """``value`` with every NumPy array replaced by a read-only view of it (tuples, lists and dict
    values are walked); anything else, and arrays already read-only, as they are. No copy."""
    if type(value) is _ndarray:           # the common case, kept to a type check and a flag flip
        if not value.flags.writeable:
            return value
        view = value.view()
        view.setflags(False)         # positional: ``write=False`` costs NumPy's keyword parsing, ~0.2 µs
        return view
    if isinstance(value, (tuple, list, dict, _ndarray)):
        return map_leaves(value, _read_only_leaf)
    return value


def _read_only_leaf(a):
    if isinstance(a, _ndarray) and a.flags.writeable:
        a = a.view()
        a.setflags(False)
    return a


def freeze(value):
    """``value``'s NumPy arrays made read-only in place: for copies the runtime made itself (a
    host copy of a GPU result, a spilled result), which nobody else holds."""
    for a in leaves(value):
        if isinstance(a, _ndarray):
            a.setflags(False)
    return value


def writable(a):
    """A NumPy output the caller may change: the array made writable again when it is a read-only
    view of a writable array (the runtime's own view), else a copy (an array the runtime got
    read-only, e.g. from Ray's object store)."""
    if not isinstance(a, _ndarray) or a.flags.writeable:
        return a
    try:
        a.setflags(write=True)
        return a
    except ValueError:
        return a.copy()


def explain(exc: BaseException, kernel: str, task: str) -> BaseException:
    """``exc`` as the runtime reports it for task ``task`` of ``kernel``: NumPy's error for a write
    into a read-only input becomes :class:`InputWritten` (with the kernel's traceback), anything
    else is returned as it is."""
    if type(exc) is not ValueError or "read-only" not in str(exc):
        return exc
    names = written_arguments(exc, kernel)
    if names is None:                     # not one of the kernel's own inputs (an array it made read-only)
        return exc
    what = "its argument " + " or ".join(f"'{n}'" for n in names) if names else "one of its arguments"
    copy = names[0] if len(names) == 1 else "x"
    err = InputWritten(
        f"kernel '{kernel}' wrote into {what} in place, in task {task} (NumPy: {exc}); a kernel's inputs "
        f"are read-only, since other tasks may read the same array\n"
        f"hint: copy first: {copy} = {copy}.copy()")
    err.__traceback__ = exc.__traceback__
    err.__suppress_context__ = True
    return err


def written_arguments(exc: BaseException, kernel: str) -> Optional[list]:
    """The names of the kernel's arguments that the failed write went to: the read-only arguments
    whose memory the read-only arrays the failing line writes into share; when the line does not
    tell, the only read-only argument (``[]``: one of several). ``None``: the write did not go to
    an input (no argument is read-only, or the line wrote into another read-only array)."""
    frames = [(tb.tb_frame, tb.tb_lineno) for tb in _walk(exc.__traceback__)]
    own = [(f, n) for f, n in frames if not f.f_code.co_filename.startswith(_HERE)]
    if not own:
        return None
    kernel_frame = next((f for f, _ in own if f.f_code.co_name == kernel), own[0][0])
    code = kernel_frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    local = kernel_frame.f_locals
    arrays = {name: [a for a in leaves(local[name]) if isinstance(a, _ndarray) and not a.flags.writeable]
              for name in code.co_varnames[:n_args] if name in local}
    arrays = {name: found for name, found in arrays.items() if found}
    if not arrays:
        return None
    inner, line_no = own[-1]
    line = linecache.getline(inner.f_code.co_filename, line_no)
    targets = [v for name in _written_names(line)
               for v in leaves(inner.f_locals.get(name))
               if isinstance(v, _ndarray) and not v.flags.writeable]
    if targets:                           # the line says what it wrote into: one of the inputs, or not
        hit = [name for name, found in arrays.items()
               if any(numpy.may_share_memory(a, t) for a in found for t in targets)]
        return hit or None
    return list(arrays) if len(arrays) == 1 else []


#: Functions that write into their first argument.
_WRITES_FIRST = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis"}


def _written_names(line: str) -> list:
    """The names a line of code writes into (``x[i] = ``, ``x += ``, ``out=x``, ``x.sort()``,
    ``np.copyto(x, ...)``), or every name in it when it is not a whole statement."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return list(dict.fromkeys(re.findall(r"[A-Za-z_]\w*", line)))
    found: list = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign):
            found.append(_root(node.target))
        elif isinstance(node, ast.Assign):
            found += [_root(t) for t in node.targets if not isinstance(t, ast.Name)]   # a name is rebound, not written
        elif isinstance(node, ast.Call):
            found += [_root(k.value) for k in node.keywords if k.arg == "out"]
            func = node.func
            if isinstance(func, ast.Attribute):
                if func.attr in _WRITES_FIRST and node.args:
                    found.append(_root(node.args[0]))
                else:
                    found.append(_root(func.value))          # x.sort(), x.fill(0)
    return [n for n in dict.fromkeys(found) if n]


def _root(node) -> Optional[str]:
    """``x`` of ``x``, ``x[i]``, ``x.real``, ``x[i][j]``, ``(x, y)`` (the first)."""
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        return _root(node.elts[0])
    return node.id if isinstance(node, ast.Name) else None


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


# -- input checksums (check_inputs) ---------------------------------------------------------------

def checked_kernels(kernels: dict) -> dict:
    """``kernels`` (name → function) with each wrapped by :func:`checked`."""
    return {name: checked(fn, name) for name, fn in kernels.items()}


def checked(fn: Callable, name: str) -> Callable:
    """``fn`` that raises :class:`InputWritten` when a call changed one of its array arguments
    (checksums before and after the call, see *Read-only inputs*)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):       # a builtin without a signature: arguments by position
        signature = None

    def call(*args, **kwargs):
        inputs = _labelled(signature, args, kwargs)
        before = [(label, a, checksum(a)) for label, a in inputs]
        out = fn(*args, **kwargs)
        for label, a, sum0 in before:
            if checksum(a) != sum0:
                raise InputWritten(
                    f"kernel '{name}' changed its argument '{label}' in place (its checksum differs after "
                    f"the call); a kernel's inputs are read-only, since other tasks may read the same array\n"
                    f"hint: copy first: {label} = {label}.copy()")
        return out
    call.__name__ = getattr(fn, "__name__", name)
    call.__wrapped__ = fn
    return call


def _labelled(signature, args, kwargs) -> list:
    """``[(argument name, array)]`` for every array among a call's arguments (leaves walked)."""
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs).arguments.items()
        except TypeError:                 # the call itself is wrong: the kernel will say so
            bound = None
    if signature is None or bound is None:
        bound = [*((f"#{i}", v) for i, v in enumerate(args)), *kwargs.items()]
    return [(label, a) for label, value in bound for a in leaves(value) if _is_array(a)]


def _is_array(a) -> bool:
    """A NumPy array of numbers (or strings), or a GPU array (CuPy's)."""
    if isinstance(a, _ndarray):
        return a.dtype.kind != "O"
    return hasattr(type(a), "__cuda_array_interface__")


#: Odd weights make a change of any one word change the weighted sum (mod 2**64).
_WEIGHT = 0x9E3779B97F4A7C15


def checksum(a) -> tuple:
    """A checksum of array ``a``'s bytes, computed by its own module (on the GPU for CuPy):
    the sum and a position-weighted sum of its words, modulo 2**64."""
    xp = array_module(a)
    if a.size == 0:
        return (0, 0)
    if xp is numpy:
        data = numpy.ascontiguousarray(a)
        return (hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).digest(),)
    return weighted_checksum(a, xp)


def weighted_checksum(a, xp) -> tuple:
    """:func:`checksum` with array module ``xp`` (CuPy's path; NumPy's API is the same)."""
    words = xp.ascontiguousarray(a).reshape(-1).view(xp.uint8)
    if words.size % 8 == 0:
        words = words.view(xp.uint64)
    words = words.astype(xp.uint64, copy=False)
    weights = xp.arange(words.size, dtype=xp.uint64) * xp.uint64(_WEIGHT) + xp.uint64(1)
    return (int(words.sum(dtype=xp.uint64)), int((words * weights).sum(dtype=xp.uint64)))


# -- deadlines ------------------------------------------------------------------------------------

class Deadline(NamedTuple):
    """A task's ``timeout``: what :func:`with_deadline` needs to wait for it and to report it."""

    seconds: float
    kernel: str
    task: str
    device: str
    declared: str                         #: ``file.py:LINE`` of the ``timeout=`` clause


def deadline_of(task, fn: Callable) -> Optional[Deadline]:
    """The :class:`Deadline` of plan task ``task`` (``None``: no timeout)."""
    if task.timeout is None:
        return None
    return Deadline(task.timeout, task.kernel, task.id, task.device, declared_at(fn))


def with_deadline(fn: Callable, deadline: Deadline, device) -> Callable:
    """``fn`` waited for at most ``deadline.seconds`` per call (see *Deadlines*), on ``device``
    (an executor device: the helper thread makes it current, and on a GPU the caller's stream)."""
    gpu = device.is_gpu

    def call(*args, **kwargs):
        stream = device.cupy.cuda.get_current_stream() if gpu else None
        box: list = []
        finished = threading.Event()

        def run():
            set_current_device(device)
            try:
                if gpu:
                    with device.device, stream:
                        out = fn(*args, **kwargs)
                        stream.synchronize()      # the deadline covers the GPU work
                else:
                    out = fn(*args, **kwargs)
                box.append((True, out))
            except BaseException as exc:          # handed to the worker, or dropped if abandoned  # noqa: BLE001
                box.append((False, exc))
            finally:
                finished.set()
                set_current_device(None)

        helper = threading.Thread(target=run, name=f"streammap {deadline.task} (timeout)", daemon=True)
        helper.start()
        if not finished.wait(deadline.seconds):
            if gpu:
                device.abandoned = True
            raise _timeout(deadline, helper, gpu) from None
        ok, value = box[0]
        if ok:
            return value
        raise value
    return call


def _timeout(deadline: Deadline, helper: threading.Thread, gpu: bool) -> KernelTimeout:
    d = deadline
    msg = (f"kernel '{d.kernel}' ran past its timeout of {d.seconds:g} s (timeout= at {d.declared}), in task "
           f"{d.task} on {d.device}; the call was abandoned: Python cannot stop a thread, so it may go on "
           f"running in the background until it returns or the process ends, and its result is dropped")
    if gpu:
        msg += (f"; {d.device} is not used again in this run (its stream may hold work that never ends), "
                "so the task is not retried")
    where = _stack_of(helper)
    if where:
        msg += "\nwhere the call was when it was abandoned:\n" + where
    return KernelTimeout(msg, retry=not gpu)


def _stack_of(thread: threading.Thread) -> str:
    """The user's frames of ``thread``'s current stack (the executor's left out)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return ""
    stack = traceback.extract_stack(frame)
    ours = [k for k, fs in enumerate(stack) if fs.filename.startswith(_HERE)]
    stack = stack[ours[-1] + 1:] if ours else stack          # from the call into the kernel on
    return "".join(traceback.format_list(stack[-8:])).rstrip()


def declared_at(fn: Callable) -> str:
    """``file.py:LINE`` of the ``timeout=`` clause in ``fn``'s kernel directive (the comment lines
    above its ``def``); the directive's line, or the ``def``'s, when it cannot be told."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return getattr(fn, "__name__", "?")
    name = Path(code.co_filename).name
    lines = linecache.getlines(code.co_filename)
    k = code.co_firstlineno - 2            # 0-based: the line above the def (or its first decorator)
    block = []
    while 0 <= k < len(lines) and lines[k].lstrip().startswith("#"):
        block.append(k)
        if re.match(r"#\s*@stream\s*kernel\b", lines[k].lstrip()):
            break
        k -= 1
    else:
        return f"{name}:{code.co_firstlineno}"
    for k in sorted(block):
        if re.search(r"\btimeout\s*=", lines[k]):
            return f"{name}:{k + 1}"
    return f"{name}:{block[-1] + 1}"
