"""The availability profile answers "when does a gang of k fit for d seconds" exactly, however it
was built and whatever it remembers between questions (issue 18: it was made faster, and keeps
answers across reservations that cannot have moved them)."""

import math

import numpy as np

from streammap.tenancy.availability import Profile


def brute_force_fit(p: Profile, k: int, duration: float) -> float:
    """The earliest segment start (or now) with k free over the whole window, by scanning."""
    for t in p.times:
        window = (p.times < t + duration) & (np.r_[p.times[1:], math.inf] > t)
        if duration == 0:
            window = (p.times <= t) & (np.r_[p.times[1:], math.inf] > t)
        if p.free[window].min() >= k:
            return float(t)
    return math.inf


def random_profile(rng) -> Profile:
    # Whole-second times, so that the reference's sums and the profile's differences agree.
    now = float(rng.integers(0, 100))
    releases = [(now + float(rng.integers(1, 50)), int(rng.integers(1, 4))) for _ in range(rng.integers(0, 12))]
    return Profile(now, int(rng.integers(0, 6)), releases)


def test_the_earliest_fit_is_the_first_window_with_room_through_any_sequence_of_reservations():
    rng = np.random.default_rng(7)
    for _ in range(400):
        p = random_profile(rng)
        shapes = [(int(rng.integers(1, 8)), float(rng.choice([0, 5, int(rng.integers(1, 60))]))) for _ in range(4)]
        for _ in range(6):
            for k, d in shapes:             # asked twice: the second answer may come from memory
                assert p.earliest_fit(k, d) == brute_force_fit(p, k, d)
                assert p.earliest_fit(k, d) == brute_force_fit(p, k, d)
            k, d = shapes[int(rng.integers(0, len(shapes)))]
            at = p.earliest_fit(k, d)
            start = at if math.isfinite(at) else p.now + float(rng.integers(0, 60))
            p.reserve(start, k, max(d, 1.0))


def test_a_reservation_inside_a_remembered_window_moves_the_answer():
    p = Profile(0.0, 4, [(100.0, 4)])
    assert p.earliest_fit(4, 10.0) == 0.0
    p.reserve(5.0, 1, 10.0)                  # takes one device in [5, 15): the gang no longer fits at 0
    assert p.earliest_fit(4, 10.0) == 15.0
    p.reserve(50.0, 8, 10.0)                 # after the window [15, 25): the answer stands
    assert p.earliest_fit(4, 10.0) == 15.0
