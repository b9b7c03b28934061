"""`python -m bench.fairness --before DIR`: the order of the two sides and what is compared (pure)."""

from __future__ import annotations

from typing import Any

from bench.measures.fairness.beside import AFTER, BEFORE, figures, sides, summary


def run(p99: float, rate: float, app_p99: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"b_latency_ms": {"p50": p99 / 4, "p99": p99, "max": p99 * 2}, "a_items_per_s": rate}
    if app_p99 is not None:
        out["taken_apart"] = {"app_added_ms": {"p99": app_p99}}
    return out


def test_the_sides_alternate_which_goes_first() -> None:
    assert [sides(r) for r in range(3)] == [(AFTER, BEFORE), (BEFORE, AFTER), (AFTER, BEFORE)]


def test_each_round_is_judged_after_over_before_and_each_side_by_its_medians() -> None:
    rounds = [
        {AFTER: figures(run(100, 900, 60)), BEFORE: figures(run(400, 1000, 300))},
        {AFTER: figures(run(200, 1100)), BEFORE: figures(run(800, 1000))},
        {AFTER: figures(run(300, 1000, 90)), BEFORE: figures(run(300, 1000, 150))},
    ]
    done = summary(rounds)
    assert done["after_over_before"]["b_p99_ms"] == [0.25, 0.25, 1.0]
    assert done["after_over_before"]["a_items_per_s"] == [0.9, 1.1, 1.0]
    assert done["after_over_before"]["app_part_p99_ms"] == [0.2, 0.6]  # the round not taken apart is left out
    assert done["medians"][AFTER]["b_p99_ms"] == 200
    assert done["medians"][BEFORE]["b_p99_ms"] == 400
    assert done["medians"][AFTER]["app_part_p99_ms"] == 75
