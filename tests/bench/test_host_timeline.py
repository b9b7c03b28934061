"""The wake-up timeline read from the local host's console: the gap from `submit_batch` ending to `drain`
starting, negative when the drain starts before the submit has logged its end (it publishes the trigger)."""

from __future__ import annotations

import pytest

from bench.measures.latency.run import host_timeline


def line(at: str, what: str, function: str, duration_ms: int | None = None) -> str:
    tail = f"(Succeeded, Id=x, Duration={duration_ms}ms)" if what == "Executed" else "(Reason='r', Id=x)"
    return f"[2026-11-23T12:00:{at}Z] {what} 'Functions.{function}' {tail}"


def test_a_drain_after_the_submit_counts_its_delay():
    lines = [
        line("00.000", "Executing", "submit_batch"),
        line("00.100", "Executed", "submit_batch", 100),
        line("00.120", "Executing", "drain"),
        line("00.170", "Executed", "drain", 50),
    ]
    timeline = host_timeline(lines)
    assert timeline["delivery_gap_s"]["p50"] == pytest.approx(0.020)
    assert timeline["drain_duration_s"]["p50"] == pytest.approx(0.050)


def test_a_drain_that_starts_before_the_submit_ends_is_a_negative_gap_not_the_next_drain():
    lines = [
        line("00.000", "Executing", "submit_batch"),
        line("00.090", "Executing", "drain"),
        line("00.100", "Executed", "submit_batch", 100),
        line("00.130", "Executed", "drain", 40),
        line("03.000", "Executing", "drain"),  # a later drain (continue, fallback): no submit before it
        line("03.010", "Executed", "drain", 10),
    ]
    timeline = host_timeline(lines)
    assert timeline["delivery_gap_s"]["count"] == 1
    assert timeline["delivery_gap_s"]["p50"] == pytest.approx(-0.010)
