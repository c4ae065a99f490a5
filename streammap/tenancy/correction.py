"""Estimate correction: a tenant whose jobs run longer than estimated, compared with the other
tenants' jobs, does not gain a place in the admission order by it.

State
-----
Per tenant, the log-ratios ``log(real / estimated duration)`` of its last :data:`WINDOW` runs
that ended on their own (a preempted or cancelled run says nothing of the job's length), with
their running sum and sum of squares, so that every question below costs O(tenants).

Policy
------
The ``streammap`` order (:mod:`.admission`) places a job by its *estimated* duration: its slowdown
deadline is ``arrival + SLOWDOWN x estimate``. A tenant whose estimates are systematically low
(its jobs run 3x what it declares) would get earlier deadlines than an honest tenant's jobs of
the same real length, and go first: under-estimating would pay. :meth:`EstimateCorrection.factor`
is the multiplier for a tenant's estimates in the order: ``exp(m_t - m_o)``, ``m_t`` the mean
log-ratio of the tenant's recent runs and ``m_o`` that of every other tenant's, once the
difference is significant, and 1 otherwise.

* *Relative to the other tenants*, not to 1: a bias every tenant shares (the simulator's errors
  are log-normal with mean 1, so the typical job runs *shorter* than its estimate) moves every
  deadline alike and gives no tenant an edge; correcting it would only rescale the slowdown.
* *Only when significant*: ``|m_t - m_o|`` above :data:`Z` standard errors, with at least
  :data:`MIN_RUNS` runs on each side. At the benchmark's estimate error sigma 1, 200 runs know a
  mean log-ratio to about 0.07; a tenant whose estimates are as good as the others' must not be
  moved by chance (the order sorts job lengths that differ 700-fold, and a 10% nudge from noise
  would only reshuffle it). Z = 4 keeps the chance of a false correction over a long stream
  (one test per finished window per tenant) well under one in a hundred.

The same log-ratios say how far apart two runs of the same estimate end: their standard deviation,
:meth:`EstimateCorrection.spread`, which gates the admission order's tail exchange (it swaps jobs of
one shape as if they were the same job, which is true only when this spread is small).

A run's log-ratio is bounded by :data:`MAX_RATIO` either way, and a run with no finite, positive
estimate or length teaches nothing, so every factor stays finite and positive. Runs are compared as measured; a run on a slower model is compared with that model's estimate,
so the model a job got does not count as an error.
"""

from __future__ import annotations

import math
from collections import deque

#: Runs remembered per tenant (its most recent ones).
WINDOW = 200
#: Runs a tenant, and the other tenants together, must have finished before any correction.
MIN_RUNS = 30
#: Log-ratios below this are exact runs: ``(start + d) - start`` is ``d`` only to the clock's
#: rounding (1e-12 relative at a start of 50,000 s), and with exact estimates the spread is that
#: rounding alone, which the significance test would otherwise take for a bias.
EXACT = 1e-9
#: Largest ratio of real to estimated duration a run counts for (and smallest, its inverse): a run
#: a million times off its estimate says all there is to say, and bounded log-ratios keep every
#: factor finite and positive (an overflowing ratio made one tenant's deadlines inf, another's 0).
MAX_RATIO = 1e6
#: Standard errors by which a tenant's mean log-ratio must differ from the others' to be corrected.
Z = 4.0


class EstimateCorrection:
    """Learns each tenant's real/estimated duration ratio online and says how to correct it."""

    def __init__(self, window: int = WINDOW):
        self.window = window
        self._logs: dict[str, deque] = {}
        self._sum: dict[str, float] = {}
        self._sq: dict[str, float] = {}

    def observe(self, tenant: str, estimate: float, real: float) -> None:
        """A run of ``tenant`` estimated at ``estimate`` seconds ended on its own after ``real``."""
        if not (0 < estimate < math.inf and 0 < real < math.inf):     # NaN fails too
            return
        bound = math.log(MAX_RATIO)
        ratio = real / estimate                     # overflows to inf, or underflows to 0, far out
        x = math.log(ratio) if 0 < ratio < math.inf else math.copysign(bound, ratio - 1)
        x = min(max(x, -bound), bound)
        if abs(x) < EXACT:
            x = 0.0                     # exact, but for the rounding of ``end - start`` at large times
        logs = self._logs.setdefault(tenant, deque())
        if len(logs) == self.window:
            old = logs.popleft()
            self._sum[tenant] -= old
            self._sq[tenant] -= old * old
        logs.append(x)
        self._sum[tenant] = self._sum.get(tenant, 0.0) + x
        self._sq[tenant] = self._sq.get(tenant, 0.0) + x * x

    def factor(self, tenant: str) -> float:
        """The multiplier for ``tenant``'s estimates in the admission order (1: no correction)."""
        n = len(self._logs.get(tenant, ()))
        n_o = sum(len(v) for t, v in self._logs.items() if t != tenant)
        if n < MIN_RUNS or n_o < MIN_RUNS:
            return 1.0
        s_o = sum(v for t, v in self._sum.items() if t != tenant)
        q_o = sum(v for t, v in self._sq.items() if t != tenant)
        m, m_o = self._sum[tenant] / n, s_o / n_o
        var = _variance(self._sum[tenant], self._sq[tenant], n)
        var_o = _variance(s_o, q_o, n_o)
        se = math.sqrt(var / n + var_o / n_o)
        diff = m - m_o
        if abs(diff) <= Z * se:
            return 1.0
        return math.exp(diff)

    def spread(self, tenant: str) -> float | None:
        """The standard deviation of ``log(real / estimated)`` over ``tenant``'s recent runs, or None
        before :data:`MIN_RUNS` of them: how far apart two runs of the same estimate typically end
        (0 for exact estimates; the simulator's ``--estimate-error`` sigma, as learned)."""
        n = len(self._logs.get(tenant, ()))
        if n < MIN_RUNS:
            return None
        return math.sqrt(_variance(self._sum[tenant], self._sq[tenant], n))


def _variance(total: float, squares: float, n: int) -> float:
    """Sample variance from a sum and a sum of squares (never below 0 from rounding)."""
    return max(0.0, (squares - total * total / n) / (n - 1))
