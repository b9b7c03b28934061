"""`python -m bench.fairness --before DIR`: a change's effect on a newcomer's wait, both sides in the same run.

Each round drains A's batch with lanes twice on the same Azurite and Service Bus stand-in: once in a host running
this checkout's app and once in a host running DIR's (a checkout of the change's parent), in alternating order
(this, before; before, this; ...), so the machine's drift falls on both. The control without lanes is not run:
what is compared is B's wait with lanes, and A's drain rate beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from devstack.host import ROOT

AFTER, BEFORE = "after", "before"


def sides(round_no: int) -> tuple[str, str]:
    """This checkout first in even rounds, the parent first in odd ones."""
    return (AFTER, BEFORE) if round_no % 2 == 0 else (BEFORE, AFTER)


def figures(run: dict[str, Any]) -> dict[str, float | None]:
    """What one side's round is judged by: B's wait (202 to handler), the app's part of it when taken apart, and
    A's drain rate."""
    parts = run.get("taken_apart") or {}
    app = parts.get("app_added_ms") or {}
    return {
        "b_p50_ms": run["b_latency_ms"]["p50"],
        "b_p99_ms": run["b_latency_ms"]["p99"],
        "b_max_ms": run["b_latency_ms"]["max"],
        "app_part_p99_ms": app.get("p99"),
        "a_items_per_s": run["a_items_per_s"],
    }


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per side the medians over the rounds, and per round after over before (pure)."""

    def median(side: str, key: str) -> float | None:
        values = [r[side][key] for r in rounds if r[side][key] is not None]
        return round(statistics.median(values), 1) if values else None

    def ratios(key: str) -> list[float]:
        return [
            round(r[AFTER][key] / r[BEFORE][key], 3) for r in rounds if r[BEFORE][key] and r[AFTER][key] is not None
        ]

    keys = ("b_p50_ms", "b_p99_ms", "b_max_ms", "app_part_p99_ms", "a_items_per_s")
    return {
        "medians": {side: {key: median(side, key) for key in keys} for side in (AFTER, BEFORE)},
        "after_over_before": {key: ratios(key) for key in ("b_p99_ms", "app_part_p99_ms", "a_items_per_s")},
    }


async def measure_change(
    play: Callable[..., Awaitable[dict[str, Any]]], before: Path, rounds: int, wait_ms: float
) -> dict[str, Any]:
    """`play(round_no, root=..., side=...)`: one round with lanes in a host running `root`'s app
    (`bench.measures.fairness.run.fairness_round`, its stack and sizes given)."""
    done: list[dict[str, Any]] = []
    for r in range(rounds):
        one: dict[str, Any] = {"order": list(sides(r))}
        for side in sides(r):
            run = await play(r, root=before if side == BEFORE else ROOT, side=side[0])
            one[side], one[f"{side}_run"] = figures(run), run
        done.append(one)
    return {"handler_wait_ms_per_chunk": wait_ms, "rounds": done, "summary": summary(done)}
