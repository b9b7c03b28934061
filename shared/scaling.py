"""How many drainers a queue deserves, and how retry wake-ups are grouped (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def drainers_for_depth(depth: int, *, per_drainer: int, maximum: int) -> int:
    """One drainer per `per_drainer` messages waiting, at least one, at most `maximum`."""
    return max(1, min(maximum, math.ceil(max(0, depth) / per_drainer)))


def coalesce_due(due_ms: Iterable[int], *, window_ms: int) -> list[int]:
    """Group wake-up times so that one event per `window_ms` covers all: each group wakes at its latest
    time, when every message in it is visible again."""
    groups: list[int] = []
    start = None
    for t in sorted(due_ms):
        if start is None or t - start > window_ms:
            groups.append(t)
            start = t
        else:
            groups[-1] = t
    return groups
