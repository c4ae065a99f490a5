"""The run's monitoring thread: telemetry, metrics, alerts and the slow-device detector.

The process's ticker thread (:data:`~streammap.monitoring.telemetry.TICKER`, one daemon thread shared by every
run, so a run pays no thread start-up) calls :meth:`RunSupervisor.tick` every ``interval`` seconds,
which, in this order:

1. samples the devices (:mod:`streammap.monitoring.telemetry`: NVML for the GPUs the plan runs on, the CPU
   always), records the readings, updates the device gauges, checks the memory, temperature,
   lost-device and ECC/Xid rules;
2. *harvests* the tasks that finished since the last tick from the executor's own lists (``done``,
   ``starts``/``finishes``, ``gpu_events``; everything it reads of an executor is named by
   :class:`~streammap.runtime.view.ExecutorView`): a cursor per device, because a device finishes its
   tasks in plan order, so a tick costs O(new tasks). Each finished task feeds the duration
   histogram, the slow-task rule and the :class:`~streammap.remap.SlowDeviceDetector`; the task
   a device is running (``attempts`` set, not ``done``) is checked against the slow-task rule too;
3. when the detector finds a slow device (or NVML a lost one) and re-mapping is on, asks the
   executor to drain; :func:`streammap.runtime.run_plan` then re-maps and continues.

The first tick comes one interval after the start; :meth:`RunSupervisor.detach` harvests what the
executor finished and :meth:`RunSupervisor.stop` takes a last sample, both on the run's thread
once the workers are done. So a run shorter than the interval is never disturbed while it runs and
pays a fixed few hundred microseconds: set-up (the CPU baseline: the head of ``/proc/stat``), one
sample (the heads of ``/proc/stat`` and ``/proc/meminfo``). The last segment's harvest does per-task
work only when an alert or the detector could use it; otherwise the metrics get the executor's
final lists and count them at the next scrape (:meth:`RunSupervisor._hand_over`). Metric updates
are stores that a scrape applies (:mod:`streammap.monitoring.metrics`), and ``run_plan`` drops the supervisor
before it builds the record, so what monitoring allocated does not set off the garbage
collector's young-generation passes during the record's YAML/JSON work.

The executor's workers never call into this module, so the hot path is unchanged; everything
here reads lists the workers write (reads of list items are atomic in CPython).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections import deque
from typing import NamedTuple, Optional

from streammap.monitoring.telemetry import DEFAULT_INTERVAL, TICKER, CpuSampler, NvmlSampler, TelemetryRecorder
from streammap.remap import SlowDeviceDetector
from streammap.runtime.view import ExecutorView

log = logging.getLogger("streammap.runtime")


def nvml_index(ordinal: int) -> int:
    """The NVML index of CUDA device ``ordinal`` (through ``CUDA_VISIBLE_DEVICES`` when it lists
    indices; NVML and CUDA agree on order with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``)."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        items = [x.strip() for x in vis.split(",") if x.strip()]
        if ordinal < len(items) and items[ordinal].isdigit():
            return int(items[ordinal])
    return ordinal


def local_device_of(placement) -> str:
    """The local observed device (``gpu<nvml index>`` or ``cpu``) that executes a placement."""
    if placement.backend == "cupy" and placement.ordinal is not None:
        return f"gpu{nvml_index(placement.ordinal)}"
    return "cpu"


class Trigger:
    """Why the run should re-map: ``kind`` ``slow`` (with ``factors``) or ``lost`` (``lost``)."""

    def __init__(self, kind: str, t: float, reason: str, devices: list, factors: dict | None = None,
                 lost: list | None = None):
        self.kind, self.t, self.reason, self.devices = kind, t, reason, devices
        self.factors = factors or {}
        self.lost = lost or []


class FinishedSegment(NamedTuple):
    """What :meth:`RunSupervisor._hand_over` gives the metrics of a segment whose workers are done:
    the executor's final lists and where the harvest cursors stopped, counted at the next scrape."""

    order: dict                     #: :attr:`ExecutorView.order`
    cursor: dict                    #: plan device → the index in ``order`` its harvest reached
    done: list                      #: :attr:`ExecutorView.done`
    attempts: list                  #: :attr:`ExecutorView.attempts`
    starts: list                    #: :attr:`ExecutorView.starts`
    finishes: list                  #: :attr:`ExecutorView.finishes`
    tasks: list                     #: the segment's ``plan.tasks``
    failed: int                     #: 1 when the segment ended with an error, else 0


def finished_durations(state: FinishedSegment) -> list:
    """``(kernel, plan device, seconds)`` of the tasks an executor finished past the cursors, from
    the ``state`` :meth:`RunSupervisor._hand_over` gives the metrics."""
    order, cursor, done, _, starts, finishes, tasks, _ = state
    out = []
    for d, ks in order.items():
        for k in ks[cursor[d]:]:
            if not done[k]:
                break
            s, f = starts[k], finishes[k]
            if s is not None and f is not None:
                out.append((tasks[k].kernel, d, f - s))
    return out


def task_counts(state: FinishedSegment) -> tuple:
    """(pending, running, done, failed) tasks of a finished executor (see :func:`finished_durations`)."""
    order, cursor, done, attempts, _, _, _, failed = state
    running = 0
    for d, ks in order.items():
        for k in ks[cursor[d]:]:
            if not done[k]:
                running += 1 if attempts[k] else 0
                break
    n_done = done.count(True)
    return max(0, len(done) - n_done - running - failed), running, n_done, failed


class RunSupervisor:
    """Monitoring of one run (all its executor segments). See the module docstring.

    Parameters
    ----------
    plan : Plan
    placements : dict
        Plan device id → :class:`~streammap.runtime.devices.Placement`.
    telemetry : bool
        Sample the devices.
    interval : float
        Seconds between ticks.
    metrics : streammap.monitoring.metrics.RunMetrics, optional
    alerts : streammap.monitoring.alerts.AlertManager, optional
    remap : streammap.monitoring.alerts.RemapConfig, optional
        When given and active, slow or lost devices trigger a drain.
    samplers : list, optional
        Samplers to use instead of this machine's (tests; the Ray driver's, which read what the
        actors sampled, with its devices told by :meth:`observe_devices`).
    """

    def __init__(self, plan, placements: dict, *, telemetry: bool = True, interval: float = DEFAULT_INTERVAL,
                 metrics=None, alerts=None, remap=None, samplers=None, nvml=None):
        c0 = time.perf_counter()
        #: What monitoring cost: seconds on the run's own thread (set-up, hand-overs, the final
        #: harvest and sample) and CPU seconds of the monitoring thread's ticks.
        self.main_time = 0.0
        self.thread_cpu = 0.0
        self.ticks = 0
        self.plan = plan
        self.metrics = metrics
        self.alerts = alerts
        self.remap = remap
        self.interval = interval
        self.plan_devices: dict[str, list[str]] = {}
        for d, p in placements.items():
            self.plan_devices.setdefault(local_device_of(p), []).append(d)
        if samplers is None and telemetry:
            samplers = []
            gpus = sorted({int(k[3:]) for k in self.plan_devices if k.startswith("gpu")})
            if gpus:
                s = NvmlSampler(nvml, indices=gpus)
                if s.devices():
                    samplers.append(s)
            samplers.append(CpuSampler())
        self.recorder = TelemetryRecorder(samplers or [], interval) if telemetry else None
        if metrics is not None and self.recorder is not None:
            for s in self.recorder.series.values():
                metrics.set_device_info(s.info, self.plan_devices.get(s.info.id, []))
        self.detector = None
        if remap is not None:
            self.detector = SlowDeviceDetector(remap.factor, remap.window, remap.min_task_time)
        self.trigger: Optional[Trigger] = None
        self.remaps_done = 0
        self._lock = threading.RLock()
        self._ex: Optional[ExecutorView] = None
        self._cursor: dict[str, int] = {}
        self._running_seen: dict[int, float] = {}
        self._ratios: deque = deque(maxlen=256)
        self._median: Optional[float] = None
        self._est: Optional[list] = None
        self._lost_seen: set = set()
        self._wheres: dict[str, str] = {}
        self._handle: Optional[int] = None
        self._closed = False
        self.t0 = time.perf_counter()
        self.main_time += self.t0 - c0

    # -- life cycle --------------------------------------------------------------------------
    def start(self, t0: float | None = None) -> "RunSupervisor":
        c0 = time.perf_counter()
        self.t0 = c0 if t0 is None else t0
        # the first tick comes one interval in (a sample at the start would measure nothing: the CPU
        # baseline was just read, and it would compete with the workers starting up); stop() takes
        # the last one, so a run shorter than the interval has one sample, covering the whole run
        self._handle = TICKER.add(self._thread_tick, self.interval)
        self.main_time += time.perf_counter() - c0
        return self

    def _thread_tick(self) -> None:
        c0 = time.thread_time()
        self.tick()
        self.thread_cpu += time.thread_time() - c0
        self.ticks += 1

    def attach(self, executor: ExecutorView) -> None:
        """Follow ``executor`` (a new segment of the run, after a re-mapping)."""
        c0 = time.perf_counter()
        with self._lock:
            self._ex = executor
            self._cursor = dict.fromkeys(executor.order, 0)
            self._running_seen.clear()
            self._est = None                 # the tasks' estimates: made by the first harvest
            self.plan = executor.plan
            if self.trigger is not None:     # decided before this segment started: drain it at once
                executor.request_drain()
        self.main_time += time.perf_counter() - c0

    def detach(self) -> None:
        """Harvest what the executor finished, then stop following it.

        A segment that was not drained is the run's last: what the detector would find now could
        not be acted on (nothing is left to re-map), so it is not asked, and the task ratios feed
        no later harvest. When the slow-task rule cannot fire either (no rule, or a ``run``
        baseline not known yet: a run shorter than the interval), only the metrics want the
        finished tasks: they get the executor's (final) lists, to read at the next scrape, and
        the run's thread does no per-task work at all."""
        c0 = time.perf_counter()
        with self._lock:
            ex = self._ex
            if ex is not None:
                if ex.draining or self._slow_task_live() or ex.gpu_events.count(None) != len(ex.gpu_events):
                    self._harvest(self.now(), detector=ex.draining)
                elif self.metrics is not None:
                    self._hand_over(ex)
            self._ex = None
        self.main_time += time.perf_counter() - c0

    def _slow_task_live(self) -> bool:
        """Whether the slow-task rule can fire on a task now (see :meth:`_harvest`)."""
        rule = self.alerts.config.slow_task if self.alerts is not None else None
        return rule is not None and (rule.baseline != "run" or self._median is not None)

    def _hand_over(self, ex: ExecutorView) -> None:
        """Give the metrics what :meth:`_harvest` would, as the executor's lists (which no longer
        change: its workers are done), read at the next scrape by :func:`finished_durations` and
        :func:`task_counts`. One record: a closure per figure would leave a dozen more objects for
        the garbage collector to count until the scrape."""
        state = FinishedSegment(ex.order, self._cursor, ex.done, ex.attempts, ex.starts, ex.finishes, ex.plan.tasks,
                                1 if ex.error is not None else 0)
        m = self.metrics
        m.observe_tasks_from(finished_durations, len(ex.done), state)
        m.set_tasks_from(task_counts, state)

    def observe_devices(self, infos: list, plan_devices: dict) -> None:
        """Devices known only once the run started (the Ray driver's, as its actors come up):
        ``infos`` (:class:`~streammap.monitoring.telemetry.DeviceInfo`) and observed device → plan devices."""
        with self._lock:
            for dev, pds in plan_devices.items():
                known = self.plan_devices.setdefault(dev, [])
                known += [d for d in pds if d not in known]
            self._wheres.clear()
            if self.metrics is not None:
                for info in infos:
                    self.metrics.set_device_info(info, self.plan_devices.get(info.id, []))

    def take_trigger(self) -> Optional[Trigger]:
        with self._lock:
            t, self.trigger = self.trigger, None
            return t

    def stop(self) -> None:
        c0 = time.perf_counter()
        if self._handle is not None:
            TICKER.remove(self._handle)
            self._handle = None
        with self._lock:
            self.tick()
            self._closed = True
        if self.alerts is not None:
            self.alerts.close()
        self.main_time += time.perf_counter() - c0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # -- the tick ----------------------------------------------------------------------------
    def tick(self) -> None:
        with self._lock:
            if self._closed:
                return
            t = self.now()
            if self.recorder is not None:
                self._sample(t)
            if self._ex is not None:
                self._harvest(t)
            if self.metrics is not None:
                self.metrics.set_elapsed(t)

    def _where(self, dev: str) -> str:
        w = self._wheres.get(dev)
        if w is None:
            pds = self.plan_devices.get(dev)
            w = self._wheres[dev] = f" ({', '.join(pds)})" if pds else ""
        return w

    def _sample(self, t: float) -> None:
        readings, events = self.recorder.sample(t)
        m, a = self.metrics, self.alerts
        for r in readings:
            if m is not None:
                m.set_reading(r)
            if a is not None:
                a.check_reading(t, r, self._where(r.device))
            if r.lost and r.device not in self._lost_seen:
                self._lost_seen.add(r.device)
                lost = [d for d in self.plan_devices.get(r.device, [])]
                if lost and self._may_remap():
                    self._request(Trigger("lost", t, f"{r.device} is lost", lost, lost=lost))
        if a is not None:
            for e in events:
                a.check_xid(t, e, self._where(e.device))

    def _may_remap(self) -> bool:
        return (self.remap is not None and self.trigger is None and self._ex is not None
                and self.remaps_done < self.remap.max_remaps)

    def _request(self, trigger: Trigger) -> None:
        self.trigger = trigger
        ex = self._ex
        if ex is not None:
            ex.request_drain()

    def _harvest(self, t: float, detector: bool = True) -> None:
        ex = self._ex
        done, attempts = ex.done, ex.attempts
        starts, finishes, gpu_events = ex.starts, ex.finishes, ex.gpu_events
        tasks = ex.plan.tasks
        est = self._est
        if est is None:
            est = self._est = [t.finish - t.start for t in tasks]
        m, a, det = self.metrics, self.alerts, self.detector if detector else None
        # the slow-task rule, unpacked so that the common case (not slow) costs a comparison
        rule = a.config.slow_task if a is not None else None
        base = self._median if rule is None or rule.baseline == "run" else 1.0
        if rule is not None and base is not None:
            slow_at, min_time = rule.factor * base, rule.min_time
        else:
            slow_at, min_time = float("inf"), float("inf")
        ratios = self._ratios
        observed = [] if m is not None else None       # (kernel, device, seconds), fed in one batch
        det_min = det.min_task_time if det is not None else float("inf")
        running = 0
        for d, ks in ex.order.items():
            c = self._cursor[d]
            n = len(ks)
            while c < n:
                k = ks[c]
                if not done[k]:
                    break
                c += 1
                self._running_seen.pop(k, None)
                if gpu_events[k] is None:
                    s, f = starts[k], finishes[k]
                    if s is None or f is None:
                        continue
                    dur = f - s
                else:
                    dur = self._duration(ex, k, starts, finishes, gpu_events)
                    if dur is None:
                        continue
                task = tasks[k]
                if observed is not None:
                    observed.append((task.kernel, d, dur))
                e = est[k]
                if e > 0:
                    ratios.append(dur / e)
                    if dur >= min_time and dur >= slow_at * e:
                        a.check_task(t, task.id, d, e, dur, self._median)
                    if dur >= det_min:           # shorter tasks are no evidence to the detector
                        found = det.observe(d, e, dur, task.id)
                        if found is not None and self._may_remap():
                            self._slow(t, found)
            self._cursor[d] = c
            if c < n:
                k = ks[c]
                if attempts[k] and not done[k]:
                    running += 1
                    first = self._running_seen.setdefault(k, t)
                    if a is not None and est[k] > 0 and t - first > 0:
                        a.check_task(t, tasks[k].id, d, est[k], t - first, self._median, running=True)
        if len(self._ratios) >= 5:
            self._median = statistics.median(self._ratios)
        if m is not None:
            if observed:
                m.observe_tasks(observed)
            n_done = done.count(True)
            failed = 1 if ex.error is not None else 0
            m.set_tasks(max(0, len(done) - n_done - running - failed), running, n_done, failed)

    @staticmethod
    def _duration(ex: ExecutorView, k, starts, finishes, gpu_events) -> Optional[float]:
        pair = gpu_events[k]
        if pair is not None:
            try:
                if not pair[1].done:
                    return None
                dev = ex.devices[ex.plan.tasks[k].device]
                return dev.cupy.cuda.get_elapsed_time(pair[0], pair[1]) / 1e3
            except Exception:          # noqa: BLE001
                return None
        s, f = starts[k], finishes[k]
        if s is None or f is None:
            return None
        return f - s

    def _slow(self, t: float, found) -> None:
        msg = (f"{found.device} runs {found.factor:.1f}x slower than its model compared with the other devices "
               f"({len(found.evidence)} tasks in a row); draining to re-map the rest of the plan")
        if self.alerts is not None:
            self.alerts.fire("slow_device", msg, t=t, device=found.device, value=found.factor,
                             threshold=self.remap.factor)
        self._request(Trigger("slow", t, msg, [found.device], factors={found.device: found.factor}))

    # -- results -----------------------------------------------------------------------------
    def telemetry_dict(self) -> Optional[dict]:
        if self.recorder is None:
            return None
        d = self.recorder.to_dict(self.plan_devices)
        d["monitor_time"] = round(self.main_time + self.thread_cpu, 6)
        return d

    def alert_list(self) -> list[dict]:
        return list(self.alerts.alerts) if self.alerts is not None else []
