"""What the run's monitoring thread reads of an executor: :class:`ExecutorView`.

The supervisor (:mod:`.supervisor`) follows one executor segment at a time without calling into
it: it reads lists the executor's workers write, and asks it to drain. Every executor it follows
offers exactly these members: the local DAG executor (:class:`~.local.LocalExecutor`, and its
sharing variant :class:`~.shared.SharingExecutor`), the pipeline executor
(:class:`~.pipeline.PipelineExecutor`) and, for a Ray run, the driver's copy of a segment's
progress (:class:`~.ray.monitor.SegmentState`).

Contract
--------
- Lists are indexed like ``plan.tasks`` and have one item per task; they are created before the
  segment is attached and never replaced, only their items are written (reads of list items are
  atomic in CPython, so the supervisor reads them without a lock).
- A worker writes a task's ``starts``/``finishes`` (and ``gpu_events``) *before* it sets
  ``done``: the supervisor reads ``done`` first and then trusts the times.
- ``order`` lists, per device, its tasks in the order the supervisor harvests them: plan order
  for the DAG executors, start order for the pipeline. A harvest moves a cursor per device and
  stops at the first task not done, so that a tick costs O(new tasks).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from streammap.plan import Plan


@runtime_checkable
class ExecutorView(Protocol):
    """The members of an executor segment that :class:`~.supervisor.RunSupervisor` reads."""

    #: The plan the segment runs (its ``tasks`` give the kernels, devices and estimates).
    plan: Plan
    #: Plan device id → the indices of its tasks, in harvest order (see *Contract*).
    order: dict[str, list[int]]
    #: Per task: finished (its result, or on a GPU its enqueued work, is there).
    done: list[bool]
    #: Per task: attempts so far (0: not started; set when it starts, so "set, not done" = running).
    attempts: list[int]
    #: Per task: the measured start in seconds, ``None`` until known (any clock: the supervisor
    #: uses ``finish - start``).
    starts: list[Optional[float]]
    #: Per task: the measured finish, on the clock of ``starts``.
    finishes: list[Optional[float]]
    #: Per task: ``(start event, end event)`` of a task timed on a GPU stream, else ``None``.
    gpu_events: list[Optional[tuple]]
    #: Plan device id → executor device; read only for tasks with ``gpu_events`` (their CUDA timer).
    devices: dict[str, Any]
    #: The run's error once a task failed (the supervisor counts one failed task), else ``None``.
    error: Optional[BaseException]
    #: Whether the segment was asked to drain (its harvest then feeds the slow-device detector).
    draining: bool

    def request_drain(self) -> None:
        """Start no new task (running ones finish), so that the rest of the plan can be re-mapped;
        an executor that cannot re-map does nothing."""
