"""The full-drain estimate from a peer's rate on the deep backlog, and how the report prints it."""

from __future__ import annotations

import pytest

from bench.measures.throughput.section import hours_range
from bench.tools.stats import full_drain_hours


def test_the_estimate_runs_from_half_the_time_at_the_measured_rate_to_all_of_it() -> None:
    low, high = full_drain_hours(200_000, 10.0) or (0, 0)
    assert high == pytest.approx(200_000 / 10 / 3600)
    assert low == pytest.approx(high / 2)


def test_a_peer_that_drained_nothing_in_its_window_has_no_estimate() -> None:
    assert full_drain_hours(200_000, 0.0) is None
    assert full_drain_hours(200_000, None) is None
    assert hours_range(None).startswith("-")


def test_the_report_picks_minutes_hours_or_days() -> None:
    assert hours_range([0.25, 0.5]) == "15.0-30.0 min"
    assert hours_range([3.0, 6.0]) == "3.0-6.0 h"
    assert hours_range([48.0, 96.0]) == "2.0-4.0 days"
