"""Which devices a gang is granted (issue 18, item 5: the pool finds them in buckets of nodes by
free devices instead of scanning every node; the grant must be the one the scan made, or the
pinned decisions would move)."""

import random

from streammap.cluster.model import cluster_from_dict
from streammap.tenancy.admission import Pool


def cluster(nodes: int, per_node: int, model: str = "A100"):
    return cluster_from_dict({"name": "t", "network": {"bandwidth": "25 GB/s", "latency": "5us"}, "nodes": [
        {"name": f"n{i:02d}", "link": {"bandwidth": "300 GB/s", "latency": "3us"},
         "devices": [{"name": f"g{j}", "kind": "gpu", "model": model, "memory": "80GiB"} for j in range(per_node)]}
        for i in range(nodes)]})


def scan_take(free: dict[str, list[str]], k: int) -> tuple[str, ...]:
    """The grant as a scan of every node makes it: the fitting node with the fewest free devices
    (then the least name), else the nodes with the most free devices first (then by name)."""
    fit = [n for n, ids in free.items() if len(ids) >= k]
    if fit:
        order = [min(fit, key=lambda n: (len(free[n]), n))]
    else:
        order = sorted((n for n in free if free[n]), key=lambda n: (-len(free[n]), n))
    got: list[str] = []
    for n in order:
        while free[n] and len(got) < k:
            got.append(free[n].pop())
        if len(got) == k:
            break
    return tuple(got)


def node_of(pool: Pool, devices) -> set[str]:
    return {pool.node_of[d] for d in devices}


def test_a_gang_goes_on_the_node_it_fills_best_keeping_big_holes_for_big_gangs():
    pool = Pool(cluster(3, 8))
    first = pool.take("A100", 6)                 # n00 keeps 2 free
    assert node_of(pool, first) == {"n00"}
    assert node_of(pool, pool.take("A100", 2)) == {"n00"}   # fills n00's hole, not a whole node
    assert node_of(pool, pool.take("A100", 3)) == {"n01"}   # the least name among equals


def test_a_gang_no_node_can_hold_spreads_over_the_fullest_nodes_first():
    pool = Pool(cluster(3, 4))
    pool.take("A100", 3)                         # n00: 1 free
    pool.take("A100", 2)                         # n01: 2 free
    got = pool.take("A100", 6)                   # 1 + 2 + 4 free: n02's 4, then n01's 2
    assert len(got) == 6 and node_of(pool, got) == {"n01", "n02"}
    assert pool.free_count["A100"] == 1 and len(pool.free["A100"]["n00"]) == 1
    assert pool.take("A100", 2) is None          # one device left: no gang of two


def test_grants_match_a_scan_of_every_node_through_any_sequence_of_takes_and_gives():
    rng = random.Random(18)
    pool = Pool(cluster(12, 8))
    reference = {n: list(ids) for n, ids in pool.free["A100"].items()}
    held: list[tuple[str, ...]] = []
    for _ in range(3000):
        if held and rng.random() < 0.45:
            devices = held.pop(rng.randrange(len(held)))
            pool.give(devices)
            for d in devices:
                reference[pool.node_of[d]].append(d)
            continue
        k = rng.choice([1, 1, 2, 3, 4, 8, 12])
        got = pool.take("A100", k)
        if sum(map(len, reference.values())) < k:
            assert got is None
            continue
        assert got == scan_take(reference, k)
        held.append(got)
    assert pool.free["A100"] == reference
