"""What one drain execution did: the counts its one-line log report and the benchmarks read."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("shared.engine.drainer")


@dataclass
class DrainReport:
    queue: str
    slot: int
    reason: str
    outcome: str = "empty"  # empty | budget | lease-taken | busy-here | lease-lost | storage-failed | shrunk
    sessions: int = 0
    messages: int = 0
    chunks_done: int = 0
    items_ok: int = 0
    items_failed: int = 0
    items_retried: int = 0
    stale: int = 0
    waiting: int = 0
    overloaded: int = 0  # chunks put back because the handler's downstream was overloaded
    seconds: float = 0.0
    transactions: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    batches: set[str] = field(default_factory=set)  # whose chunks this execution settled (some may now be final)

    @property
    def transaction_total(self) -> int:
        return sum(self.transactions.values())

    def as_dict(self) -> dict[str, Any]:
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "batches"}
        return fields | {"transaction_total": self.transaction_total, "batches": sorted(self.batches)}

    def log(self) -> None:
        log.info(
            "drain %s slot %d (%s): %s; %d message(s), %d chunk(s) done, %d item(s) ok, %d failed, %d retried, "
            "%d stale, %d waiting, %d overloaded; %.2f s; %d storage transactions %s; events %s",
            self.queue, self.slot, self.reason, self.outcome, self.messages, self.chunks_done, self.items_ok,
            self.items_failed, self.items_retried, self.stale, self.waiting, self.overloaded, self.seconds,
            self.transaction_total, self.transactions, self.events or "none",
        )  # fmt: skip
