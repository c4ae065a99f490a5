"""Estimated starts users can plan on: a point estimate and an interval calibrated on what happened.

A waiting job's *planned start* is its reservation in the admission pass (conservative backfill,
:mod:`.admission`): when its gang fits if every job ahead of it takes its estimate. Two things
make the real start differ: estimates are wrong (a running job overruns or ends early), and jobs
that arrive later may go ahead of it (the order is priority, fair share and the slowdown
deadline, not arrival). Neither has a model we could trust, so the interval is **calibrated
empirically** (split-conformal prediction on a sliding window): every job that was shown a
planned start contributes, when it actually starts, the ratio

    r = (actual start - time shown) / (planned start - time shown)

of the wait it got to the wait it was promised. A job planned to start in ``w`` seconds is shown
``[now + q_lo * w, now + q_hi * w]`` with ``q_lo``, ``q_hi`` the ``(1 - coverage) / 2`` and
``(1 + coverage) / 2`` quantiles of the last :data:`WINDOW` ratios. Under exact estimates the
ratios cluster near 1 and the interval is narrow; under poor ones it widens by itself; no
parameter says how wrong estimates are. Until :data:`MIN_SAMPLES` ratios are known the interval
is the deliberately wide :data:`PRIOR` band.

The ratios are not exchangeable: the queue grows and shrinks, so a window of past ratios lags
the present, and a fixed 90% band held 85-89% of starts. The quantile level is therefore itself
corrected online, by **adaptive conformal inference** [1]_: after each start whose first interval
is known, the miscoverage level ``a`` moves by ``GAMMA x (target miss rate - missed)`` (a miss
widens the band, a hit narrows it slowly), which keeps the long-run share of misses at the
target whatever the drift, at the price of a band that breathes.

References
----------
.. [1] I. Gibbs, E. Candès, "Adaptive conformal inference under distribution shift", NeurIPS 2021.

State: :class:`StartForecast` holds the window of ratios, the plan each waiting job was first
shown (``time shown, planned start``) and the interval it was first shown (what the simulator
scores: a user plans on the first answer). It is plain data driven by the admission core;
simulated and wall-clock time drive it alike.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: Started jobs whose ratio (real wait / promised wait) calibrates the interval.
WINDOW = 1000
#: Ratios needed before the interval is calibrated; before that, :data:`PRIOR` is shown.
MIN_SAMPLES = 30
#: The band (as ratios of the promised wait) shown before calibration.
PRIOR = (0.25, 4.0)
#: The share of actual starts the interval aims to contain.
COVERAGE = 0.9
#: Recompute the quantiles after this many new ratios (they move slowly; sorting costs).
REFRESH = 50
#: Step of the adaptive level (adaptive conformal inference): per start, the miscoverage level
#: moves by GAMMA x (1 - COVERAGE - missed).
GAMMA = 0.005


class StartForecast:
    """Calibrated start intervals for waiting jobs (see the module docstring)."""

    def __init__(self, coverage: float = COVERAGE, window: int = WINDOW, gamma: float = GAMMA):
        self.coverage = coverage
        self.gamma = gamma
        self._miss = 1.0 - coverage          # the miscoverage level the band is drawn at (adapted)
        self._ratios: deque = deque(maxlen=window)
        self._band = PRIOR
        self._fresh = 0
        self._promise: dict[str, tuple[float, float]] = {}        # job id -> (time shown, planned start)
        #: The interval each job was first shown: job id -> (low, high). Kept after the job starts.
        self.first_shown: dict[str, tuple[float, float]] = {}

    @property
    def band(self) -> tuple[float, float]:
        """``(q_lo, q_hi)``: the interval as ratios of the promised wait."""
        return self._band

    def interval(self, now: float, planned: float) -> tuple[float, float]:
        """The interval shown at ``now`` for a job planned to start at ``planned``."""
        wait = max(0.0, planned - now)
        lo, hi = self._band
        return now + lo * wait, now + hi * wait

    def planned(self, job_id: str, now: float, start: float) -> tuple[float, float]:
        """A pass planned ``job_id`` to start at ``start``; returns the interval to show."""
        shown = self.interval(now, start)
        if job_id not in self._promise and start > now:
            self._promise[job_id] = (now, start)
            self.first_shown.setdefault(job_id, shown)
        return shown

    def started(self, job_id: str, now: float) -> None:
        """``job_id`` started at ``now``: its ratio joins the window."""
        p = self._promise.pop(job_id, None)
        if p is None:
            return
        shown_at, planned = p
        lo, hi = self.first_shown[job_id]
        missed = not lo - 1e-6 <= now <= hi + 1e-6
        self._miss = min(max(self._miss + self.gamma * ((1.0 - self.coverage) - missed), 0.002), 0.5)
        self._ratios.append((now - shown_at) / (planned - shown_at))
        self._fresh += 1
        if len(self._ratios) >= MIN_SAMPLES and (self._fresh >= REFRESH or len(self._ratios) == MIN_SAMPLES):
            self._refresh()

    def forget(self, job_id: str) -> None:
        """A cancelled job: its promise no longer counts."""
        self._promise.pop(job_id, None)

    def _refresh(self) -> None:
        tail = self._miss / 2
        lo, hi = np.quantile(np.fromiter(self._ratios, float), [tail, 1 - tail])
        self._band = (float(lo), float(hi))
        self._fresh = 0
