"""The latency run's submission schedule and how handler records become latencies."""

from __future__ import annotations

import itertools
import random

from bench.tools.schedule import observations, submissions


def test_every_lane_submits_its_share_after_gaps_within_the_range_and_never_two_at_once() -> None:
    events = submissions(10, 5, (20.0, 180.0), random.Random(1), min_spacing_s=3.0)
    assert len(events) == 50
    assert sorted(e.index for e in events) == list(range(50))
    assert all(sum(1 for e in events if e.lane == lane) == 5 for lane in range(10))
    times = [e.at_s for e in events]
    assert times == sorted(times)
    assert all(b - a >= 3.0 - 1e-9 for a, b in itertools.pairwise(times))
    assert times[0] >= 20.0


def test_a_batch_is_done_when_all_its_items_were_seen_and_first_is_its_earliest_record() -> None:
    lines = ["10.0 x-1 30", "9.5 y-2 5", "10.5 x-1 70", "11.0 x-1 1", "junk", "12.0 other 3"]
    seen = observations(lines, {"x-1": 100, "y-2": 10})
    assert seen["x-1"].first_s == 10.0
    assert seen["x-1"].done_s == 10.5
    assert "y-2" not in seen  # only half of it was handled
