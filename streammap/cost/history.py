"""Performance history: measured kernel times per (kernel, device model, sizes), as StarPU keeps them.

Every successful ``streammap run`` and every ``streammap profile`` appends what it measured here,
and ``compile`` prefers these measurements over the roofline estimate of the clauses (the first
source in the cost model's order of preference, ``design.md``, *The cost model*).

Where it lives
--------------
One folder per user, chosen in this order (:func:`history_dir`):

1. ``$STREAMMAP_HISTORY`` when set (tests and CI point it at a temporary folder);
2. ``$XDG_DATA_HOME/streammap/history`` when ``XDG_DATA_HOME`` is set;
3. ``~/.local/share/streammap/history``.

Every function that reads or writes it also takes an explicit folder (``--history DIR``).

Format
------
One file per (program, kernel): ``<folder>/<program stem>/<kernel>.jsonl``, e.g.
``fm_radio/bandpass.jsonl``. The program stem is the file name of the kernel's call site without
``.py`` (``_`` when a task has no call site). Each line is one JSON object, one measurement, keys
in this order::

    {"kernel": "bandpass", "source": "fm_radio", "code": "3c269605d0335d50",
     "device_model": "Intel(R) Xeon(R) Processor",
     "device_kind": "cpu", "size_key": "arg1=3;bytes=98304;flops=245760;out=32768;refs=1",
     "sizes": {"arg1": 3, "bytes": 98304.0, "flops": 245760.0, "out": 32768.0, "refs": 1},
     "seconds": 0.000213, "repeats": 3, "origin": "profile", "when": "2025-01-01T12:00:00+00:00",
     "host": "vm", "path": "/home/me/samples/fm_radio.py", "params": {"N": 4096, "BANDS": 8}}

``code`` is the kernel's code fingerprint (:func:`streammap.directives.program.code_fingerprint`:
a hash of its ``def`` without comments, docstring or layout), absent for kernels that have none
(the strategies' built-in scatter and gather) and in lines written before fingerprints existed.
``device_model`` is what the cost model looks up: the device's ``model``, or its kind when it has
none (``streammap.cost.model``). ``sizes`` (:func:`task_sizes`) describes one call: its scalar
arguments (``arg<i>`` for positional, ``kw:<name>`` for keyword constants), the number of task
results it takes (``refs``), and its clause values ``flops``, ``bytes``, ``mem``, ``out`` (which
are expressions over the params, so they carry the sizes the kernel depends on). ``size_key`` is
``sizes`` as one stable string (:func:`size_key`). ``seconds`` is a measured duration (for a
profile, the median of ``repeats`` timed runs after a warm-up). Other keys are for people.

Concurrent writers
------------------
A writer appends whole lines with one ``write`` on a file opened in append mode while it holds an
exclusive ``fcntl.flock`` lock on it; readers take a shared lock. So several runs and profiles
may record at once without losing or tearing lines. A file that grows past
:data:`COMPACT_BYTES` is compacted in place under the same exclusive lock (the latest
:data:`WINDOW` measurements per size kept). Where ``fcntl`` does not exist (Windows) there is no
locking, and concurrent writers may interleave.

Lookup (:meth:`History.estimate`)
---------------------------------
For (kernel, device model, task) the history uses the measurements of the kernel's current code
(the task's ``code``); where that device model has none and no fingerprinted line at all (a
history older than fingerprints), those without one. Measurements of another version of the code
are never used: the kernel changed, so they say nothing of it (nor do unfingerprinted lines once
fingerprinted ones show a change). The (program, kernel, device model) left without measurements
that way are collected in :attr:`History.stale`, and ``streammap compile`` names them. From the
measurements it uses it answers, in this order:

1. **exact size**: the median of the latest :data:`WINDOW` measurements with the task's size key;
2. **same clause sizes**: the median of the latest measurements whose clause values (``flops``,
   ``bytes``, ``mem``, ``out``, ``refs``) equal the task's, whatever its scalar arguments
   (``tile(i, j)`` for other ``i, j``);
3. **regression**: with measurements at 3 or more distinct sizes ``x`` (the first of ``flops``,
   ``bytes``, ``out``, ``mem`` that the task and the measurements all have), a fit of the per-size
   medians, either StarPU's power law ``t = a·x^b`` (least squares on logs) or the affine
   ``t = a + b·x`` (least relative squares, a, b >= 0), whichever fits those points with the
   smaller relative error; used only for ``x`` within a factor :data:`EXTRAPOLATION` of the
   measured range;
4. otherwise ``None`` (the cost model falls back on the clauses).

Measurements of one kernel on different device models, or of different code, never mix. Answers are
cached per (program, kernel, code, device model, size key), so the cost model's calls cost a dict
lookup or two.

Recording runs (:func:`record_run`)
-----------------------------------
Only runs with status ``ok``, and only tasks that ran. What a task is recorded against is what
*executed* it, read from the run record's per-device executor, not what the plan intended:

* ``cupy:N`` (a real GPU): the model of local GPU ``N`` (NVML discovery; the plan's model when
  discovery cannot say);
* ``numpy`` (a real CPU device): this machine's CPU model (:func:`local_cpu_model`);
* ``numpy (emulating ...)`` (``--emulate``): never against the emulated device's model, so CPU
  times never pollute GPU history. They are recorded against this machine's CPU model only when
  that device was the only one that ran tasks (a one-device emulation, where the times are plain
  CPU times); with several emulated devices the threads share the cores and their times measure
  contention, so they are skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import socket
import stat
import statistics
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from streammap.cluster.discover import cpu_device, discover_local
from streammap.directives import parse_program
from streammap.runrecord import read_run_record

try:                      # POSIX; on Windows the history works without locks
    import fcntl
except ImportError:       # pragma: no cover
    fcntl = None

#: Environment variable that overrides the history folder.
ENV_VAR = "STREAMMAP_HISTORY"
#: Latest measurements per size key that an estimate uses (older ones are dropped by compaction).
WINDOW = 20
#: Regression is used only for sizes within [min / EXTRAPOLATION, max * EXTRAPOLATION] of the data.
EXTRAPOLATION = 8.0
#: Distinct sizes needed before a regression is fitted.
MIN_REGRESSION_SIZES = 3
#: A history file larger than this is compacted (in place, under its lock) after an append.
COMPACT_BYTES = 1 << 20
#: The longest measured time a history line may give (a year): one call of a kernel.
MAX_MEASURED_SECONDS = 365 * 86400.0
#: The largest history file read (compaction keeps files near :data:`COMPACT_BYTES`).
MAX_HISTORY_BYTES = 256 << 20
#: Clause attributes that are part of a task's size, in the order regression prefers them.
CLAUSE_SIZES = ("flops", "bytes", "out", "mem")
#: Order of keys in a record line.
RECORD_KEYS = ("kernel", "source", "code", "device_model", "device_kind", "size_key", "sizes", "seconds",
               "repeats", "origin", "when", "host", "path", "params")

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


# ---------------------------------------------------------------------- location and keys

def history_dir(path=None) -> Path:
    """The history folder: ``path`` if given, else ``$STREAMMAP_HISTORY``, else
    ``$XDG_DATA_HOME/streammap/history``, else ``~/.local/share/streammap/history``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "streammap" / "history"


def source_stem(site) -> str:
    """The program a task belongs to, from its call site: ``"fm_radio.py:12"`` → ``"fm_radio"``."""
    if not isinstance(site, str) or not site:
        return "_"
    name = site.split(":", 1)[0]
    name = name.rsplit("/", 1)[-1]
    if name.endswith(".py"):
        name = name[:-3]
    return _SAFE.sub("-", name) or "_"


def history_file(folder, stem: str, kernel: str) -> Path:
    """``<folder>/<stem>/<kernel>.jsonl``."""
    return Path(folder) / _SAFE.sub("-", stem) / (_SAFE.sub("-", str(kernel)) + ".jsonl")


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def task_sizes(attrs: Mapping) -> dict:
    """What identifies the size of one call: scalar arguments, number of task inputs, clauses."""
    sizes: dict = {}
    refs = 0
    for i, spec in enumerate(attrs.get("args") or ()):
        if isinstance(spec, dict):
            if "value" in spec and _scalar(spec["value"]):
                sizes[f"arg{i}"] = spec["value"]
            elif "ref" in spec:
                refs += 1
    for name, spec in (attrs.get("kwargs") or {}).items():
        if isinstance(spec, dict):
            if "value" in spec and _scalar(spec["value"]):
                sizes[f"kw:{name}"] = spec["value"]
            elif "ref" in spec:
                refs += 1
    sizes["refs"] = refs
    for c in CLAUSE_SIZES:
        v = attrs.get(c)
        if v is not None:
            sizes[c] = v
    return sizes


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) < 1e16:
            return str(int(v))
        return repr(v)
    return json.dumps(v)


def size_key(sizes: Mapping) -> str:
    """``sizes`` as a stable string: ``name=value`` pairs sorted by name, joined by ``;``."""
    return ";".join(f"{k}={_fmt(sizes[k])}" for k in sorted(sizes))


def clause_key(sizes: Mapping) -> str:
    """The part of :func:`size_key` that ignores scalar arguments (clauses and ``refs``)."""
    return ";".join(f"{k}={_fmt(sizes[k])}" for k in sorted(sizes) if k in CLAUSE_SIZES or k == "refs")


# ---------------------------------------------------------------------- file access

@contextmanager
def _locked(f, exclusive: bool):
    if fcntl is None:       # pragma: no cover
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _line(rec: Mapping) -> str:
    ordered = {k: rec[k] for k in RECORD_KEYS if k in rec}
    ordered.update({k: v for k, v in rec.items() if k not in ordered})
    return json.dumps(ordered, ensure_ascii=False, separators=(", ", ": "), default=str) + "\n"


def make_record(kernel: str, stem: str, device_model: str, device_kind: str | None, attrs: Mapping,
                seconds: float, **extra) -> dict:
    """One history record (a dict in :data:`RECORD_KEYS` order) for a call of ``kernel``."""
    sizes = task_sizes(attrs)
    sizes = {k: sizes[k] for k in sorted(sizes)}
    rec = {"kernel": kernel, "source": stem}
    if attrs.get("code"):
        rec["code"] = attrs["code"]
    rec.update(device_model=device_model, device_kind=device_kind, size_key=size_key(sizes), sizes=sizes,
               seconds=float(seconds))
    rec.update(extra)
    rec.setdefault("when", _now())
    rec.setdefault("host", socket.gethostname())
    return rec


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def append_records(records: Iterable[Mapping], history=None) -> int:
    """Append ``records`` (from :func:`make_record`) to their files; returns how many were written.

    Each file gets its lines in one ``write`` under an exclusive lock (safe against concurrent
    writers); a file past :data:`COMPACT_BYTES` is then compacted in place.
    """
    folder = history_dir(history)
    groups: dict[Path, list[str]] = {}
    for rec in records:
        path = history_file(folder, rec.get("source") or "_", rec["kernel"])
        groups.setdefault(path, []).append(_line(rec))
    n = 0
    for path, lines in groups.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(lines).encode("utf-8")
        with open(path, "ab") as f:
            with _locked(f, exclusive=True):
                f.write(data)
                f.flush()
                if f.tell() > COMPACT_BYTES:
                    _compact_locked(path)
        n += len(lines)
    return n


def _compact_locked(path: Path, keep: int = WINDOW) -> None:
    """Rewrite ``path`` in place keeping the latest ``keep`` records per (model, code, size key).

    The caller holds the exclusive lock. In place (not a rename), so writers waiting on the lock
    of this very file append after the rewrite instead of to an unlinked file.
    """
    with open(path, "r+b") as f:
        lines = f.read().decode("utf-8", errors="replace").splitlines(keepends=True)
        seen: Counter = Counter()
        kept = []
        for ln in reversed(lines):
            try:
                rec = json.loads(ln)
                key = (rec["device_model"], rec.get("code"), rec["size_key"])
                hash(key)
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
            seen[key] += 1
            if seen[key] <= keep:
                kept.append(ln if ln.endswith("\n") else ln + "\n")
        f.seek(0)
        f.write("".join(reversed(kept)).encode("utf-8"))
        f.truncate()
        f.flush()


def compact(history=None, keep: int = WINDOW) -> None:
    """Compact every history file of the folder (see :func:`append_records`)."""
    for path in sorted(history_dir(history).glob("*/*.jsonl")):
        with open(path, "ab") as f:
            with _locked(f, exclusive=True):
                _compact_locked(path, keep)


def read_records(path) -> list[dict]:
    """The records of one history file, under a shared lock; lines that are not measurements
    (:func:`_measurement`) are skipped, and so is a file that is not a regular file of at most
    :data:`MAX_HISTORY_BYTES` (a FIFO would block the open, ``/dev/zero`` never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_HISTORY_BYTES:
        os.close(fd)
        return []
    with os.fdopen(fd, "rb") as f:
        with _locked(f, exclusive=False):
            data = f.read(MAX_HISTORY_BYTES)
    out = []
    for ln in data.decode("utf-8", errors="replace").splitlines():
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except (ValueError, RecursionError):         # RecursionError: brackets nested too deep
            continue
        if _measurement(rec):
            out.append(rec)
    return out


def _measurement(rec) -> bool:
    """Whether a parsed line is a measurement the lookup can use: a time > 0 of at most
    :data:`MAX_MEASURED_SECONDS` (estimates are summed into a plan's times, which must stay
    finite), string keys (they index the lookup's tables), ``sizes`` a mapping when present."""
    seconds = rec.get("seconds") if isinstance(rec, dict) else None
    return (type(seconds) in (int, float) and 0 < seconds <= MAX_MEASURED_SECONDS
            and isinstance(rec.get("device_model"), str) and isinstance(rec.get("size_key"), str)
            and isinstance(rec.get("code"), (str, type(None))) and isinstance(rec.get("sizes"), (dict, type(None))))


# ---------------------------------------------------------------------- summaries and lookup

@dataclass
class SizeStats:
    """The measurements of one (kernel, device model, size key): the latest :data:`WINDOW`."""

    sizes: dict
    times: list = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times[-WINDOW:])

    @property
    def mean(self) -> float:
        w = self.times[-WINDOW:]
        return sum(w) / len(w)


@dataclass
class Regression:
    """``t = a·x^b`` (``form="power"``) or ``t = a + b·x`` (``form="affine"``) over size ``x``."""

    x_name: str
    form: str
    a: float
    b: float
    lo: float
    hi: float
    points: int
    error: float        # mean relative error on the points it was fitted to

    def __call__(self, x: float) -> float | None:
        if not (x > 0) or x < self.lo / EXTRAPOLATION or x > self.hi * EXTRAPOLATION:
            return None
        t = self.a * x ** self.b if self.form == "power" else self.a + self.b * x
        return t if t > 0 and math.isfinite(t) else None


def fit_regression(xs, ts, x_name: str = "x") -> Regression | None:
    """Fit per-size medians ``ts`` at sizes ``xs`` (both > 0); ``None`` with under 3 distinct sizes."""
    pts = sorted((float(x), float(t)) for x, t in zip(xs, ts) if x and x > 0 and t > 0)
    if len({x for x, _ in pts}) < MIN_REGRESSION_SIZES:
        return None
    X = [x for x, _ in pts]
    T = [t for _, t in pts]
    n = len(pts)
    # Power law: least squares on logs.
    lx = [math.log(x) for x in X]
    lt = [math.log(t) for t in T]
    mx, mt = sum(lx) / n, sum(lt) / n
    sxx = sum((v - mx) ** 2 for v in lx)
    b = sum((u - mx) * (v - mt) for u, v in zip(lx, lt)) / sxx if sxx > 0 else 0.0
    power = Regression(x_name, "power", math.exp(mt - b * mx), b, X[0], X[-1], n, 0.0)
    # Affine: minimise sum ((a + b x - t) / t)^2, i.e. weighted least squares with weights 1/t^2.
    w = [1.0 / (t * t) for t in T]
    sw = sum(w)
    swx = sum(wi * x for wi, x in zip(w, X))
    swxx = sum(wi * x * x for wi, x in zip(w, X))
    swt = sum(wi * t for wi, t in zip(w, T))
    swxt = sum(wi * x * t for wi, x, t in zip(w, X, T))
    det = sw * swxx - swx * swx
    if det > 0:
        bb = (sw * swxt - swx * swt) / det
        aa = (swt - bb * swx) / sw
    else:
        aa, bb = swt / sw, 0.0
    if bb < 0:                                   # time never falls with size
        aa, bb = swt / sw, 0.0
    if aa < 0:                                   # nor is it negative for small sizes
        aa, bb = 0.0, swxt / swxx
    affine = Regression(x_name, "affine", aa, bb, X[0], X[-1], n, 0.0)
    best = None
    for model in (power, affine):
        errs = []
        for x, t in pts:
            p = model.a * x ** model.b if model.form == "power" else model.a + model.b * x
            errs.append(abs(p - t) / t)
        model.error = sum(errs) / n
        if best is None or model.error < best.error:
            best = model
    return best


class KernelModel:
    """What the history knows of one kernel of one program on one device model."""

    def __init__(self, kernel: str, stem: str, device_model: str):
        self.kernel, self.stem, self.device_model = kernel, stem, device_model
        self.device_kind: str | None = None
        self.by_size: dict[str, SizeStats] = {}
        self._by_clause: dict[str, list] | None = None
        self._regressions: dict[str, Regression | None] = {}
        self._cache: dict[str, tuple[float | None, str]] = {}

    def add(self, rec: Mapping) -> None:
        st = self.by_size.get(rec["size_key"])
        if st is None:
            st = self.by_size[rec["size_key"]] = SizeStats(dict(rec.get("sizes") or {}))
        st.times.append(float(rec["seconds"]))
        self.device_kind = rec.get("device_kind") or self.device_kind
        self._by_clause = None
        self._regressions.clear()
        self._cache.clear()

    def by_clause(self) -> dict[str, list]:
        if self._by_clause is None:
            groups: dict[str, list] = {}
            for st in self.by_size.values():
                groups.setdefault(clause_key(st.sizes), []).extend(st.times[-WINDOW:])
            self._by_clause = groups
        return self._by_clause

    def regression(self, x_name: str) -> Regression | None:
        if x_name not in self._regressions:
            per_x: dict[float, list] = {}
            for st in self.by_size.values():
                x = st.sizes.get(x_name)
                if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0:
                    per_x.setdefault(float(x), []).extend(st.times[-WINDOW:])
            xs = sorted(per_x)
            self._regressions[x_name] = fit_regression(xs, [statistics.median(per_x[x]) for x in xs], x_name)
        return self._regressions[x_name]

    def lookup(self, key: str, sizes_fn: Callable[[], dict]) -> tuple[float | None, str]:
        """``(seconds or None, how)``, ``how`` one of ``exact``, ``clauses``, ``regression``, ``none``."""
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        st = self.by_size.get(key)
        if st is not None:
            ans = (st.median, "exact")
        else:
            sizes = sizes_fn()
            same = self.by_clause().get(clause_key(sizes))
            if same:
                ans = (statistics.median(same), "clauses")
            else:
                ans = (None, "none")
                for x_name in CLAUSE_SIZES:
                    x = sizes.get(x_name)
                    if x is None:
                        continue
                    reg = self.regression(x_name)
                    if reg is not None:
                        t = reg(float(x))
                        if t is not None:
                            ans = (t, "regression")
                    break          # the first size the task has decides; no mixing of sizes
        self._cache[key] = ans
        return ans


_ANY = object()           # kernel_models without a code: every record
_MISSING = object()


class History:
    """The measurements of a history folder, loaded per (program, kernel) file on first use.

    Use :meth:`load`, then :meth:`estimate` or :meth:`as_hook` (the ``history=`` argument of
    :class:`~streammap.cost.model.CostModel`).
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self._files: dict[tuple[str, str], list[dict]] = {}      # (stem, kernel) -> its records
        # (stem, kernel, code) -> {device_model: KernelModel}; {} when the file is absent
        self._kernels: dict[tuple, dict[str, KernelModel]] = {}
        self._outdated: dict[tuple, set] = {}    # (stem, kernel, code) -> models with other code only
        self._last_attrs = None
        self._last_key: tuple = ("_", None, None, None)
        #: How each answered lookup was made: counts of ``exact``, ``clauses``, ``regression``, ``none``.
        self.lookups: Counter = Counter()
        #: ``(program, kernel, device model)`` looked up whose measurements are all of another
        #: version of the kernel's code (so the clauses were used instead).
        self.stale: set[tuple[str, str, str]] = set()

    @classmethod
    def load(cls, path=None) -> "History":
        """The history at ``path`` (default: :func:`history_dir`). Files are read lazily."""
        return cls(history_dir(path))

    def _records(self, stem: str, kernel: str) -> list[dict]:
        key = (stem, kernel)
        recs = self._files.get(key)
        if recs is None:
            recs = self._files[key] = read_records(history_file(self.folder, stem, kernel))
        return recs

    def kernel_models(self, stem: str, kernel: str, code: str | None = None) -> dict[str, KernelModel]:
        """``{device_model: KernelModel}`` of one kernel of one program (read on first use).

        With ``code`` (the kernel's fingerprint), each device model's model holds the measurements
        of that code, else, when it has no fingerprinted ones at all, those without a fingerprint;
        other device models have no model (see the module docstring). Without ``code``, every
        measurement.
        """
        k = (stem, kernel, code)
        models = self._kernels.get(k)
        if models is not None:
            return models
        records = self._records(stem, kernel)
        wanted: dict[str, object] = {}           # device model -> the code its records must have
        if code is None:
            wanted = dict.fromkeys((r["device_model"] for r in records), _ANY)
        else:
            versions: dict[str, set] = {}
            for r in records:
                versions.setdefault(r["device_model"], set()).add(r.get("code"))
            for device_model, codes in versions.items():
                if code in codes:
                    wanted[device_model] = code
                elif codes == {None}:            # only lines from before fingerprints: cannot tell
                    wanted[device_model] = None
            self._outdated[k] = set(versions) - set(wanted)
        models = {}
        for rec in records:                      # in file order: the latest measurements last
            want = wanted.get(rec["device_model"], _MISSING)
            if want is _MISSING or (want is not _ANY and rec.get("code") != want):
                continue
            m = models.get(rec["device_model"])
            if m is None:
                m = models[rec["device_model"]] = KernelModel(kernel, stem, rec["device_model"])
            m.add(rec)
        self._kernels[k] = models
        return models

    def all_models(self) -> list[KernelModel]:
        """Every :class:`KernelModel` of the folder (reads every file)."""
        out = []
        if self.folder.is_dir():
            for path in sorted(self.folder.glob("*/*.jsonl")):
                out.extend(self.kernel_models(path.parent.name, path.stem).values())
        return out

    def lookup(self, kernel: str, device_model: str, task_attrs: Mapping) -> tuple[float | None, str]:
        """:meth:`estimate` with how it was found: ``exact``, ``clauses``, ``regression`` or ``none``."""
        # The cost model asks for every device model of one task in a row: remember the last task.
        if task_attrs is self._last_attrs:
            stem, code, key, sizes = self._last_key
        else:
            stem, code, key, sizes = source_stem(task_attrs.get("site")), task_attrs.get("code"), None, None
            self._last_attrs, self._last_key = task_attrs, (stem, code, None, None)
        models = self._kernels.get((stem, kernel, code))
        if models is None:
            models = self.kernel_models(stem, kernel, code)
        m = models.get(device_model)
        if m is None:
            if device_model in self._outdated.get((stem, kernel, code), ()):
                self.stale.add((stem, kernel, device_model))
            return None, "none"
        if key is None:
            sizes = task_sizes(task_attrs)
            key = size_key(sizes)
            self._last_key = (stem, code, key, sizes)
        ans = m.lookup(key, lambda: sizes)
        self.lookups[ans[1]] += 1
        return ans

    def stale_line(self) -> str | None:
        """One line naming the kernels whose measurements went unused because their code changed
        since (:attr:`stale`), for ``streammap compile`` to print; ``None`` when there are none."""
        if not self.stale:
            return None
        names = sorted({f"{stem}.{kernel}" for stem, kernel, _ in self.stale})
        one = len(names) == 1
        it, was, its, runs = ("it", "was", "its", "runs") if one else ("they", "were", "their", "run")
        return (f"history: not used for {', '.join(names)}, whose code changed since {it} {was} measured "
                f"({its} times are measured again when {it} {runs}, or by `streammap profile`)")

    def estimate(self, kernel: str, device_model: str, task_attrs: Mapping) -> float | None:
        """Seconds of one call of ``kernel`` on ``device_model`` with the task's sizes, or ``None``."""
        return self.lookup(kernel, device_model, task_attrs)[0]

    def as_hook(self) -> Callable[[str, str, Mapping], Optional[float]]:
        """The callable :class:`~streammap.cost.model.CostModel` takes as ``history=``."""
        return self.estimate

    def summary_rows(self) -> list[dict]:
        """Per (program, kernel, device model): sizes seen, measurements, median of the latest."""
        rows = []
        for m in self.all_models():
            times = [t for st in m.by_size.values() for t in st.times[-WINDOW:]]
            rows.append({"source": m.stem, "kernel": m.kernel, "device_model": m.device_model,
                         "device_kind": m.device_kind, "sizes": len(m.by_size),
                         "measurements": sum(st.count for st in m.by_size.values()),
                         "median": statistics.median(times) if times else None})
        return rows


# ---------------------------------------------------------------------- recording runs

_CPU_MODEL: str | None = None
_GPU_MODELS: dict[int, str] | None = None


def local_cpu_model() -> str:
    """This machine's CPU as the cost model names it (discovery's model, else ``"cpu"``)."""
    global _CPU_MODEL
    if _CPU_MODEL is None:
        try:
            _CPU_MODEL = cpu_device()[0].model or "cpu"
        except Exception:        # discovery never stops a run from being recorded  # noqa: BLE001
            _CPU_MODEL = "cpu"
    return _CPU_MODEL


def local_gpu_models() -> dict[int, str]:
    """``{CUDA ordinal: model}`` of this machine's GPUs, from NVML discovery (``{}`` when none)."""
    global _GPU_MODELS
    if _GPU_MODELS is None:
        try:
            spec = discover_local()
            _GPU_MODELS = {d.index: d.model or d.kind for n in spec.nodes for d in n.devices
                           if d.kind == "gpu" and d.index is not None}
        except Exception:  # noqa: BLE001
            _GPU_MODELS = {}
    return _GPU_MODELS


def executed_models(plan, record) -> dict[str, tuple[str, str] | None]:
    """Plan device id → ``(device model, kind)`` its tasks are recorded against, or ``None`` (skip).

    See the module docstring (*Recording runs*) for the policy.
    """
    used = {t.device for t in record.tasks if t.start is not None}
    host_devices = [d for d in record.devices if d.id in used and d.executor.startswith("numpy")]
    out: dict[str, tuple[str, str] | None] = {}
    for d in record.devices:
        ex = d.executor
        if ex.startswith("cupy:"):
            try:
                ordinal = int(ex.split(":", 1)[1])
            except ValueError:
                ordinal = -1
            model = local_gpu_models().get(ordinal)
            if model is None:
                try:
                    pd = plan.device(d.id)
                    model = pd.model or pd.kind
                except KeyError:
                    model = None
            out[d.id] = (model, "gpu") if model else None
        elif ex == "numpy":
            out[d.id] = (local_cpu_model(), "cpu")
        elif ex.startswith("numpy"):       # emulating another device
            out[d.id] = (local_cpu_model(), "cpu") if len(host_devices) == 1 else None
        else:
            out[d.id] = None
    return out


def record_run(plan, record, history_dir=None, *, graph=None, origin: str = "run") -> int:
    """Append the measured times of a finished run to the history; returns the number of records.

    Parameters
    ----------
    plan : Plan
        The plan that ran.
    record : RunRecord
        Its run record (``run_plan(..., record_path=...)``, then
        :func:`streammap.runrecord.read_run_record`).
    history_dir : path, optional
        The history folder (default :func:`history_dir`).
    graph : networkx.DiGraph, optional
        The plan's task graph, for the tasks' clause sizes; by default the plan's source is
        parsed again with the plan's params (the plan carries no clauses).

    Nothing is recorded for a failed run, a workflow plan, or tasks that did not run; see the
    module docstring for which device model each task is recorded against.
    """
    if record.status != "ok" or plan.source.kind != "program":
        return 0
    models = executed_models(plan, record)
    if not any(models.values()):
        return 0
    if graph is None:
        graph = parse_program(plan.source.path, overrides=dict(plan.params), entry=plan.source.entry)
    path = str(Path(plan.source.path).resolve())
    params = dict(plan.params)
    when = record.started
    recs = []
    for t in record.tasks:
        dur = t.measured
        target = models.get(t.device)
        if dur is None or dur <= 0 or target is None or t.id not in graph:
            continue
        attrs = graph.nodes[t.id]
        recs.append(make_record(t.kernel, source_stem(attrs.get("site") or t.site), target[0], target[1], attrs,
                                dur, repeats=1, origin=origin, when=when, path=path, params=params))
    return append_records(recs, history_dir)


def record_after_run(plan, record_path, history=None) -> str:
    """What ``streammap run`` calls after a successful run: record it, never fail because of it.

    Reads the run record at ``record_path``, appends its times (:func:`record_run`) to the history
    folder ``history`` (default :func:`history_dir`), and returns one line for the user:
    ``"recorded 12 task times in ~/.local/share/streammap/history"``, ``"history: nothing to
    record (...)"`` or ``"history not updated: <why>"``. Never raises (except KeyboardInterrupt).
    """
    folder = history_dir(history)
    try:
        rec = read_run_record(record_path)
        n = record_run(plan, rec, folder)
    except Exception as exc:        # the run succeeded; a history problem must not turn it into a failure  # noqa: BLE001
        msg = exc.format().splitlines()[0] if hasattr(exc, "format") and callable(exc.format) else str(exc)
        return f"history not updated: {msg}"
    if n == 0:
        why = "several emulated devices share the CPU" if rec.emulate else "no task ran on a device it can record"
        return f"history: nothing to record ({why})"
    return f"recorded {n} task time{'s' if n != 1 else ''} in {_tilde(folder)}"


def _tilde(path: Path) -> str:
    try:
        return "~/" + str(Path(path).resolve().relative_to(Path.home().resolve()))
    except (ValueError, RuntimeError, OSError):
        return str(path)


def resolve_history_hook(history=None):
    """The ``history=`` argument for :class:`~streammap.cost.model.CostModel` from what a caller gave.

    ``None`` or ``True``: the default folder (:func:`history_dir`), or ``None`` when it does not
    exist; ``False``: no history (``None``); a path: that folder; a :class:`History`: its hook; any
    other callable: itself.
    """
    if history is False:
        return None
    if isinstance(history, History):
        return history.as_hook()
    if callable(history):
        return history
    folder = history_dir(None if history is True else history)
    if not folder.is_dir():
        return None
    return History(folder).as_hook()


# ---------------------------------------------------------------------- reporting

_SOURCE_WORDS = {"history": "from history", "clauses": "from clauses", "times": "from measured times",
                 "runtime": "from reference runtimes", "default": "with no estimate (launch overhead only)"}


def estimate_sources_summary(plan_or_sources) -> str:
    """One line saying where a plan's estimates came from, e.g.
    ``"estimates: 9 tasks from history, 3 from clauses"``.

    Takes a :class:`~streammap.plan.Plan` (its tasks' ``estimate``), a
    :class:`~streammap.cost.model.CostModel` (its ``source``) or a list of source names.
    """
    if hasattr(plan_or_sources, "tasks") and not isinstance(plan_or_sources, (list, tuple)) \
            and hasattr(plan_or_sources, "mapper"):
        sources = [t.estimate or "default" for t in plan_or_sources.tasks]
    elif hasattr(plan_or_sources, "source") and isinstance(getattr(plan_or_sources, "source"), list):
        sources = list(plan_or_sources.source)
    else:
        sources = list(plan_or_sources)
    counts = Counter(sources)
    if not counts:
        return "estimates: no tasks"
    order = ["history", "clauses", "times", "runtime", "default"]
    keys = sorted(counts, key=lambda s: (order.index(s) if s in order else len(order), s))
    parts = []
    for i, s in enumerate(keys):
        n = counts[s]
        words = _SOURCE_WORDS.get(s, f"from {s}")
        parts.append(f"{n} task{'s' if n != 1 else ''} {words}" if i == 0 else f"{n} {words}")
    return "estimates: " + ", ".join(parts)
