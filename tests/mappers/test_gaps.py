"""The gap index answers HEFT's insertion question exactly as the linear scan over the gaps did.

HEFT's schedules are pinned (test_heft_pinned.py): the index may change how many gaps are looked
at, never which gap is found. These tests drive a device's gaps through the changes HEFT makes
(a gap appended after the last task, a task placed inside a gap, splitting it into none, one or
two gaps) and compare every answer with the scan it replaced.
"""

import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streammap.bench.cases import random_cluster, random_dag
from streammap.cost.model import CostModel
from streammap.mappers import gaps
from streammap.mappers.gaps import GapList
from streammap.mappers.heft import heft


def linear_first_fit(g: GapList, i: int, w: float):
    """The search HEFT ran before the index: the first gap from i on where s + w <= e."""
    return next((j for j in range(i, len(g.s)) if g.s[j] + w <= g.e[j]), None)


def check_index(g: GapList) -> None:
    """Lengths follow the gaps, and every known block maximum is its block's maximum."""
    assert g.length == [y - x for x, y in zip(g.s, g.e)]
    assert len(g.block_max) == -(-len(g.s) // gaps.BLOCK)
    for k, m in enumerate(g.block_max):
        if m is not None:
            assert m == max(g.length[k * gaps.BLOCK:(k + 1) * gaps.BLOCK])
    assert g.longest() == max(g.length, default=0.0)


def grow(g: GapList, rng: np.random.Generator, steps: int, widths: list[float]) -> None:
    """``steps`` random placements on a device with gaps ``g``, changing them as HEFT does.

    Half the gaps end exactly at ``start + w`` for a width w of ``widths`` (a task of that width
    fits with no room to spare: the rounding case), the rest have random lengths; a placement
    inside a gap keeps the part before it, the part after it, both or neither.
    """
    end = max(g.e, default=0.0) + 1.0          # end of the device's last task
    for _ in range(steps):
        if not g.s or rng.random() < 0.4:
            start = end + float(rng.uniform(0, 5))
            w = widths[rng.integers(len(widths))]
            stop = start + w if rng.random() < 0.5 else start + float(rng.uniform(0, 3))
            if stop > start:
                g.append(start, stop)
            end = stop + float(rng.uniform(0, 2))
        else:
            i = int(rng.integers(len(g.s)))
            g0, g1 = g.s[i], g.e[i]
            st = g0 if rng.random() < 0.3 else float(rng.uniform(g0, g1))
            ft = g1 if rng.random() < 0.3 else float(rng.uniform(st, g1))
            starts, ends = [], []
            if st > g0:
                starts.append(g0)
                ends.append(st)
            if g1 > ft:
                starts.append(ft)
                ends.append(g1)
            g.replace(i, starts, ends)
        check_index(g)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 400), block=st.sampled_from([1, 2, 3, 8, 32]))
def test_first_fit_finds_the_gap_the_linear_scan_finds(seed, steps, block, monkeypatch_block):
    monkeypatch_block(block)
    rng = np.random.default_rng(seed)
    widths = [0.1, 0.2, 0.3, 1 / 3, 0.7, 1e-9, 2.5]
    g = GapList()
    # Interleave queries with the changes: an index kept in step must answer between them too.
    for _ in range(4):
        grow(g, rng, steps // 4 + 1, widths)
        for _ in range(50):
            i = int(rng.integers(len(g.s) + 1))
            w = widths[rng.integers(len(widths))] if rng.random() < 0.7 else float(rng.uniform(0, 4))
            assert g.first_fit(i, w) == linear_first_fit(g, i, w)


@pytest.fixture
def monkeypatch_block(monkeypatch):
    """Set the index's block size for one test (small blocks cross many block edges)."""
    return lambda size: monkeypatch.setattr(gaps, "BLOCK", size)


def test_a_task_that_fits_with_no_room_to_spare_is_found_past_skipped_blocks(monkeypatch_block):
    monkeypatch_block(2)
    g = GapList()
    t = 1e6                                    # large times: the rounding of s + w matters
    for _ in range(9):
        g.append(t, t + 0.1)                   # too short
        t += 1.0
    g.append(t, t + 0.3)                       # s + 0.3 == e exactly, e - s may round below 0.3
    assert g.first_fit(0, 0.3) == 9 == linear_first_fit(g, 0, 0.3)
    assert g.first_fit(0, 0.30000001) is None


def test_a_gap_only_as_long_as_the_task_after_rounding_is_not_taken():
    g = GapList()
    g.append(0.1, 0.3)                         # e - s == 0.19999999999999998; 0.1 + 0.2 > 0.3
    g.append(5.0, 5.2)
    assert g.first_fit(0, 0.2) == linear_first_fit(g, 0, 0.2)


def test_removing_and_splitting_gaps_moves_the_later_ones():
    g = GapList()
    for k in range(100):
        g.append(10.0 * k, 10.0 * k + (9.0 if k == 70 else 1.0))
    assert g.first_fit(0, 5.0) == 70
    g.replace(3, [], [])                       # a task filled gap 3: gap 70 is now the 69th
    assert g.first_fit(0, 5.0) == 69
    g.replace(0, [0.0, 0.6], [0.3, 1.0])       # a task inside gap 0 leaves a gap on each side
    assert g.first_fit(0, 5.0) == 70
    g.replace(70, [700.0], [703.0])            # a task at the end of the long gap shortens it
    assert g.first_fit(0, 5.0) is None
    check_index(g)


def schedule_bytes(schedule) -> str:
    h = hashlib.sha256()
    for values in (schedule.device, schedule.start, schedule.finish, schedule.seq):
        h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()


def test_heft_places_every_task_alike_whatever_the_block_size(monkeypatch_block):
    # Few devices for many tasks: long gap lists, most searches cross several blocks.
    cost = CostModel(random_dag(1500, seed=3, n_models=4), random_cluster(6, n_models=4))
    monkeypatch_block(10**9)                   # one block: the linear scan, in effect
    reference = schedule_bytes(heft(cost))
    for size in (1, 2, 5, 32):
        monkeypatch_block(size)
        assert schedule_bytes(heft(cost)) == reference
