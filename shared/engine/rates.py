"""A queue's message rate against its scalability target, and what to do when it nears it (pure).

One storage queue is targeted at about 2,000 messages a second (Azure Storage scalability targets, 1 KiB
messages); past that the service throttles (503 "server busy"), and more drainers or instances only add
retries. Each drainer measures the messages it receives per second and, while that is worth the extra call,
writes it on its lease blob; the queue's rate is the sum over its live leases, read with the lease listing
that /api/queues and the first drainer already make.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUE_TARGET_PER_S = 2000  # Azure Storage scalability targets: a single queue, up to 2,000 messages/s (1 KiB)
NEAR_FRACTION = 0.8  # "near" the target: from 80% of it
REPORT_FROM_PER_S = 100.0  # a drainer below this does not write its rate (5% of the target: one call per renew)
ADVISED_LOAD = 0.5  # partitions advised so that each queue runs at about half its target


def near_target(rate_per_s: float) -> bool:
    return rate_per_s >= NEAR_FRACTION * QUEUE_TARGET_PER_S


def partitions_advised(rate_per_s: float, partitions: int) -> int:
    """How many partitions would carry `rate_per_s` per queue at about half the target each: at least one
    more than today. A throttled queue under-reports its demand, so the advice is a floor, not a ceiling."""
    wanted = math.ceil(partitions * rate_per_s / (ADVISED_LOAD * QUEUE_TARGET_PER_S))
    return max(partitions + 1, wanted)


def advice(queue: str, rate_per_s: float, partitions: int) -> str | None:
    """What to tell an operator about `queue` at this rate, or None while it is well under its target."""
    if not near_target(rate_per_s):
        return None
    return (
        f"{queue} handles about {rate_per_s:,.0f} messages/s, near the {QUEUE_TARGET_PER_S:,}/s a storage queue "
        f"is targeted at: set WORK_QUEUE_PARTITIONS to {partitions_advised(rate_per_s, partitions)} "
        f"(now {partitions}) to spread chunks over more queues"
    )


@dataclass
class RateMeter:
    """Messages counted as they arrive; `sample()` gives the rate since the previous sample (or the start)."""

    clock: Callable[[], float]
    _count: int = 0
    _since: float = field(init=False)

    def __post_init__(self) -> None:
        self._since = self.clock()

    def add(self, messages: int) -> None:
        self._count += messages

    def sample(self) -> float:
        now = self.clock()
        if now <= self._since:
            return 0.0
        rate = self._count / (now - self._since)
        self._count, self._since = 0, now
        return rate
