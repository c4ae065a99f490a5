"""The driver's sampler of a Ray run names every reading the actors sent, even those that reached
the board before the driver learnt the actor's node (a run shorter than the actors' sampling
interval has no others). No Ray needed: the board and ``ray.wait``/``ray.get`` are stand-ins."""

from streammap.monitoring.telemetry import Reading
from streammap.runtime.ray.monitor import BoardSampler


class _Ref:
    def __init__(self, value):
        self.value = value


class _Board:
    """A board whose ``take`` answers at once with what was pushed since the last take."""

    def __init__(self):
        self.latest, self.take = {}, self

    def remote(self):
        latest, self.latest = self.latest, {}
        return _Ref((latest, []))


class _Ray:
    @staticmethod
    def wait(refs, timeout):
        return refs, []

    @staticmethod
    def get(ref):
        return ref.value


def _reading(device="cpu", used=1.0):
    return Reading(device=device, memory_used=used)


def test_readings_sent_before_the_actor_is_known_are_named_once_it_is():
    board, info = _Board(), {}
    sampler = BoardSampler(_Ray(), board, info)
    board.latest["node0/gpu0"] = [_reading()]
    assert sampler.sample() == []                  # node not known yet: held, not dropped
    info["node0/gpu0"] = {"node": "node0"}
    out = sampler.sample()                         # nothing new on the board: the held ones
    assert [r.device for r in out] == ["node0/cpu"]
    assert sampler.sample() == []                  # named once, not again


def test_a_newer_reading_replaces_the_held_one():
    board, info = _Board(), {}
    sampler = BoardSampler(_Ray(), board, info)
    board.latest["d"] = [_reading(used=1.0)]
    sampler.sample()
    info["d"] = {"node": "n"}
    board.latest["d"] = [_reading(used=2.0)]
    out = sampler.sample()
    assert [(r.device, r.memory_used) for r in out] == [("n/cpu", 2.0)]


def test_the_last_tick_waits_longer_but_never_shorter():
    sampler = BoardSampler(_Ray(), _Board(), {}, wait=0.05)
    sampler.last_wait(2.0)
    assert sampler.wait == 2.0
    sampler.last_wait(0.01)
    assert sampler.wait == 2.0
