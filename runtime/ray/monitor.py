"""Monitoring a Ray run from the driver: the alerts and Prometheus metrics of a local run.

The driver runs the same :class:`~streammap.runtime.supervisor.RunSupervisor` as a local run, on
its own ticker thread. Two things feed it:

Tasks
    Each segment of the run (the first, and one after each recovery) is followed through a
    :class:`SegmentState`: the lists the supervisor reads from a local executor (``done``,
    ``starts``/``finishes`` and ``attempts`` by task index, ``order`` per device), which the
    driver's collect loop fills in as the actors' calls complete. So task durations, tasks done,
    pending and failed, and the slow-task rule on finished tasks work as they do locally. The
    driver learns of a task only when it ends, so no task counts as running and a task still
    running is never judged slow; and a slow device is not re-mapped (the Ray executor re-maps
    lost nodes, by its own recovery).
Devices
    Every actor samples its own device on its process's ticker (NVML for its GPU, else its node's
    CPU: :meth:`DeviceActor.start_telemetry`) for the run record. It also hands its latest
    readings to a :class:`ReadingsBoard`, one small actor per run (placed on the driver's node
    when it can be), by a call it does not wait for: an actor runs its kernel calls one after
    another, so the driver could not ask it for readings without waiting behind them.
    :class:`BoardSampler`, the driver's sampler, takes what the board holds at every tick and
    names the devices ``NODE/gpuN`` or ``NODE/cpu``, as the run record does. Memory,
    temperature, ECC and Xid rules, and the device gauges, follow.

The record's telemetry still comes from the actors' own series (every reading, not only the
latest per tick); the supervisor gives the record its alerts.
"""

from __future__ import annotations

from typing import Optional

from streammap.monitoring.telemetry import Sampler, XidEvent, on_node


class ReadingsBoard:
    """A Ray actor holding the latest readings each device actor sent, until the driver takes them."""

    def __init__(self):
        self.latest: dict = {}               # plan device -> its actor's latest readings
        self.events: list = []

    def push(self, device: str, readings: list, events: list) -> None:
        self.latest[device] = readings
        self.events.extend((device, e) for e in events)

    def take(self) -> tuple[dict, list]:
        """What was sent since the last take (a device that sent nothing since has no readings:
        the driver does not judge a lost device on its last ones again and again)."""
        latest, self.latest = self.latest, {}
        events, self.events = self.events, []
        return latest, events


def start_board(ray):
    """A :class:`ReadingsBoard` actor (no CPU reserved: it only stores a few readings), on the
    driver's node when Ray can place it there, so that it lives as long as the run."""
    options: dict = {"num_cpus": 0, "max_restarts": 0}
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=True)
    except Exception:              # noqa: BLE001 -- a client-mode driver has no node of its own
        pass
    return ray.remote(**options)(ReadingsBoard).remote()


class BoardSampler(Sampler):
    """The driver's sampler of a Ray run: what the actors sent to the board since the last tick.

    ``actor_info`` is the executor's (plan device → its actor's info, with ``node``, the Ray node
    name), filled in as actors start. An actor pushes its first readings as it starts sampling,
    which may reach the board before the driver has learnt its node: such readings are held back
    (the latest per device) and named at the first tick that knows the node, not dropped; in a run
    shorter than the actors' sampling interval they are the only ones. A tick waits at most
    ``wait`` seconds for the board (the supervisor holds its lock meanwhile); a take that has not
    answered by then is read at the next tick, so no Xid event is lost and calls do not pile up.
    :meth:`last_wait` lengthens the wait for the supervisor's last tick, after the run.
    """

    source = "ray"

    def __init__(self, ray, board, actor_info: dict, wait: float = 0.05):
        self.ray, self.board, self.actor_info, self.wait = ray, board, actor_info, wait
        self._events: list[XidEvent] = []
        self._pending = None
        self._unnamed: dict = {}             # plan device -> readings taken before its node was known

    def last_wait(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for the board from now on: the run is over, and its last
        readings are worth a longer wait than a tick taken while kernels run."""
        self.wait = max(self.wait, wait)

    def sample(self) -> list:
        if self._pending is None:
            self._pending = self.board.take.remote()
        try:
            ready, _ = self.ray.wait([self._pending], timeout=self.wait)
            if not ready:
                return []
            ref, self._pending = self._pending, None
            latest, events = self.ray.get(ref)
        except Exception:          # noqa: BLE001 -- a dead board: no readings from now on
            self._pending = None
            return []
        node_of = {d: info.get("node") for d, info in self.actor_info.items()}
        latest = {**self._unnamed, **latest}
        self._unnamed = {}
        out, seen = [], set()
        for device, readings in latest.items():
            node = node_of.get(device)
            if node is None:
                self._unnamed[device] = readings
                continue
            for r in on_node(node, readings):
                if r.device not in seen:          # emulated devices of one node share its CPU
                    seen.add(r.device)
                    out.append(r)
        self._events = [XidEvent(device=f"{node_of.get(d) or '?'}/{e.device}", xid=e.xid)
                        for d, e in events]
        return out

    def events(self) -> list[XidEvent]:
        events, self._events = self._events, []
        return events


class SegmentState:
    """What the supervisor reads of one segment of a Ray run (see the module docstring): an
    :class:`~streammap.runtime.view.ExecutorView`.

    ``finished``: the tasks of ``plan`` done in earlier segments (done from the start, with no
    times: they were counted then).
    """

    def __init__(self, plan, finished):
        tasks = plan.tasks
        n = len(tasks)
        self.plan = plan
        self.order: dict[str, list[int]] = {}
        for k, t in enumerate(tasks):
            self.order.setdefault(t.device, []).append(k)
        self.done = [t.id in finished for t in tasks]
        self.starts: list = [None] * n
        self.finishes: list = [None] * n
        self.attempts = [0] * n
        self.gpu_events = [None] * n         # the actors time their tasks: no CUDA events here
        self.devices: dict = {}              # read only for tasks with gpu_events: none
        self.error: Optional[BaseException] = None
        self.draining = False

    def finish(self, k: int, start: float, finish: float, attempts: int) -> None:
        """Task ``k`` completed: its times first, ``done`` last (the supervisor reads ``done`` first)."""
        self.attempts[k] = attempts
        self.starts[k] = start
        self.finishes[k] = finish
        self.done[k] = True

    def request_drain(self) -> None:
        """Nothing to drain: a Ray run re-maps only lost nodes, by its own recovery."""
