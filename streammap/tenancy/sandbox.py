"""Contained jobs: the launcher that runs each job's worker in a sandbox, under limits.

A job's kernels are a tenant's arbitrary Python, and they run as the service's own user: file
permissions cannot keep them from the service's database, the tenants file (every token) or the
other jobs' folders. So the service never starts a worker directly: it runs this file as a script,
``python -I .../sandbox.py --policy JSON DIR`` (stdlib only, nothing of StreamMAP imported), which
builds the sandbox, sets the limits and only then starts the worker
(``python -P -m streammap.tenancy.worker DIR``, :func:`worker_argv`: the job's folder, its working
directory, is not on its ``sys.path``) inside it.

Isolation model (``isolation="namespaces"``)
-------------------------------------------
Linux namespaces, which an unprivileged process may create (the mechanism of ``unshare -Urmpi``
and bubblewrap, used here through ``unshare(2)``, ``mount(2)`` and ``mount_setattr(2)`` by ctypes,
so nothing needs installing; Linux >= 5.12):

* **user namespace**: the service's uid is mapped to a non-root uid inside (the service's own, or
  1000 for a service run as root), so the worker holds no capability once it has exec'd: it
  cannot undo a mount. ``no_new_privs`` is set: no setuid program gives anything back.
* **mount namespace**, set up by the job's init before the worker starts:
  the whole file system is read-only (recursively); the state folder (database, every job
  folder, the server note), the tenants file's folder and the service user's home are covered
  by empty read-only tmpfs mounts, so they are not there; what Python needs from a covered
  folder (the interpreter's prefixes, site-packages, StreamMAP's own tree) is mounted back
  read-only, and the tenants file itself is covered by an empty file, even then; the job's own
  folder is mounted back, read-write, at its own path (the worker's working directory, with
  its program in it); ``/tmp`` and ``/dev/shm`` are private, empty and writable (each at most
  the job's ``memory`` limit, when it has one: they are memory); ``/proc`` is
  the job's own. Covers and mounts-back apply outermost first, so a covered folder inside a
  folder mounted back stays covered.
* **pid namespace**: the job sees and signals only its own processes: not the service, not other
  jobs, and no ``/proc/PID/root`` of another process to walk through. Its pid 1 is this
  launcher's *init*: it reaps, forwards SIGTERM/SIGINT/SIGHUP to the worker, and when it ends,
  the kernel kills whatever the job left behind, even processes that left the process group.
* **IPC namespace**: System V IPC and POSIX message queues are the job's own.
* **network**: a network namespace of its own with loopback only: the job reaches no other
  machine and not the service's port.

Not with the Ray backend: there a job's kernels run in Ray's own worker processes, outside any
sandbox of the service, and its driver finds the local raylet by its process (it must see the
host's processes, hence their ``/proc/PID/root``). A Ray service's jobs are uncontained and say
so (``isolation: none``); give tenants who must not meet separate Ray clusters.
* **environment**: the worker gets a clean environment (``PATH``, locale, CUDA/ROCm, BLAS/OpenMP,
  Ray variables), ``HOME`` is its own folder, ``TMPDIR=/tmp``: no service variable, no token.

``isolation="none"``: the worker is a plain child of the launcher, with the same clean
environment and limits but the service's view of the file system (one trusted tenant, or a
machine without user namespaces, see :func:`available`).

Limits (``setrlimit`` on the worker, just before ``execve``; per process: a process the job
starts has its own)
------------------------------------------------------------------------------------------------
``memory``   ``RLIMIT_DATA``: the process's private writable memory (heap, anonymous maps,
             thread stacks); an allocation past it fails (``MemoryError``). Not ``RLIMIT_AS``:
             CUDA reserves address space far beyond any memory it uses, and a GPU job under an
             address-space limit fails at context creation.
``cpu_time`` ``RLIMIT_CPU``: SIGXCPU at the limit, SIGKILL 5 s of CPU later (a job that ignores it).
Core dumps are off (``RLIMIT_CORE`` 0). The wall time is the service's: it stops the job's process
group past it. Memory is not a cgroup limit (a container seldom delegates cgroups to its processes).

Exit status
-----------
The launcher ends the way the worker ended: with its exit status, or killed by its signal, so the
service reads the worker's end from the launcher's (a worker killed by SIGKILL once it had used
its whole CPU time is reported as SIGXCPU). When the sandbox cannot be set up, the launcher
writes the job's exit note itself and exits 125 (``SETUP_FAILED``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

#: Where the launcher is (run by path, so StreamMAP's package is not imported before the sandbox).
LAUNCHER = str(Path(__file__).resolve())

ISOLATIONS = ("namespaces", "none")

#: The launcher's exit status when it could not build the sandbox.
SETUP_FAILED = 125

#: CPU seconds between SIGXCPU and SIGKILL.
CPU_GRACE = 5

#: Folders every job gets private, empty and writable.
SCRATCH = ("/tmp", "/dev/shm")

#: Environment variables a worker keeps (exact names, and prefixes ending in ``_``).
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "LC_", "CUDA_",
            "NVIDIA_", "HIP_", "ROCR_", "HSA_", "ROCM_", "OMP_", "MKL_", "OPENBLAS_", "NUMBA_", "CUPY_", "RAY_")

#: The uid a job has inside its user namespace when the service runs as root.
ROOT_INSIDE_UID = 1000

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 1
_SYS_MOUNT_SETATTR = 442            # the same number on every architecture Linux added it to
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1


# -- the service's side: policy, command, availability, how a job ended ------------------------------

def policy(isolation: str, *, state_dir, tenants_file=None, limits: dict | None = None, home=None) -> dict:
    """The launcher's policy for one job: what to hide, what to mount back, which limits.

    ``limits`` holds ``memory`` (bytes), ``cpu_time`` (s) and ``wall_time`` (s), each ``None``
    for none; the launcher applies the first two (the service keeps the wall time).
    """
    limits = dict(limits or {})
    out = {"isolation": isolation, "hide": [], "expose": [], "hide_files": [],
           "limits": {"memory": limits.get("memory"), "cpu_time": limits.get("cpu_time")}}
    if isolation != "namespaces":
        return out
    home = Path.home() if home is None else Path(home)
    hide = {Path(state_dir).resolve(), home.resolve()}
    if tenants_file:
        tenants_file = Path(tenants_file).resolve()
        hide.add(tenants_file.parent)
        out["hide_files"].append(str(tenants_file))
    out["hide"] = sorted(str(p) for p in hide)
    # Python's own folders come back wherever something covers them: a hidden folder, or the private
    # /tmp and /dev/shm (a checkout and its virtual environment under /tmp, as in a CI clone).
    covered = hide | {Path(p).resolve() for p in SCRATCH if os.path.isdir(p)}
    out["expose"] = sorted(str(r) for r in _runtime_paths() if any(h == r or h in r.parents for h in covered))
    return out


def _runtime_paths() -> set[Path]:
    """The folders the worker's Python needs: the prefixes, site-packages, StreamMAP's own tree."""
    import site  # noqa: PLC0415 - the launcher itself never needs it

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *site.getsitepackages(),
             site.getusersitepackages(), str(Path(LAUNCHER).parents[2])]
    return {Path(p).resolve() for p in paths if p and Path(p).is_dir()}


def command(folder, pol: dict) -> list[str]:
    """The launcher's command line for the job in ``folder`` (which it names, for ``_is_worker``)."""
    return [sys.executable, "-I", LAUNCHER, "--policy", json.dumps(pol), str(Path(folder).resolve())]


_AVAILABLE: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """Whether jobs can be contained here, and if not why: runs the launcher's own probe once.

    The probe builds a whole sandbox (namespaces, a hidden folder, the job folder mounted back)
    and checks it from inside, so ``True`` means the mechanism works, not merely that it exists.
    """
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = _probe()
    return _AVAILABLE


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"no Linux namespaces on {sys.platform}"
    with tempfile.TemporaryDirectory(prefix="streammap-probe-") as tmp:
        secret, job = Path(tmp) / "secret", Path(tmp) / "secret" / "jobs" / "job"
        job.mkdir(parents=True)
        (secret / "token").write_text("x")
        pol = {"isolation": "namespaces", "hide": [str(secret)], "limits": {}}
        try:
            r = subprocess.run([sys.executable, "-I", LAUNCHER, "--probe", "--policy", json.dumps(pol), str(job)],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"the sandbox probe did not run: {exc}"
        if r.returncode != 0:
            return False, (r.stderr.strip().splitlines() or [f"the sandbox probe exited with {r.returncode}"])[-1]
    return True, ""


def ending(returncode: int | None, limits: dict | None) -> str:
    """What happened to a job whose process ended without an exit note, in words."""
    limits = limits or {}
    if returncode is None:
        return ("the job's process ended without an exit note; its exit status is unknown "
                "(the service was restarted while it ran)")
    if returncode >= 0:
        what = "the sandbox could not be set up" if returncode == SETUP_FAILED else "the job's process"
        return f"{what} exited with status {returncode} without an exit note"
    sig = -returncode
    name = _signal_name(sig)
    if sig == signal.SIGXCPU and limits.get("cpu_time"):
        return f"the job exceeded its CPU-time limit of {_seconds(limits['cpu_time'])} (killed by {name})"
    text = f"the job's process was killed by signal {name} ({sig})"
    if limits.get("memory") and sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS):
        text += f"; its memory limit is {_size(limits['memory'])}, and a process that cannot allocate may crash"
    return text


def out_of_memory(error: str, limits: dict | None) -> str:
    """``error`` (an exit note's), led by the memory limit when the job ran out of memory under one."""
    memory = (limits or {}).get("memory")
    if memory and ("MemoryError" in error or "Unable to allocate" in error):
        return f"the job exceeded its memory limit of {_size(memory)}\n{error}"
    return error


def wall_time_exceeded(limits: dict) -> str:
    return f"the job exceeded its wall-time limit of {_seconds(limits['wall_time'])} and was stopped"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _seconds(t: float) -> str:
    return f"{t:g} s"


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


# -- the launcher: runs as a script, before anything of the worker ----------------------------------

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags: int, data: str | None = None) -> None:
    def enc(s):
        return None if s is None else str(s).encode()
    _check(_c().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source or ''} on {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _set_readonly(path: str, readonly: bool, recursive: bool = False) -> None:
    """Make the mount at ``path`` (and those under it) read-only or writable, other flags kept."""
    attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY if readonly else 0, attr_clr=0 if readonly else _MOUNT_ATTR_RDONLY)
    flags = _AT_RECURSIVE if recursive else 0
    _check(_c().syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path.encode(),
                        ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))),
           f"mount_setattr {path}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _enter_namespaces() -> None:
    """New user, mount, pid, IPC and network namespaces; the uid and gid mapped (caller side)."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWNET
    _check(_c().unshare(ctypes.c_int(flags)), "unshare (user namespaces unavailable?)")
    inside_uid = uid or ROOT_INSIDE_UID
    inside_gid = gid or ROOT_INSIDE_UID
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside_uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{inside_gid} {gid} 1\n")


def _contain(folder: str, pol: dict) -> None:
    """Build the job's view of the file system (in its init: pid 1 of the new pid namespace)."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)           # nothing propagates back to the host
    writable = [folder]
    # Held open before anything is covered: what is mounted back is mounted from these.
    held = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in writable + pol.get("expose", []) if os.path.isdir(p)}
    folders = [p for p in pol.get("hide", []) if os.path.isdir(p)]
    _set_readonly("/", True, recursive=True)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    scratch = [p for p in SCRATCH if os.path.isdir(p)]
    # Scratch space is memory (tmpfs) that RLIMIT_DATA does not count: each folder is held to the
    # job's memory limit, or a job limited to 1 GiB could fill the machine's RAM through /tmp.
    memory = (pol.get("limits") or {}).get("memory")
    scratch_options = "mode=1777" + (f",size={int(memory)}" if memory else "")
    steps = [(p, "scratch") for p in scratch] + [(p, "cover") for p in pol.get("hide", [])]
    steps += [(p, "expose") for p in pol.get("expose", [])]
    covered = []
    for path, what in sorted(steps, key=lambda s: (s[0].rstrip("/").count("/"), s[1] == "expose")):
        if what == "expose":
            _bind(held.pop(path), path, writable=False)
        elif what == "scratch" or path in folders:
            # Covered even where a covering above emptied it already (state under /tmp): the path
            # to the job's folder is then read-only too, not scratch space.
            os.makedirs(path, exist_ok=True)
            _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV | (_MS_NOEXEC if what == "cover" else 0),
                   "mode=755,size=1m" if what == "cover" else scratch_options)
            covered += [path] if what == "cover" else []
    for path in pol.get("hide_files", []):                   # even inside a folder mounted back
        if os.path.isfile(path):
            _mount("/dev/null", path, None, _MS_BIND)
            _set_readonly(path, True)
    for path in writable:                                     # the job's folder back, writable
        if path in held:
            _bind(held.pop(path), path, writable=True)
    for path in covered:                                      # read-only once what goes inside is there
        _set_readonly(path, True)
    _loopback_up()


def _bind(fd: int, path: str, writable: bool) -> None:
    """Mount the folder held open as ``fd`` (with what is mounted under it) at ``path``."""
    os.makedirs(path, exist_ok=True)
    _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
    _set_readonly(path, not writable, recursive=not writable)
    os.close(fd)


def _loopback_up() -> None:
    """Bring ``lo`` up in the job's own network namespace (local sockets keep working)."""
    import fcntl  # noqa: PLC0415 - only the namespaced init needs it
    import socket  # noqa: PLC0415
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", ifr)[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _set_limits(limits: dict) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("memory"):
        n = int(limits["memory"])
        resource.setrlimit(resource.RLIMIT_DATA, (n, n))
    if limits.get("cpu_time"):
        t = max(1, int(limits["cpu_time"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (t, t + CPU_GRACE))


def _environment(folder: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k in KEEP_ENV or any(p.endswith("_") and k.startswith(p) for p in KEEP_ENV)}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=folder, TMPDIR="/tmp", PYTHONUNBUFFERED="1")
    return env


def _start_worker(folder: str, pol: dict, probe: bool) -> int:
    """Fork the worker: limits, no new privileges, its folder as working directory, then exec."""
    pid = os.fork()
    if pid:
        return pid
    try:
        _c().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _c().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.chdir(folder)
        _set_limits(pol.get("limits") or {})
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if probe:
            os._exit(_probe_inside(folder, pol))
        os.execve(sys.executable, worker_argv(folder), _environment(folder))
    except BaseException as exc:  # noqa: BLE001 - a forked child must never return into the launcher
        print(f"sandbox: cannot start the worker: {exc}", file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


#: How Python before 3.11 (no ``-P``) starts the worker without the working folder on ``sys.path``:
#: ``-c`` puts ``''`` first; it goes before anything but the built-in ``sys`` is imported.
_WORKER_BOOTSTRAP = ("import sys; del sys.path[0]; import runpy; "
                     "runpy.run_module('streammap.tenancy.worker', run_name='__main__', alter_sys=True)")


def worker_argv(folder: str) -> list[str]:
    """The worker's command line: ``python -P -m streammap.tenancy.worker FOLDER``.

    ``-P``: the working folder (the job's, which the job fills) is not put first on ``sys.path``,
    as ``python -m`` would, so no file of the job's (``json.py``, ``yaml.py``, ``streammap/``)
    is imported in place of a module the worker runs on (see :mod:`.worker` for the program's
    own modules)."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "streammap.tenancy.worker", folder]
    return [sys.executable, "-c", _WORKER_BOOTSTRAP, folder]


def shadows(top: str, exclude=()) -> str | None:
    """What a module named ``top`` in a job's folder would stand in for, in words, or ``None``.

    ``"Python's standard library"``, ``"StreamMAP"`` or ``"an installed package"`` (a module
    found on ``sys.path`` outside the folders of ``exclude``, the job's folder and the working
    folder: a bare folder, a namespace package, shadows nothing).
    """
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return "Python's standard library"
    if top == "streammap":
        return "StreamMAP"
    skip = {os.path.realpath(str(p)) for p in (*exclude, os.getcwd())}
    path = [p for p in sys.path if p and os.path.realpath(p) not in skip]
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, path)
    except (ImportError, ValueError):
        return None
    return "an installed package" if spec is not None and spec.origin not in (None, "namespace") else None


def _probe_inside(folder: str, pol: dict) -> int:
    """The probe's checks, as the worker would see things: hidden is hidden, the folder is writable."""
    for hidden in pol["hide"]:
        if os.path.exists(os.path.join(hidden, "token")):
            print("sandbox probe: a hidden folder is still visible", file=sys.stderr)
            return 1
    _write(os.path.join(folder, "probe"), "ok")
    return 0


def _supervise(child: int, limits: dict) -> dict:
    """Wait for ``child`` (reaping any orphan meanwhile, as a pid 1 must), forwarding stop signals."""
    def forward(sig, frame):
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            pid, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return {"exit": SETUP_FAILED}
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        cpu = limits.get("cpu_time")
        if sig == signal.SIGKILL and cpu and usage.ru_utime + usage.ru_stime >= cpu:
            sig = signal.SIGXCPU                           # killed at the hard CPU limit
        return {"signal": sig}
    return {"exit": os.WEXITSTATUS(status)}


def _end_as(outcome: dict):
    """End this process the way the worker ended."""
    sys.stderr.flush()
    if "signal" in outcome:
        sig = outcome["signal"]
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):    # those two have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)                                 # a signal that does not end a process
    os._exit(outcome["exit"])


def _setup_failed(folder: str, exc: BaseException, probe: bool) -> None:
    message = f"the sandbox could not be set up: {exc}"
    print(f"sandbox: {message}", file=sys.stderr, flush=True)
    if not probe:
        note = os.path.join(folder, "exit.json")
        with open(note + ".tmp", "w") as f:
            json.dump({"status": "failed", "error": message}, f)
        os.replace(note + ".tmp", note)
    os._exit(SETUP_FAILED)


def launch(folder: str, pol: dict, probe: bool = False):
    """Run the worker of the job in ``folder`` under ``pol``; never returns (ends as the worker did)."""
    limits = pol.get("limits") or {}
    if not probe:
        said = ", ".join(([f"memory {_size(limits['memory'])}"] if limits.get("memory") else [])
                         + ([f"cpu_time {_seconds(limits['cpu_time'])}"] if limits.get("cpu_time") else [])) or "none"
        print(f"sandbox: isolation {pol['isolation']}; limits: {said}", file=sys.stderr, flush=True)
    if pol["isolation"] != "namespaces":
        _end_as(_supervise(_start_worker(folder, pol, probe), limits))
    try:
        _enter_namespaces()
    except OSError as exc:
        _setup_failed(folder, exc, probe)
    report_r, report_w = os.pipe()
    init = os.fork()
    if init == 0:                                           # pid 1 of the job's pid namespace
        os.close(report_r)
        try:
            _c().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            _contain(folder, pol)
        except OSError as exc:
            _setup_failed(folder, exc, probe)
        outcome = _supervise(_start_worker(folder, pol, probe), limits)
        os.write(report_w, json.dumps(outcome).encode())
        os._exit(0)
    os.close(report_w)
    _supervise(init, {})
    data = b""
    while chunk := os.read(report_r, 4096):
        data += chunk
    _end_as(json.loads(data) if data else {"exit": SETUP_FAILED})


def _main(argv: list[str]) -> None:
    probe = "--probe" in argv
    argv = [a for a in argv if a != "--probe"]
    if len(argv) != 3 or argv[0] != "--policy":
        print("usage: sandbox.py [--probe] --policy JSON JOB_FOLDER", file=sys.stderr)
        sys.exit(2)
    launch(argv[2], json.loads(argv[1]), probe=probe)


if __name__ == "__main__":
    _main(sys.argv[1:])
