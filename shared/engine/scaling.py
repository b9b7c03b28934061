"""How many drainers a queue deserves, and when the wake-ups for messages left behind go (pure)."""

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


def wakeup_for(due_ms: int, scheduled: Iterable[int], *, window_ms: int, margin_ms: int) -> int | None:
    """When to schedule a wake-up for a message visible again at `due_ms`, or None if one already scheduled
    covers it: a wake-up at `s` covers every due time in [s - window_ms, s - margin_ms]. A new one goes at
    due + window_ms, so the messages that follow within window - margin share it."""
    for s in scheduled:
        if s - window_ms <= due_ms <= s - margin_ms:
            return None
    return due_ms + window_ms
