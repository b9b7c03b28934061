"""The steady part of a drain: from its first GetMessages to its last DeleteMessage (pure).

A drain session also acquires its lease, creates its containers once per process, and schedules and cancels
its Service Bus watchdog (on a cold connection in a fresh process, about half a second); the raw limit has none
of that. Messages over this window is the like-for-like figure set beside the raw GetMessages+Delete rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    first_receive_s: float
    last_delete_s: float

    @property
    def seconds(self) -> float:
        return self.last_delete_s - self.first_receive_s


def steady_window(stamps: Iterable[tuple[float, str]]) -> Window | None:
    """From (time, operation) pairs: first `queue.GetMessages` to last `queue.DeleteMessage`; None if either is
    missing or the deletes all came first."""
    receives = [t for t, op in stamps if op == "queue.GetMessages"]
    deletes = [t for t, op in stamps if op == "queue.DeleteMessage"]
    if not receives or not deletes or max(deletes) <= min(receives):
        return None
    return Window(min(receives), max(deletes))
