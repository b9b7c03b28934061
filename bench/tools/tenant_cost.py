"""What each tenant lane costs, from the tenants bench's counts (pure; `bench.tenants` measures them).

A lane is one queue per partition per distinct tenant. Its cost is the growth of the app's own storage
transactions (the API's reads left out) with the number of lanes: the slope between the fewest and the most
lanes measured, per lane and hour. The target (`LANE_TARGET`): a lane that has been empty for a while costs
nothing, idle or while another tenant drains, within a tolerance for the measurement's noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Transactions per empty lane per hour the target allows: "nothing", at most one transaction a day per lane (the
# timer's daily thorough look reads each lane's depth once).
LANE_TARGET_PER_HOUR = 1 / 24


def per_hour(transactions: int | float, seconds: float) -> float:
    return float(transactions) * 3600 / seconds


def work(totals: Mapping[str, int], reads: Mapping[str, int]) -> dict[str, int]:
    """What the app did on its own: every counted transaction but those made to answer the API's reads."""
    return {op: n - reads.get(op, 0) for op, n in totals.items() if n - reads.get(op, 0) > 0}


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {op: after.get(op, 0) - before.get(op, 0) for op in after if after.get(op, 0) != before.get(op, 0)}


def per_lane(by_lanes: Mapping[int, float]) -> float | None:
    """Transactions per hour each lane adds: the slope between the fewest and the most lanes measured."""
    if len(by_lanes) < 2:
        return None
    low, high = min(by_lanes), max(by_lanes)
    return (by_lanes[high] - by_lanes[low]) / (high - low)


def verdict(name: str, by_lanes: Mapping[int, float], bound: float = LANE_TARGET_PER_HOUR) -> dict[str, Any]:
    slope = per_lane(by_lanes)
    return {
        "target": f"an empty lane costs nothing {name}: at most {bound:.3g} transactions per lane per hour",
        "figure": slope,
        "bound": bound,
        "met": slope is not None and slope <= bound * (1 + 1e-9),  # one read a day is the bound, not past it
    }
