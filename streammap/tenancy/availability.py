"""Availability profiles: how many devices of one pool are free, from now into the future.

Conservative backfilling [1]_ plans every waiting job ahead of time: a job's *reservation* is the
earliest time at which enough devices are free for its whole estimated duration, given the
running jobs' estimated ends and the reservations of every job ahead of it. A later job may start
now only if it fits into the profile as it is, so it never moves an earlier reservation. EASY
backfilling protects only the first waiting job; conservative backfilling protects them all.

State
-----
:class:`Profile`
    A step function over time: ``times[i]`` is where segment ``i`` begins, ``free[i]`` the devices
    free from ``times[i]`` until ``times[i + 1]`` (the last segment lasts for ever). It begins at
    ``now`` with the devices free now; each running job gives its devices back at its estimated end;
    each reservation takes devices for ``[start, start + duration)``. An end at or before ``now``
    (a job past its estimate; the admission core passes a later expected end) counts just after
    ``now``, never *at* ``now``: its devices are not free yet.

Costs: the step function is two numpy arrays, so every question is a few vectorised passes
over its ``B`` segments: "does a ``k``-device, ``d``-second job fit right now?" (a cached prefix
minimum and a binary search), "when is the earliest fit?" (the runs of segments with ``k`` free,
and the first run long enough), a reservation (two inserts and a slice). ``B`` is at most the
running jobs plus twice the reservations of one pool (the admission core bounds the latter by its
reservation depth); at 10,000 GPUs, ``B`` reaches thousands and the vectorised passes are what
keep a pass in milliseconds.

References
----------
.. [1] A. W. Mu'alem, D. G. Feitelson, "Utilization, predictability, workloads, and user runtime
   estimates in scheduling the IBM SP2 with backfilling", IEEE TPDS 12(6), 2001.
"""

from __future__ import annotations

import math

import numpy as np

#: Up to this many segments short of a gang, the earliest fit looks at the runs between them in a
#: loop; past it, in array expressions (the same subtractions and comparisons either way).
SHORT_LOOP = 64


class Profile:
    """Free devices of one pool over time, from ``now`` on.

    Parameters
    ----------
    now : float
    free_now : int
        Devices free at ``now``.
    releases : iterable of (float, int)
        ``(estimated end, devices)`` of each running job of the pool, in any order (``presorted``:
        in order of end; the profile is the same, without a sort).
    """

    def __init__(self, now: float, free_now: int, releases=(), *, presorted: bool = False):
        after = math.nextafter(now, math.inf)
        rel = np.asarray(releases if isinstance(releases, np.ndarray) else list(releases), dtype=float).reshape(-1, 2)
        ends = np.maximum(rel[:, 0], after)
        if presorted:                           # by end already (see Releases): no sort
            gained = rel[:, 1]
        else:
            order = np.argsort(ends, kind="stable")
            ends, gained = ends[order], rel[order, 1]
        self._steps(now, free_now, ends, gained)

    @classmethod
    def of_ends(cls, now: float, free_now: int, ends: np.ndarray, gpus: np.ndarray) -> Profile:
        """The profile of releases given as two arrays, ``ends`` ascending and all after ``now``
        (what :class:`Releases` keeps): the same as ``Profile(now, free_now, zip(ends, gpus))``."""
        p = cls.__new__(cls)
        p._steps(now, free_now, ends, gpus)
        return p

    def _steps(self, now: float, free_now: int, ends: np.ndarray, gained: np.ndarray) -> None:
        """The step function of releases ``gained`` at ``ends`` (ascending, after ``now``)."""
        self.now = now
        gained = np.cumsum(gained)
        # One segment per distinct end: the devices free after the last release at that time.
        last = np.ones(ends.size, dtype=bool)
        last[:-1] = ends[1:] != ends[:-1]
        self.times = np.concatenate(([now], ends[last]))
        self.free = np.concatenate(([float(free_now)], free_now + gained[last]))
        self._times_buf, self._free_buf = self.times, self.free     # grown by _insert, viewed by times/free
        self._prefix_min: np.ndarray | None = None
        self._fits: dict[tuple, float] = {}     # earliest fits asked since the last change (jobs repeat shapes)

    def fits_now(self, k: int, duration: float) -> bool:
        """Whether ``k`` devices are free for all of ``[now, now + duration)``."""
        if self.free[0] < k:
            return False
        if self._prefix_min is None:
            self._prefix_min = np.minimum.accumulate(self.free)
        j = int(self.times.searchsorted(self.now + duration))   # segments begun before the end
        return bool(self._prefix_min[max(j, 1) - 1] >= k)

    def earliest_fit(self, k: int, duration: float) -> float:
        """The earliest ``t >= now`` with ``k`` devices free for all of ``[t, t + duration)``
        (``inf`` when the pool never has ``k`` free devices)."""
        at = self._fits.get((k, duration))
        if at is None:
            at = self._fits[(k, duration)] = self._earliest_fit(k, duration)
        return at

    def _earliest_fit(self, k: int, duration: float) -> float:
        if self.fits_now(k, duration):
            return self.now
        free, times = self.free, self.times
        if free[-1] < k:
            return math.inf
        # The segments short of k split the profile into runs with k free; a run can only begin
        # just after one of them (or at 0), and a fit begins where its run begins. The last short
        # segment is followed by the last run, which lasts for ever. At 10,000 GPUs (1% of the
        # earliest fits of a 12,000-job replay, sampled) a profile has about 1,200 segments and the
        # gang is short of room in a median of 15 of them, nearly all at its start; a loop over the
        # runs between those, with the same subtractions, costs 5.4 us against 8.8 us for the array
        # expressions, which stay for many short segments. (Searching from an earlier answer that a
        # reservation moved was tried: as many array calls, on shorter arrays, for 6% less.)
        short = (free < k).nonzero()[0]
        if short[0] > 0 and times[short[0]] - times[0] >= duration:
            return float(times[0])              # as decided by subtraction, like every other run
        if short.size <= SHORT_LOOP:
            s = short.tolist()
            for a, b in zip(s, s[1:]):
                if a + 1 < b and times[b] - times[a + 1] >= duration:
                    return float(times[a + 1])
            return float(times[s[-1] + 1])
        begin, stop = short[:-1] + 1, short[1:]
        fit = ((begin < stop) & (times[stop] - times[begin] >= duration)).nonzero()[0]
        return float(times[begin[fit[0]]] if fit.size else times[short[-1] + 1])

    def add(self, t0: float, t1: float, delta: int) -> None:
        """Add ``delta`` free devices over ``[t0, t1)`` (negative: a reservation takes them)."""
        if t1 <= t0:
            return
        begin = max(t0, self.now)
        if begin < t1 < math.inf:
            i0, i1 = self._split_two(begin, t1)
        else:
            i0 = self._split(begin)
            i1 = self._split(t1) if math.isfinite(t1) else len(self.times)
        self.free[i0:i1] += delta
        self._prefix_min = None
        if delta < 0 and self._fits:
            self._fits = {key: at for key, at in self._fits.items() if _still_fits(at, key[1], t0, t1, self.now)}
        else:
            self._fits.clear()

    def reserve(self, start: float, k: int, duration: float) -> None:
        """Take ``k`` devices for ``[start, start + duration)``."""
        self.add(start, start + duration, -k)

    def _split_two(self, a: float, b: float) -> tuple[int, int]:
        """``(_split(a), _split(b))`` for ``a < b``: one binary search for both, and at most one
        shift of the segments after each new boundary (a reservation splits twice; fresh copies of
        the arrays were most of its cost at 10,000 GPUs)."""
        times = self.times
        n = times.size
        i, j = times.searchsorted((a, b)).tolist()
        new_a = i == n or times[i] != a
        new_b = j == n or times[j] != b
        if new_a or new_b:
            self._insert(i, a if new_a else None, j, b if new_b else None)
        return i, j + new_a

    def _split(self, t: float) -> int:
        """The index of the segment that begins at ``t``, splitting the one ``t`` falls in."""
        i = int(self.times.searchsorted(t))
        if i < len(self.times) and self.times[i] == t:
            return i
        self._insert(i, t, i, None)
        return i

    def _insert(self, i: int, a: float | None, j: int, b: float | None) -> None:
        """Begin new segments at ``a`` (before old segment ``i``) and ``b`` (before old segment
        ``j >= i``), each a copy of the segment it splits (``None``: no new segment there).

        ``times`` and ``free`` are views of buffers with room to grow (doubled when full), so a
        split moves only the segments after it, in place; reservations mostly land near the end
        of the profile, behind the pass's earlier ones, where few segments follow."""
        n, grow = self.times.size, (a is not None) + (b is not None)
        free_a = float(self.free[i - 1]) if a is not None else 0.0       # the split segments, read
        free_b = float(self.free[j - 1]) if b is not None else 0.0       # before anything moves
        if n + grow > self._times_buf.size:
            cap = 2 * (n + grow)
            times_buf, free_buf = np.empty(cap), np.empty(cap)
            times_buf[:n], free_buf[:n] = self.times, self.free
            self._times_buf, self._free_buf = times_buf, free_buf
        tb, fb = self._times_buf, self._free_buf
        tb[j + grow:n + grow] = tb[j:n]                 # numpy copies overlapping slices correctly
        fb[j + grow:n + grow] = fb[j:n]
        if a is not None:
            tb[i + 1:j + 1] = tb[i:j]
            fb[i + 1:j + 1] = fb[i:j]
            tb[i], fb[i] = a, free_a
        if b is not None:
            k = j + (a is not None)
            tb[k], fb[k] = b, free_b
        self.times, self.free = tb[:n + grow], fb[:n + grow]


class Releases:
    """The running jobs of one pool, kept in order of estimated end as they start and finish, so
    that a pass builds its profile without sorting them (at 10,000 GPUs a pass saw thousands of
    running jobs, and sorted them anew every time).

    State: parallel arrays ``ends`` (``start + duration``, ascending) and ``gpus``, the job ids in
    the same order, and each job's ``(start, duration)``. A start inserts one row, a finish
    deletes one: ``O(B)`` copies, without a sort. :meth:`profile` asks nothing else of them
    unless a job is past its estimated end (:func:`expected_ends`); then those few rows get their
    expected ends and the profile sorts, exactly as one built from scratch.
    """

    def __init__(self):
        self.ends = np.empty(0)
        self.gpus = np.empty(0)
        self.ids: list[str] = []
        self._runs: dict[str, tuple[float, float]] = {}

    def add(self, job_id: str, start: float, duration: float, gpus: int) -> None:
        if gpus <= 0:
            return                              # releases nothing
        end = start + duration
        i = int(self.ends.searchsorted(end, "right"))
        self.ends = np.concatenate((self.ends[:i], [end], self.ends[i:]))
        self.gpus = np.concatenate((self.gpus[:i], [float(gpus)], self.gpus[i:]))
        self.ids.insert(i, job_id)
        self._runs[job_id] = (start, duration)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._runs

    def remove(self, job_id: str) -> None:
        if job_id not in self._runs:
            return
        start, duration = self._runs.pop(job_id)
        i = self.ids.index(job_id, int(self.ends.searchsorted(start + duration, "left")))
        self.ends = np.concatenate((self.ends[:i], self.ends[i + 1:]))
        self.gpus = np.concatenate((self.gpus[:i], self.gpus[i + 1:]))
        del self.ids[i]

    def profile(self, now: float, free_now: int) -> Profile:
        """The pool's availability profile at ``now`` with ``free_now`` devices free, before any
        reservation: the same as one built from every running job's :func:`expected_ends`."""
        late = int(self.ends.searchsorted(now, "right"))     # estimated ends at or before now
        if late == 0:                           # every end after now: the kept order is the profile's
            return Profile.of_ends(now, free_now, self.ends, self.gpus)
        start = np.array([self._runs[j][0] for j in self.ids[:late]])
        duration = np.array([self._runs[j][1] for j in self.ids[:late]])
        ends = np.concatenate((expected_ends(start, duration, now), self.ends[late:]))
        return Profile(now, free_now, np.column_stack((ends, self.gpus)))


def expected_ends(start: np.ndarray, duration: np.ndarray, now: float) -> np.ndarray:
    """When running jobs are expected to end: the estimated end ``start + duration``, or for a job
    already past it, the first ``start + 2^i x duration`` after ``now`` (an overrun job is likely
    to overrun more; taking it to end at once would plan reservations on devices that are not
    free, and leave them idle). A 0 s job keeps its end (the profile counts it just after now)."""
    end = start + duration
    over = (end <= now) & (duration > 0)
    if over.any():
        ratio = np.maximum((now - start[over]) / duration[over], 1.0)
        end[over] = start[over] + duration[over] * 2.0 ** np.ceil(np.log2(ratio) + 1e-12)
    return end


def _still_fits(at: float, duration: float, t0: float, t1: float, now: float) -> bool:
    """Whether an earliest fit at ``at`` for ``duration`` survives taking devices over ``[t0, t1)``.

    Taking devices never makes an earlier time fit, so the answer stands when the window
    ``[at, at + duration)`` is untouched: the taking ends at or before ``at`` (with ``at`` past
    ``now``; at ``now`` the window is the only one looked at), or begins at or after its end, by both
    the sum and the difference (the two ways the profile compares times), so that recomputing would
    give the same answer to the last bit. Never fitting stays never fitting.
    """
    if not math.isfinite(at):
        return True
    if t1 <= at and at > now:
        return True
    return duration > 0 and t0 >= at + duration and t0 - at >= duration    # a 0 s job still needs its start
