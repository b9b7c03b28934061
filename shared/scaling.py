"""How many drainers a queue deserves, and how retry wake-ups are grouped (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def drainers_for_depth(depth: int, *, per_drainer: int, maximum: int) -> int:
    """One drainer per `per_drainer` messages waiting, at least one, at most `maximum`."""
    return max(1, min(maximum, math.ceil(max(0, depth) / per_drainer)))


def deserves_slot(slot: int, depth: int, *, per_drainer: int, maximum: int) -> bool:
    """Whether the drainer of `slot` should go on (`continue`) at this depth: drainers beyond what the depth
    deserves end instead, so the platform's count of trigger events in flight, and its instances, shrink as the
    backlog falls. Slot 0 always goes on while work remains."""
    return slot < drainers_for_depth(depth, per_drainer=per_drainer, maximum=maximum)


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
