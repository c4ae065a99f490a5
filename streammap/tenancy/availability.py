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

Costs: a profile of ``B`` segments answers "does a ``k``-device, ``d``-second job fit right now?"
in ``O(log B)`` (a cached prefix minimum) and "when is the earliest fit?" in ``O(B)``; a
reservation costs ``O(B)``. ``B`` is at most the running jobs plus twice the reservations of one
pool, which the admission core bounds (its reservation depth).

References
----------
.. [1] A. W. Mu'alem, D. G. Feitelson, "Utilization, predictability, workloads, and user runtime
   estimates in scheduling the IBM SP2 with backfilling", IEEE TPDS 12(6), 2001.
"""

from __future__ import annotations

import bisect
import itertools
import math


class Profile:
    """Free devices of one pool over time, from ``now`` on.

    Parameters
    ----------
    now : float
    free_now : int
        Devices free at ``now``.
    releases : iterable of (float, int)
        ``(estimated end, devices)`` of each running job of the pool.
    """

    def __init__(self, now: float, free_now: int, releases=()):
        self.now = now
        after = math.nextafter(now, math.inf)
        self.times = [now]
        self.free = [free_now]
        for t, g in sorted((max(t, after), g) for t, g in releases):
            if t == self.times[-1]:
                self.free[-1] += g
            else:
                self.times.append(t)
                self.free.append(self.free[-1] + g)
        self._prefix_min: list[int] | None = None

    def fits_now(self, k: int, duration: float) -> bool:
        """Whether ``k`` devices are free for all of ``[now, now + duration)``."""
        if self.free[0] < k:
            return False
        if self._prefix_min is None:
            self._prefix_min = list(itertools.accumulate(self.free, min))
        j = bisect.bisect_left(self.times, self.now + duration)      # segments that begin before the end
        return self._prefix_min[max(j, 1) - 1] >= k

    def earliest_fit(self, k: int, duration: float) -> float:
        """The earliest ``t >= now`` with ``k`` devices free for all of ``[t, t + duration)``
        (``inf`` when the pool never has ``k`` free devices)."""
        if self.fits_now(k, duration):
            return self.now
        times, free = self.times, self.free
        if free[-1] < k:
            return math.inf
        n = len(times)
        start = None
        for i in range(n):
            if free[i] < k:
                start = None
                continue
            if start is None:
                start = times[i]
            if i + 1 == n or start + duration <= times[i + 1]:
                return start
        return math.inf                                                  # not reached: the last segment fits

    def add(self, t0: float, t1: float, delta: int) -> None:
        """Add ``delta`` free devices over ``[t0, t1)`` (negative: a reservation takes them)."""
        if t1 <= t0:
            return
        i0 = self._split(max(t0, self.now))
        i1 = self._split(t1) if math.isfinite(t1) else len(self.times)
        for i in range(i0, i1):
            self.free[i] += delta
        self._prefix_min = None

    def reserve(self, start: float, k: int, duration: float) -> None:
        """Take ``k`` devices for ``[start, start + duration)``."""
        self.add(start, start + duration, -k)

    def _split(self, t: float) -> int:
        """The index of the segment that begins at ``t``, splitting the one ``t`` falls in."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.free.insert(i, self.free[i - 1])
        return i
