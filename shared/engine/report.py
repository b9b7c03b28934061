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
    # empty | budget | lease-lost | work-left | storage-failed | shrunk | starved | lease-taken | lease-unreleased |
    # busy-here (`Drainer.run`)
    outcome: str = "empty"
    sessions: int = 0
    messages: int = 0
    chunks_done: int = 0
    items_ok: int = 0
    items_failed: int = 0
    items_retried: int = 0
    stale: int = 0
    waiting: int = 0
    overloaded: int = 0  # chunks put back because the handler's downstream was overloaded
    discarded: int = 0  # items of ended or expired batches recorded without a handler call
    seconds: float = 0.0
    transactions: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    # the batches this execution recorded results of: the router looks at each once afterwards (did it end?)
    batches: set[str] = field(default_factory=set)

    @property
    def transaction_total(self) -> int:
        return sum(self.transactions.values())

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__} | {"transaction_total": self.transaction_total}
        out["batches"] = sorted(self.batches)
        return out

    def log(self) -> None:
        log.info(
            "drain %s slot %d (%s): %s; %d message(s), %d chunk(s) done, %d item(s) ok, %d failed, %d retried, "
            "%d stale, %d waiting, %d overloaded; %.2f s; %d storage transactions %s; events %s",
            self.queue, self.slot, self.reason, self.outcome, self.messages, self.chunks_done, self.items_ok,
            self.items_failed, self.items_retried, self.stale, self.waiting, self.overloaded, self.seconds,
            self.transaction_total, self.transactions, self.events or "none",
        )  # fmt: skip
