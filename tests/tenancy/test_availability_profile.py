"""The availability profile answers "when does a gang of k fit for d seconds" exactly, however it
was built and whatever it remembers between questions (issue 18: it was made faster, and keeps
answers across reservations that cannot have moved them)."""

import math

import numpy as np
import pytest

from streammap.tenancy import availability
from streammap.tenancy.availability import Profile, Releases


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


@pytest.mark.parametrize("loop_up_to", [0, 64, 10**9])
def test_a_long_profile_answers_as_a_scan_does_however_far_out_the_first_fit_is(monkeypatch, loop_up_to):
    # Hundreds of segments: the search loops over the runs between few short segments and uses
    # array expressions for many, and must find the first window with room either way.
    monkeypatch.setattr(availability, "SHORT_LOOP", loop_up_to)
    rng = np.random.default_rng(11)
    for _ in range(40):
        now = float(rng.integers(0, 100))
        releases = [(now + float(rng.integers(1, 5000)), int(rng.integers(1, 3))) for _ in range(rng.integers(50, 400))]
        p = Profile(now, int(rng.integers(0, 4)), releases)
        for _ in range(12):
            k, d = int(rng.integers(1, 300)), float(rng.integers(0, 2000))
            assert p.earliest_fit(k, d) == brute_force_fit(p, k, d)
            at = p.earliest_fit(k, d)
            if math.isfinite(at):
                p.reserve(at, k, max(d, 1.0))


def rebuilt_profile(runs: dict, now: float, free_now: int) -> Profile:
    """The profile from scratch: every running job's expected end, one by one, in any order."""
    releases = []
    for start, duration, gpus in runs.values():
        end = start + duration
        if end <= now and duration > 0:        # past its estimate: the next start + 2^i x estimate
            i = 1
            while start + duration * 2.0 ** i <= now:
                i += 1
            end = start + duration * 2.0 ** i
        releases.append((end, gpus))
    return Profile(now, free_now, reversed(releases))


def test_a_profile_kept_up_to_date_as_jobs_start_and_finish_equals_one_built_from_scratch():
    rng = np.random.default_rng(5)
    for _ in range(60):
        kept, runs, now, free = Releases(), {}, 0.0, 64
        for step in range(80):
            now += float(rng.choice([0, 1, 7, 50]))      # whole seconds: ties and overruns happen
            if runs and (rng.random() < 0.4 or free == 0):
                job = str(rng.choice(sorted(runs)))
                free += runs.pop(job)[2]
                kept.remove(job)
            else:
                gpus = int(rng.integers(1, min(free, 8) + 1))
                duration = float(rng.choice([0, 1, 10, int(rng.integers(1, 200))]))
                runs[f"j{step}"] = (now, duration, gpus)
                kept.add(f"j{step}", now, duration, gpus)
                free -= gpus
            p, q = kept.profile(now, free), rebuilt_profile(runs, now, free)
            assert p.times.tolist() == q.times.tolist()
            assert p.free.tolist() == q.free.tolist()


def test_a_profile_split_again_and_again_is_the_step_function_of_its_reservations():
    # Reservations split segments in place (the arrays grow in buffers): the free devices at
    # every instant must still be the start's, less every reservation covering that instant.
    rng = np.random.default_rng(18)
    for _ in range(100):
        p = Profile(0.0, 40)
        taken = []
        for _ in range(int(rng.integers(1, 60))):
            start, length = float(rng.integers(0, 200)), float(rng.integers(1, 50))
            p.reserve(start, 1, length)
            taken.append((start, start + length))
        assert np.all(np.diff(p.times) > 0)
        for t in np.arange(0.0, 260.0, 0.5):
            i = int(p.times.searchsorted(t, "right")) - 1
            assert p.free[i] == 40 - sum(a <= t < b for a, b in taken)


def test_answers_remembered_across_reservations_and_give_backs_stay_the_scans():
    # A profile asked the same shapes again and again while reservations land inside and outside
    # their windows (an answer is kept only where the taking cannot have moved it), and devices
    # are now and then given back (which may bring fits earlier): every answer is the scan's.
    rng = np.random.default_rng(23)
    for _ in range(40):
        now = float(rng.integers(0, 100))
        releases = [(now + float(rng.integers(1, 3000)), int(rng.integers(1, 4))) for _ in range(rng.integers(20, 200))]
        p = Profile(now, int(rng.integers(0, 4)), releases)
        shapes = [(int(rng.integers(1, 40)), float(rng.choice([0, int(rng.integers(1, 800))]))) for _ in range(5)]
        for step in range(40):
            for k, d in shapes:
                assert p.earliest_fit(k, d) == brute_force_fit(p, k, d)
            k, d = shapes[int(rng.integers(0, len(shapes)))]
            at = p.earliest_fit(k, d)
            if step % 13 == 12:                 # a preemption gives devices back for a while
                p.add(now + float(rng.integers(0, 500)), now + float(rng.integers(500, 4000)), int(rng.integers(1, 5)))
            elif math.isfinite(at):
                p.reserve(at, k, max(d, 1.0))
            else:
                p.reserve(now + float(rng.integers(0, 3000)), 1, float(rng.integers(1, 300)))
