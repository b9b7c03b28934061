"""Percentiles and summaries (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0-100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """count, p50, p95, p99, max and mean of `values`."""
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def full_drain_hours(depth: int, rate_at_depth: float | None) -> list[float] | None:
    """Hours a full drain would take from a rate measured at `depth`: depth / rate if the rate held, half that
    if each GetMessages' cost fell in proportion to the depth left (as Azurite's roughly does)."""
    if not rate_at_depth:
        return None
    hours = depth / rate_at_depth / 3600
    return [hours / 2, hours]
