"""Telemetry: what the devices of this machine are doing, sampled while a plan runs.

Two samplers, one interface (:class:`Sampler`): :meth:`~Sampler.devices` lists what it observes
(:class:`DeviceInfo`), :meth:`~Sampler.sample` returns one :class:`Reading` per device, and
:meth:`~Sampler.events` the Xid events since the last call.

:class:`NvmlSampler`
    NVIDIA GPUs through NVML (``pynvml`` of ``nvidia-ml-py``; tests pass a fake module), one
    handle per GPU: utilisation (``nvmlDeviceGetUtilizationRates().gpu`` / 100), memory used
    (``nvmlDeviceGetMemoryInfo().used``), power (``nvmlDeviceGetPowerUsage``, mW → W),
    temperature (``nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)``), uncorrected volatile ECC
    errors (``nvmlDeviceGetTotalEccErrors``) and Xid critical errors (an event set:
    ``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, set)``,
    polled with ``nvmlEventSetWait(set, 0)`` until it times out). Each query is tolerated on its
    own: one that raises ``NotSupported`` (or is missing) is not asked again and its field stays
    ``None``; ``GpuIsLost`` marks the reading ``lost``.
:class:`CpuSampler`
    The host: utilisation of all CPUs from ``/proc/stat`` (busy jiffies / all jiffies between two
    samples), memory used from ``/proc/meminfo`` (``MemTotal − MemAvailable``), package
    temperature from ``/sys/class/thermal`` and package power from RAPL
    (``/sys/class/powercap/intel-rapl:0/energy_uj``) where they are readable. No third-party
    module: two small file reads per sample (three with RAPL); the temperature is read at most
    once a second per process (:data:`TEMPERATURE_EVERY`), what never changes (model, memory
    size, which thermal zone) once per process.

:func:`local_samplers` gives both (NVML only when it starts and sees a GPU). NVML is started once
per process and never shut down (``nvmlInit`` is reference counted and slow on big machines), so
repeated runs and ``streammap monitor`` pay it once.

:class:`TelemetryRecorder` keeps the readings as per-device time series (seconds since the run
started) for the run record, and :class:`PeriodicThread` calls a function every ``interval``
seconds in a daemon thread until :meth:`~PeriodicThread.stop`, which wakes it at once.
:data:`TICKER` is one such thread shared by the whole process (runs add and remove jobs without
starting a thread, or even waking it when it already sleeps until an earlier time).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

#: Default seconds between two samples of a run.
DEFAULT_INTERVAL = 0.2

_NOT_SUPPORTED = 3
_GPU_IS_LOST = 15
_TIMEOUT = 10


@dataclass
class DeviceInfo:
    """A device a sampler observes. ``id`` is the local name: ``gpu0`` (NVML index 0), ``cpu``."""

    id: str
    kind: str                       # "gpu" or "cpu"
    source: str                     # "nvml" or "cpu"
    model: Optional[str] = None
    index: Optional[int] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    memory_total: Optional[float] = None


@dataclass
class Reading:
    """One sample of one device. Ratios are 0–1; memory in bytes, power in W, temperature in °C."""

    device: str
    utilization: Optional[float] = None
    memory_used: Optional[float] = None
    memory_total: Optional[float] = None
    power: Optional[float] = None
    temperature: Optional[float] = None
    ecc_uncorrected: Optional[int] = None
    lost: bool = False

    @property
    def memory_share(self) -> Optional[float]:
        if self.memory_used is None or not self.memory_total:
            return None
        return self.memory_used / self.memory_total


@dataclass
class XidEvent:
    device: str
    xid: int
    t: float = 0.0


class Sampler:
    """Interface of a sampler (see the module docstring)."""

    source = "none"

    def devices(self) -> list[DeviceInfo]:
        return []

    def sample(self) -> list[Reading]:
        return []

    def events(self) -> list[XidEvent]:
        return []


# -- NVML ----------------------------------------------------------------------------------------

_nvml_lock = threading.Lock()
_nvml_started: dict[int, Any] = {}          # id(module) -> module, once nvmlInit succeeded


def nvml_module(nvml=None):
    """The NVML module, initialised (once per process per module), or ``None`` when there is no
    driver, no ``pynvml``, or NVML fails to start."""
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415 -- optional at run time
        except Exception:          # noqa: BLE001
            return None
    with _nvml_lock:
        if id(nvml) in _nvml_started:
            return nvml
        try:
            nvml.nvmlInit()
        except Exception:          # noqa: BLE001 -- LibraryNotFound, DriverNotLoaded, ...
            return None
        _nvml_started[id(nvml)] = nvml
        return nvml


def _text(v) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return str(v).strip("\x00 ").strip() or None


def _err_value(exc) -> Optional[int]:
    return getattr(exc, "value", None)


class NvmlSampler(Sampler):
    """NVIDIA GPUs through NVML. Raises nothing: with no NVML, :meth:`devices` is empty."""

    source = "nvml"

    def __init__(self, nvml=None, indices=None):
        self.mod = nvml_module(nvml)
        self._devices: list[DeviceInfo] = []
        self._handles: list = []
        self._off: set[tuple[str, int]] = set()       # (query, device position) not supported
        self._lost: set[int] = set()
        self._event_set = None
        self._by_handle: dict = {}
        if self.mod is None:
            return
        m = self.mod
        try:
            count = int(m.nvmlDeviceGetCount())
        except Exception:          # noqa: BLE001
            count = 0
        wanted = range(count) if indices is None else [i for i in indices if 0 <= i < count]
        for i in wanted:
            try:
                h = m.nvmlDeviceGetHandleByIndex(i)
            except Exception:      # noqa: BLE001
                continue
            info = DeviceInfo(id=f"gpu{i}", kind="gpu", source="nvml", index=i,
                              model=_text(self._once(m, "nvmlDeviceGetName", h)),
                              uuid=_text(self._once(m, "nvmlDeviceGetUUID", h)))
            pci = self._once(m, "nvmlDeviceGetPciInfo", h)
            info.pci_bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
            mem = self._once(m, "nvmlDeviceGetMemoryInfo", h)
            if mem is not None and getattr(mem, "total", None):
                info.memory_total = float(mem.total)
            self._devices.append(info)
            self._handles.append(h)
            self._by_handle[self._key(h)] = info.id
        self._setup_events()

    @staticmethod
    def _key(h):
        try:
            hash(h)
            return h
        except TypeError:
            return id(h)

    @staticmethod
    def _once(m, name, *args):
        fn = getattr(m, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:          # noqa: BLE001
            return None

    def _setup_events(self) -> None:
        m = self.mod
        create = getattr(m, "nvmlEventSetCreate", None)
        register = getattr(m, "nvmlDeviceRegisterEvents", None)
        kind = getattr(m, "nvmlEventTypeXidCriticalError", None)
        if create is None or register is None or kind is None or not self._handles:
            return
        try:
            es = create()
        except Exception:          # noqa: BLE001
            return
        registered = 0
        for h in self._handles:
            try:
                register(h, kind, es)
                registered += 1
            except Exception:      # noqa: BLE001 -- NotSupported on this board
                pass
        if registered:
            self._event_set = es
        else:
            free = getattr(m, "nvmlEventSetFree", None)
            if free is not None:
                try:
                    free(es)
                except Exception:  # noqa: BLE001
                    pass

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def _query(self, name: str, pos: int, h, *args):
        """``nvml.name(h, *args)``; ``None`` when unsupported (then never asked again)."""
        if (name, pos) in self._off:
            return None
        fn = getattr(self.mod, name, None)
        if fn is None:
            self._off.add((name, pos))
            return None
        try:
            return fn(h, *args)
        except Exception as exc:   # noqa: BLE001
            v = _err_value(exc)
            if v == _GPU_IS_LOST or type(exc).__name__.endswith("GpuIsLost"):
                self._lost.add(pos)
            elif v == _NOT_SUPPORTED or type(exc).__name__.endswith(("NotSupported", "FunctionNotFound")):
                self._off.add((name, pos))
            return None

    def sample(self) -> list[Reading]:
        m = self.mod
        out = []
        temp_gpu = getattr(m, "NVML_TEMPERATURE_GPU", 0)
        ecc_type = getattr(m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        ecc_counter = getattr(m, "NVML_VOLATILE_ECC", 0)
        for pos, (info, h) in enumerate(zip(self._devices, self._handles)):
            r = Reading(device=info.id, memory_total=info.memory_total)
            util = self._query("nvmlDeviceGetUtilizationRates", pos, h)
            if util is not None and getattr(util, "gpu", None) is not None:
                r.utilization = float(util.gpu) / 100.0
            mem = self._query("nvmlDeviceGetMemoryInfo", pos, h)
            if mem is not None:
                r.memory_used = float(mem.used)
                if getattr(mem, "total", None):
                    r.memory_total = float(mem.total)
            power = self._query("nvmlDeviceGetPowerUsage", pos, h)
            if power is not None:
                r.power = float(power) / 1000.0
            temp = self._query("nvmlDeviceGetTemperature", pos, h, temp_gpu)
            if temp is not None:
                r.temperature = float(temp)
            ecc = self._query("nvmlDeviceGetTotalEccErrors", pos, h, ecc_type, ecc_counter)
            if ecc is not None:
                r.ecc_uncorrected = int(ecc)
            r.lost = pos in self._lost
            out.append(r)
        return out

    def events(self) -> list[XidEvent]:
        es = self._event_set
        if es is None:
            return []
        wait = getattr(self.mod, "nvmlEventSetWait", None)
        out = []
        for _ in range(64):                    # drain what is pending, never block
            try:
                data = wait(es, 0)
            except Exception as exc:  # noqa: BLE001 -- Timeout: nothing pending
                if _err_value(exc) not in (_TIMEOUT, None) and not type(exc).__name__.endswith("Timeout"):
                    self._event_set = None     # broken event set: stop polling it
                break
            if data is None:
                break
            dev = self._by_handle.get(self._key(getattr(data, "device", None)))
            if dev is None:
                dev = self._devices[0].id if len(self._devices) == 1 else "gpu?"
            try:
                xid = int(getattr(data, "eventData", 0))
            except (TypeError, ValueError):
                xid = 0
            out.append(XidEvent(device=dev, xid=xid))
        return out


# -- CPU -----------------------------------------------------------------------------------------

def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except OSError:
        return None


_fds: dict[str, int] = {}
_fds_lock = threading.Lock()


def _pread(path: str, size: int = 65536) -> Optional[str]:
    """Like :func:`_read` for a kernel file read again and again (``/proc/stat``, RAPL): the file
    stays open (one descriptor per path per process, close-on-exec) and each read is one
    ``pread`` at offset 0, which makes the kernel generate it afresh. One system call instead of
    six (open, fstat, ioctl, read, read, close): a few microseconds, where a cold ``open`` costs
    tens. Other paths (tests' fake ``/proc``) are read with :func:`_read`.

    With ``size`` below 65536, only the first ``size`` bytes (the head of the file, which is all
    :class:`CpuSampler` parses: the ``cpu`` line of ``/proc/stat``, the first lines of
    ``/proc/meminfo``); decoding and splitting the rest, right after a run, costs more than the
    kernel's read when caches are cold. A file that is not kept open is read whole."""
    fd = _fds.get(path)
    if fd is None:
        if not path.startswith(("/proc/", "/sys/")):
            return _read(path)
        with _fds_lock:
            fd = _fds.get(path)
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError:
                    return None
                _fds[path] = fd
    try:
        data = os.pread(fd, size, 0)
    except OSError:
        return _read(path)
    if len(data) >= 65536:                 # (never for these files) the rest the slow way
        return _read(path)
    return data.decode("ascii", "replace")


#: Seconds a package temperature read from ``/sys/class/thermal`` is reused: a thermal zone read
#: can take milliseconds (ACPI zones), and the temperature changes slowly.
TEMPERATURE_EVERY = 1.0
_temperatures: dict[str, tuple[float, Optional[float]]] = {}     # path -> (monotonic time, °C)


def _temperature(path: str) -> Optional[float]:
    """The temperature at ``path`` (°C), read at most every :data:`TEMPERATURE_EVERY` seconds per
    process (shared by the runs and samplers of the process)."""
    now = time.monotonic()
    hit = _temperatures.get(path)
    if hit is not None and now - hit[0] < TEMPERATURE_EVERY:
        return hit[1]
    text = _pread(path)
    try:
        value = float(text) / 1000.0 if text else None
    except ValueError:
        value = None
    _temperatures[path] = (now, value)
    return value


#: Seconds a reading of the host's memory (``/proc/meminfo``) is reused, half the default interval.
MEMORY_EVERY = 0.1
_host_memory_read: list = []                 # [monotonic time, (used, total)]


class CpuSampler(Sampler):
    """The host's CPUs and memory, from ``/proc`` and ``/sys`` (fields stay ``None`` elsewhere)."""

    source = "cpu"

    _static: dict = {}       # (proc, sys_root) -> (model, memory total, temperature path, rapl, CPUs)

    def __init__(self, proc: str = "/proc", sys_root: str = "/sys"):
        self.proc = proc
        self._stat = os.path.join(proc, "stat")
        self._meminfo = os.path.join(proc, "meminfo")
        self._uptime = os.path.join(proc, "uptime")
        static = CpuSampler._static.get((proc, sys_root))
        # what does not change is read once per process; even os.cpu_count() reads a /sys file
        self._ncpu = static[4] if static is not None else os.cpu_count() or 1
        self._prev: Optional[tuple[float, float]] = self._cpu_time()
        if static is None:
            model = None
            text = _read(os.path.join(proc, "cpuinfo")) or ""
            for line in text.splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip() or None
                    break
            rapl = os.path.join(sys_root, "class/powercap/intel-rapl:0/energy_uj")
            static = (model, self._memory()[1], self._find_temperature(sys_root),
                      rapl if _read(rapl) is not None else None, self._ncpu)
            if proc == "/proc":
                CpuSampler._static[(proc, sys_root)] = static
        model, total, self._temp_path, self._rapl, _ = static
        self._energy_prev = self._energy()
        self._info = DeviceInfo(id="cpu", kind="cpu", source="cpu", model=model, memory_total=total)

    @staticmethod
    def _find_temperature(sys_root) -> Optional[str]:
        zones = sorted(glob.glob(os.path.join(sys_root, "class/thermal/thermal_zone*")))
        best = None
        for z in zones:
            kind = (_read(os.path.join(z, "type")) or "").strip()
            if kind in ("x86_pkg_temp", "cpu-thermal", "cpu_thermal", "k10temp", "coretemp"):
                return os.path.join(z, "temp")
            if best is None and _read(os.path.join(z, "temp")) is not None:
                best = os.path.join(z, "temp")
        return best

    #: Bytes of ``/proc/stat`` and ``/proc/meminfo`` read (their first lines; see :func:`_pread`).
    HEAD = 512

    def _cpu_time(self) -> Optional[tuple[float, float]]:
        """(total, busy) CPU time since boot, summed over the CPUs, in seconds.

        From ``/proc/uptime`` (seconds since boot, and idle seconds summed over the CPUs: total =
        uptime x CPUs, busy = total - idle), a file the kernel makes from a handful of counters,
        rather than ``/proc/stat``, which it makes by summing every CPU's and every interrupt's
        counters: tens of microseconds on a small machine right after a run, far more on a
        many-core GPU server, twice per run. Both count in hundredths of a second; ``/proc/stat``
        also counts I/O wait as idle, ``/proc/uptime`` as busy. A ``/proc`` without ``uptime``
        (tests' fake one) is read from ``stat``."""
        text = _pread(self._uptime, 128)
        if text:
            parts = text.split()
            try:
                up, idle = float(parts[0]), float(parts[1])
            except (IndexError, ValueError):
                return None
            total = up * self._ncpu
            return total, total - idle
        return self._jiffies()

    def _jiffies(self) -> Optional[tuple[int, int]]:
        text = _pread(self._stat, self.HEAD)
        if not text:
            return None
        line, nl, _ = text.partition("\n")
        if not nl and len(text) >= self.HEAD:           # (never) a cpu line longer than the head
            text = _pread(self._stat) or ""
            line = text.partition("\n")[0]
        first = line.split()
        if not first or first[0] != "cpu":
            return None
        v = [int(x) for x in first[1:9]] + [0] * max(0, 8 - len(first[1:9]))
        idle = v[3] + v[4]                      # idle + iowait
        total = sum(v)                          # user..steal (guest is counted within user)
        return total, total - idle

    def _memory(self, head: bool = True) -> tuple[Optional[float], Optional[float]]:
        text = _pread(self._meminfo, self.HEAD if head else 65536)
        if not text:
            return None, None
        if head and len(text) >= self.HEAD:
            text = text[:text.rfind("\n") + 1]          # whole lines only
            if "\nMemAvailable:" not in text:
                return self._memory(head=False)          # an old kernel's, or a reordered file
        total = avail = None
        for line in text.splitlines():
            if line.startswith("MemTotal:"):
                total = float(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                avail = float(line.split()[1]) * 1024
            if total is not None and avail is not None:
                break
        if total is None:
            return None, None
        return (total - avail if avail is not None else None), total

    def _host_memory(self) -> tuple[Optional[float], Optional[float]]:
        """:meth:`_memory`, reused for :data:`MEMORY_EVERY` seconds per process (the host's memory
        is one figure for every run and sampler of the process; back-to-back runs share a read)."""
        if self.proc != "/proc":
            return self._memory()
        now = time.monotonic()
        hit = _host_memory_read
        if hit and now - hit[0] < MEMORY_EVERY:
            return hit[1]
        value = self._memory()
        _host_memory_read[:] = [now, value]
        return value

    def _energy(self) -> Optional[tuple[float, float]]:
        if self._rapl is None:
            return None
        text = _pread(self._rapl)
        if not text:
            return None
        try:
            return time.perf_counter(), float(text.strip()) / 1e6
        except ValueError:
            return None

    def devices(self) -> list[DeviceInfo]:
        return [self._info]

    def sample(self) -> list[Reading]:
        r = Reading(device="cpu")
        now = self._cpu_time()
        prev = self._prev
        if now is not None and prev is not None and now[0] > prev[0]:
            r.utilization = min(1.0, max(0.0, (now[1] - prev[1]) / (now[0] - prev[0])))
        if now is not None:
            self._prev = now
        r.memory_used, r.memory_total = self._host_memory()
        if self._temp_path is not None:
            r.temperature = _temperature(self._temp_path)
        e = self._energy()
        if e is not None and self._energy_prev is not None and e[0] > self._energy_prev[0] and e[1] >= self._energy_prev[1]:
            r.power = (e[1] - self._energy_prev[1]) / (e[0] - self._energy_prev[0])
        self._energy_prev = e
        return [r]


def on_node(node: str, items: list) -> list:
    """Devices (:class:`DeviceInfo`) or readings (:class:`Reading`) of another machine, named by
    its node: ``cpu`` → ``node1/cpu`` (copies; the names a Ray run and its record use)."""
    out = []
    for x in items:
        name = "id" if isinstance(x, DeviceInfo) else "device"
        out.append(dataclasses.replace(x, **{name: f"{node}/{getattr(x, name)}"}))
    return out


def local_samplers(nvml=None, cpu: bool = True, gpu: bool = True) -> list[Sampler]:
    """The samplers of this machine: NVML (when it starts and sees a GPU), then the CPU."""
    out: list[Sampler] = []
    if gpu:
        s = NvmlSampler(nvml)
        if s.devices():
            out.append(s)
    if cpu:
        out.append(CpuSampler())
    return out


# -- recording -------------------------------------------------------------------------------------

@dataclass
class Series:
    info: DeviceInfo
    t: list = field(default_factory=list)
    utilization: list = field(default_factory=list)
    memory_used: list = field(default_factory=list)
    power: list = field(default_factory=list)
    temperature: list = field(default_factory=list)
    ecc_uncorrected: list = field(default_factory=list)
    lost: bool = False


class TelemetryRecorder:
    """Per-device time series of readings, plus the Xid events, for the run record."""

    FIELDS = ("utilization", "memory_used", "power", "temperature", "ecc_uncorrected")

    def __init__(self, samplers: list[Sampler], interval: float = DEFAULT_INTERVAL):
        self.samplers = samplers
        self.interval = interval
        self.series: dict[str, Series] = {}
        for s in samplers:
            for info in s.devices():
                self.series[info.id] = Series(info)
        self.events: list[XidEvent] = []

    def add(self, t: float, readings: list[Reading]) -> None:
        for r in readings:
            s = self.series.get(r.device)
            if s is None:
                s = self.series[r.device] = Series(DeviceInfo(id=r.device, kind="?", source="?"))
            s.t.append(round(t, 6))
            s.utilization.append(None if r.utilization is None else round(r.utilization, 4))
            s.memory_used.append(r.memory_used)
            s.power.append(None if r.power is None else round(r.power, 3))
            s.temperature.append(r.temperature)
            s.ecc_uncorrected.append(r.ecc_uncorrected)
            s.lost = s.lost or r.lost

    def add_events(self, t: float, events: list[XidEvent]) -> None:
        for e in events:
            e.t = round(t, 6)
            self.events.append(e)

    def sample(self, t: float) -> tuple[list[Reading], list[XidEvent]]:
        """Ask every sampler once; record and return what they gave."""
        readings: list[Reading] = []
        events: list[XidEvent] = []
        for s in self.samplers:
            try:
                readings += s.sample()
                events += s.events()
            except Exception:      # noqa: BLE001 -- telemetry never stops a run
                pass
        self.add(t, readings)
        self.add_events(t, events)
        return readings, events

    def to_dict(self, plan_devices: dict[str, list[str]] | None = None) -> dict:
        """The run-record form (see :class:`streammap.runrecord.RunTelemetry`)."""
        plan_devices = plan_devices or {}
        devs = []
        for dev_id, s in self.series.items():
            d = {"id": dev_id, "kind": s.info.kind, "source": s.info.source, "model": s.info.model,
                 "uuid": s.info.uuid, "memory_total": s.info.memory_total,
                 "plan_devices": plan_devices.get(dev_id, []), "t": s.t, "lost": s.lost}
            for f in self.FIELDS:
                values = getattr(s, f)
                d[f] = values if any(v is not None for v in values) else None
            devs.append(d)
        return {"interval": self.interval, "devices": devs,
                "xid_events": [{"device": e.device, "xid": e.xid, "t": e.t} for e in self.events]}


class PeriodicThread:
    """Call ``fn()`` every ``interval`` seconds in a daemon thread, until :meth:`stop`.

    ``fn`` exceptions are swallowed (monitoring never stops a run). :meth:`stop` wakes the thread at
    once and waits for it (at most ``timeout`` seconds).
    """

    def __init__(self, fn: Callable[[], None], interval: float, name: str = "streammap telemetry",
                 first: bool = False):
        self.fn = fn
        self.first = first
        self.interval = max(0.001, float(interval))
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> "PeriodicThread":
        self._thread.start()
        return self

    def _loop(self) -> None:
        wait = self._wake.wait
        if self.first:
            try:
                self.fn()
            except Exception:      # noqa: BLE001
                pass
        while not wait(self.interval):
            try:
                self.fn()
            except Exception:      # noqa: BLE001
                pass

    def stop(self, timeout: float = 2.0) -> None:
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)


class Ticker:
    """One daemon thread that calls registered functions periodically (see :data:`TICKER`).

    :meth:`add` returns a handle for :meth:`remove`; neither waits for the thread. A function
    already called when it is removed may still be running: callers guard their own state.
    Exceptions are swallowed.
    """

    def __init__(self, name: str = "streammap ticker"):
        self._cv = threading.Condition()
        self._jobs: dict[int, list] = {}
        self._next = 0
        self._thread: Optional[threading.Thread] = None
        self._name = name
        self._wake_at = float("-inf")      # when the sleeping thread wakes up by itself (-inf: awake)

    def add(self, fn: Callable[[], None], interval: float, first: bool = False) -> int:
        now = time.perf_counter()
        with self._cv:
            self._next += 1
            h = self._next
            due = now if first else now + interval
            self._jobs[h] = [due, max(0.001, float(interval)), fn]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif due < self._wake_at:
                # wake the thread only when it would sleep past the new job: a run that adds its job
                # while the thread sleeps until an earlier time (or runs jobs) costs it no wake-up
                self._cv.notify()
        return h

    def remove(self, handle: int) -> None:
        with self._cv:                     # no wake-up: the thread skips what is gone when it wakes
            self._jobs.pop(handle, None)

    def _loop(self) -> None:
        cv, jobs = self._cv, self._jobs
        inf = float("inf")
        while True:
            with cv:
                now = time.perf_counter()
                due = [(h, j[2]) for h, j in jobs.items() if j[0] <= now]
                if not due:
                    self._wake_at = min(j[0] for j in jobs.values()) if jobs else inf
                    cv.wait(self._wake_at - now if jobs else None)
                    self._wake_at = -inf      # awake: add() need not notify
                    continue
                for h, _ in due:
                    j = jobs[h]
                    j[0] = max(j[0] + j[1], now)
            for h, fn in due:
                if h in jobs:
                    try:
                        fn()
                    except Exception:  # noqa: BLE001
                        pass


#: The process-wide ticker the runs' monitoring uses.
TICKER = Ticker()
