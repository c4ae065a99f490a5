"""How the Ray executor's driver collects its calls' results: in batches, over a bounded window.

A fake ``ray`` stands in for the cluster (no Ray is started): its ``wait`` reports the first
calls it is given as done, a few at a time, as actors that run their calls in submission order
would. The driver must ask about the oldest calls only (at most ``WAIT_WINDOW`` refs per
``ray.wait``: a wait costs time per ref), fetch each batch's metadata with one ``ray.get``, and
still collect every call, whatever the plan's size.
"""

from __future__ import annotations

import types

import pytest

from streammap.runtime.ray import executor as executor_module
from streammap.runtime.ray.executor import RayExecutor
from tests.helpers.plans import cpu_devices, make_plan, task


class FakeRay:
    """``ray.wait`` reports up to ``per_wait`` of the refs it is given done, the oldest first."""

    def __init__(self, per_wait: int):
        self.per_wait = per_wait
        self.waited: list[int] = []          # how many refs each wait was given
        self.gets = 0
        self.exceptions = types.SimpleNamespace(RayTaskError=RuntimeError, RayError=RuntimeError)

    def wait(self, refs, num_returns, timeout, fetch_local):
        assert num_returns == len(refs) and not fetch_local
        self.waited.append(len(refs))
        return refs[:self.per_wait], refs[self.per_wait:]

    def get(self, refs):
        self.gets += 1
        return [(None, 10.0 + k, 10.5 + k, 1) for k in refs]     # a ref here is its task's index


def collect(tmp_path, n: int, fake: FakeRay) -> RayExecutor:
    plan = make_plan(tmp_path, "def f():\n    return 1\n", [task(f"t{k}", "f", "node0/cpu") for k in range(n)],
                     devices=cpu_devices())
    ex = RayExecutor.__new__(RayExecutor)         # no cluster: only what collecting uses
    ex.ray, ex.t0, ex._state, ex.progress = fake, 10.0, None, False
    ex.starts, ex.finishes, ex.attempts, ex.where = {}, {}, {}, {}
    assert ex._collect(plan, {k: k for k in range(n)}) is None      # no node lost
    return ex


@pytest.mark.parametrize("n", [1, 40, 1000])
def test_the_driver_waits_on_a_bounded_window_and_collects_every_call(tmp_path, monkeypatch, n):
    monkeypatch.setattr(executor_module, "WAIT_WINDOW", 16)
    fake = FakeRay(per_wait=5)
    ex = collect(tmp_path, n, fake)
    assert len(ex.where) == n and ex.starts[f"t{n - 1}"] == n - 1 and ex.attempts["t0"] == 1
    assert max(fake.waited) <= 16                       # never the whole plan at once
    assert fake.gets == len(fake.waited)                # one get per batch, not per call


def test_round_trips_per_call_do_not_grow_with_the_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(executor_module, "WAIT_WINDOW", 64)
    trips = {}
    for n in (200, 2000):
        fake = FakeRay(per_wait=20)
        collect(tmp_path, n, fake)
        trips[n] = (len(fake.waited) + fake.gets) / n, sum(fake.waited) / len(fake.waited)
    assert trips[2000][0] == pytest.approx(trips[200][0], rel=0.05)       # round trips per call
    assert trips[2000][1] <= 64 and trips[200][1] <= 64                   # refs per wait: bounded
