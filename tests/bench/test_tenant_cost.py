"""The tenant lanes' cost and its target, worked by hand."""

from __future__ import annotations

import pytest

from bench.tools.tenant_cost import LANE_TARGET_PER_HOUR, delta, per_hour, per_lane, verdict, work


def test_work_leaves_out_the_api_reads() -> None:
    totals = {"queue.GetQueueMetadata": 1010, "queue.ListQueues": 12, "blob.GetBlob": 3}
    reads = {"queue.GetQueueMetadata": 1000, "queue.ListQueues": 2, "blob.GetBlob": 3}
    assert work(totals, reads) == {"queue.GetQueueMetadata": 10, "queue.ListQueues": 10}


def test_delta_and_per_hour() -> None:
    assert delta({"a": 5, "b": 1}, {"a": 8, "b": 1, "c": 2}) == {"a": 3, "c": 2}
    assert per_hour(30, 120.0) == 900.0


def test_per_lane_is_the_slope_between_the_fewest_and_the_most_lanes() -> None:
    # a tick a minute reading each lane's depth: 60 per lane per hour, plus a fixed 120 per hour
    by_lanes = {1: 180.0, 100: 6_120.0, 1000: 60_120.0}
    assert per_lane(by_lanes) == pytest.approx(60.0)
    assert per_lane({5: 1.0}) is None


def test_verdict() -> None:
    assert verdict("idle", {1: 120.0, 1000: 120.0})["met"]
    assert verdict("idle", {1: 120.0, 1000: 120.0 + 999 * LANE_TARGET_PER_HOUR})["met"]
    missed = verdict("idle", {1: 180.0, 1000: 60_120.0})
    assert not missed["met"]
    assert missed["figure"] == pytest.approx(60.0)
