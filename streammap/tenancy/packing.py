"""Joint placement: several small jobs on one shared device, each holding a fraction of it.

Without it, every job holds whole devices; a job whose kernels fill a quarter of a GPU leaves the
other three quarters idle for its whole run. Here a job of gang width 1 that needs less than a
device (its program's ``share`` clauses, or the submit's ``--share``) holds only its **fraction**
of one device's compute and its **memory** (peak bytes), as HAMi and Kubernetes GPU sharing grant
them (a compute limit and a memory limit), and other such jobs may hold the rest.

Semantics (what the admission core and the runtime both keep)
-------------------------------------------------------------
* **Fit**: jobs share a device while their fractions sum to at most 1 and their memory to at most
  the device's memory (a device of unknown memory bounds only the fractions).
* **Own lifetimes**: each job holds its fraction from its own start to its own end; when it ends,
  only its fraction (and memory) is freed, and no job waits for a neighbour: there is no gang
  across jobs. The device returns to the pool of whole devices when its last holder ends.
* **Never mixed**: a job of whole devices is never put on a shared device, nor a fractional job
  on a whole device another job holds. Gangs (width > 1) are never fractional.
* **Interference model**: a job held to fraction ``f`` of a device runs at the device's speed
  while its work uses at most ``f`` of it, and is slowed in proportion when it would use more::

      duration(f) = max(T, B / f)

  ``T`` is its estimated makespan on a whole device and ``B`` its share-weighted busy seconds
  there (sum over tasks of share x run time: the compute it uses). A chain of quarter-GPU kernels
  granted 0.25 runs in ``T``; four such kernels in parallel, which on a whole device overlap,
  take 4x as long at 0.25. The runtime enforces the same fraction (:mod:`streammap.runtime.shared`
  reads ``STREAMMAP_DEVICE_SHARE``), so neighbours do not change a job's duration in this model:
  the fraction does. Interference through memory bandwidth or caches, which a compute limit does
  not isolate, is not modelled.

State
-----
:class:`SharedDevices`, beside the admission :class:`~.admission.Pool` of whole devices: the
*open* devices (taken whole from the pool for fractional jobs), and on each the fraction and
memory held and by which jobs (each with its start and estimated duration). The admission core's
availability profiles count an open device busy until the latest expected end of its holders.

Placement policy: **best fit** (the open device with the least compute left that still fits the
job), else open a whole free device; so fragments fill before new devices are broken into.
"""

from __future__ import annotations

import math
from dataclasses import replace

#: Slack when summing fractions (as the runtime's sharing executor does).
SHARE_EPS = 1e-9


def job_share(graph, share: float | None = None) -> float:
    """The fraction of one device a job needs: ``share`` when stated, else the largest ``share``
    clause of its tasks when every task has one below 1, else 1 (whole devices)."""
    if share is not None:
        return float(share)
    shares = [float(graph.nodes[t].get("share") or 1.0) for t in graph.nodes]
    if shares and max(shares) < 1.0 - SHARE_EPS:
        return max(shares)
    return 1.0


def shared_duration(whole: float, busy: float | None, share: float) -> float:
    """A job's estimated duration held to ``share`` of a device: ``max(T, B / share)`` (module docstring)."""
    if busy is None or not math.isfinite(busy):
        return whole
    return max(whole, busy / share)


def fractional_demand(demand, share: float, busy: dict):
    """``demand`` (width 1, whole devices) as fractional options holding ``share`` of one device.

    ``busy`` maps each option's model to the job's share-weighted busy seconds there. The whole
    demand is kept as ``.whole`` (what a scheduler without joint placement runs).
    """
    options = [replace(o, share=share, duration=shared_duration(o.duration, busy.get(o.model), share))
               for o in demand.options]
    options.sort(key=lambda o: (o.duration, o.model))
    return replace(demand, options=tuple(options), whole=demand)


def expected_end(start: float, duration: float, now: float) -> float:
    """When a running job is expected to end: its estimated end, or, past it, the first
    ``start + 2^i x duration`` after ``now`` (the admission core's rule for overrunning jobs)."""
    end = start + duration
    if end > now or duration <= 0:
        return end
    ratio = max((now - start) / duration, 1.0)
    return start + duration * 2.0 ** math.ceil(math.log2(ratio) + 1e-12)


def free_over(profile, t0: float, t1: float) -> float:
    """The least number of devices free anywhere in ``[t0, t1)`` of an availability profile."""
    i0 = max(int(profile.times.searchsorted(t0, side="right")) - 1, 0)
    i1 = max(int(profile.times.searchsorted(t1, side="left")), i0 + 1)
    return float(profile.free[i0:i1].min())


class SharedDevices:
    """The open (shared) devices of a pool: who holds what fraction and memory of each.

    Parameters
    ----------
    pool : Pool
        The admission core's pool of whole devices; open devices are taken from it and given
        back to it when their last holder ends.
    """

    def __init__(self, pool):
        self.pool = pool
        self.used: dict[str, float] = {}                # open device -> fraction held
        self.memory: dict[str, float] = {}              # open device -> bytes held
        self.holders: dict[str, dict[str, tuple]] = {}  # open device -> job -> (share, memory, start, duration)
        self.open: dict[str, set[str]] = {m: set() for m in pool.models}   # model -> its open devices
        #: Bumped by every hold and release of a fraction: what was decided from the open devices'
        #: room stands while neither it nor the pool's version moves.
        self.version = 0

    def fits(self, device: str, share: float, memory: float) -> bool:
        """Whether ``share`` and ``memory`` fit beside the holders of the open ``device``."""
        if self.used[device] + share > 1.0 + SHARE_EPS:
            return False
        cap = self.pool.memory_of[device]            # 0: memory unknown (unbounded)
        return cap <= 0 or self.memory[device] + memory <= cap * (1 + 1e-12)

    def fitting(self, model: str, share: float, memory: float) -> list[str]:
        """The open ``model`` devices the job fits on, best fit first (least compute left)."""
        fit = [d for d in self.open[model] if self.fits(d, share, memory)]
        return sorted(fit, key=lambda d: (-self.used[d], d))

    def best_open(self, model: str, share: float, memory: float) -> str | None:
        """The open ``model`` device with the least compute left that fits the job (best fit), or None."""
        fit = self.fitting(model, share, memory)
        return fit[0] if fit else None

    def can_start(self, model: str, share: float, memory: float) -> bool:
        """Whether a job of ``share`` and ``memory`` can start on ``model`` now (open or whole device)."""
        return self.pool.free_count.get(model, 0) >= 1 or self.best_open(model, share, memory) is not None

    def take(self, job_id: str, model: str, share: float, memory: float, start: float, duration: float,
             device: str | None = None, fresh: bool = False) -> str | None:
        """Grant the job ``share`` of a ``model`` device: ``device`` (open) when given, else the
        best-fitting open one (unless ``fresh``), else a whole free device opened for it; None
        when none fits."""
        if device is None and not fresh:
            device = self.best_open(model, share, memory)
        if device is None:
            got = self.pool.take(model, 1)
            if got is None:
                return None
            device = got[0]
            self._open(device, model)
        self._hold(device, job_id, share, memory, start, duration)
        return device

    def restore(self, job_id: str, device: str, share: float, memory: float, start: float,
                duration: float) -> None:
        """Record a fractional grant found again after a restart."""
        if device not in self.used:
            self.pool.take_exact([device])
            self._open(device, self.pool.model_of[device])
        self._hold(device, job_id, share, memory, start, duration)

    def give(self, job_id: str, device: str) -> bool:
        """The job ended: free its fraction and memory only. Whether the device closed (its last
        holder ended, and it went back to the pool whole)."""
        share, memory, _, _ = self.holders[device].pop(job_id)
        self.version += 1
        if self.holders[device]:
            self.used[device] -= share
            self.memory[device] -= memory
            return False
        for table in (self.used, self.memory, self.holders):
            del table[device]
        self.open[self.pool.model_of[device]].discard(device)
        self.pool.give([device])
        return True

    def last_holder(self, device: str) -> tuple[float, float] | None:
        """``(start, duration)`` of the holder of ``device`` estimated to end last (None: closed)."""
        held = self.holders.get(device)
        if not held:
            return None
        return max(((s, d) for _, _, s, d in held.values()), key=lambda sd: (sd[0] + sd[1], sd))

    def _open(self, device: str, model: str) -> None:
        self.used[device], self.memory[device], self.holders[device] = 0.0, 0.0, {}
        self.open[model].add(device)

    def _hold(self, device, job_id, share, memory, start, duration) -> None:
        self.version += 1
        self.used[device] += share
        self.memory[device] += memory
        self.holders[device][job_id] = (share, memory, start, duration)
