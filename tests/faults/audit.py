"""What a fault test checks once the stack has run: every item's result recorded exactly once and where (`audit`,
`merged`), the leases held while it ran, the drainers' log lines, and the items and pacing settings a test submits
with."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import AzureError

from shared.batch import results
from tests.faults.stack import Stack


class LeaseWatch:
    """Samples how many drain lease slots of the work queue are held, in a thread, while a scenario runs."""

    def __init__(self, stack: Stack, every_s: float = 0.2) -> None:
        self.stack, self.every_s = stack, every_s
        self.most = 0
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="lease watch", daemon=True)

    def __enter__(self) -> LeaseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.most = max(self.most, self.stack.leased_slots())
            except AzureError:
                self.missed += 1  # Azurite busy for a moment: the next sample counts


@dataclass(frozen=True)
class Audit:
    """Every item's result counted in the result blobs: lost and duplicated must both be 0."""

    items: int
    succeeded: int
    failed: int
    lost: int
    duplicated: int
    executions: int
    reexecutions: int
    missing_examples: list[str]


def paced(*, chunk_items: int, delay_s: float, concurrency: int = 2, receive_batch: int = 4) -> dict[str, str]:
    """Settings for a slow, narrow drain: `delay_s` per chunk, `concurrency` chunks at a time, one receiver
    taking pages of `receive_batch`, so faults land while chunks are in flight."""
    return {
        "FAULT_CHUNK_DELAY_S": str(delay_s),
        "CHUNK_CONCURRENCY": str(concurrency),
        "RECEIVE_BATCH": str(receive_batch),
        "RECEIVERS": "1",
        "CHUNK_MAX_ITEMS": str(chunk_items),
    }


def merged(audits: Iterable[Audit]) -> Audit:
    """One audit over several batches (counts added up)."""
    parts = list(audits)
    return Audit(
        items=sum(a.items for a in parts),
        succeeded=sum(a.succeeded for a in parts),
        failed=sum(a.failed for a in parts),
        lost=sum(a.lost for a in parts),
        duplicated=sum(a.duplicated for a in parts),
        executions=sum(a.executions for a in parts),
        reexecutions=sum(a.reexecutions for a in parts),
        missing_examples=[m for a in parts for m in a.missing_examples][:5],
    )


def items_for(token: str, count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"{token}-{n}", **extra} for n in range(count)]


def audit(stack: Stack, batch_id: str, items: Sequence[Mapping[str, Any]], chunk_items: int) -> Audit:
    ids = [str(item["id"]) for item in items]
    seen: Counter[str] = Counter()
    succeeded = failed = 0
    for record in stack.result_records(batch_id):
        base = record["chunk"] * chunk_items
        for position, value in results.successes(record):
            seen[ids[base + position]] += 1
            assert value["id"] == ids[base + position], "a result belongs to the item at its position"
            succeeded += 1
        for entry in record["failed"]:
            seen[ids[base + entry["i"]]] += 1
            failed += 1
    lost = [i for i in ids if seen[i] == 0]
    executions = stack.executions()
    ran = sum(executions[i] for i in ids)
    return Audit(
        items=len(ids),
        succeeded=succeeded,
        failed=failed,
        lost=len(lost),
        duplicated=sum(1 for i in ids if seen[i] > 1),
        executions=ran,
        reexecutions=ran - sum(1 for i in ids if executions[i] > 0),
        missing_examples=lost[:5],
    )


DRAIN_LINE = re.compile(
    r"drain \S+ slot (\d+) \(([a-z-]+)\): ([a-z-]+); (\d+) message\(s\), \d+ chunk\(s\) done, (\d+) item\(s\) ok"
)


@dataclass(frozen=True)
class DrainLine:
    """One drain session's one-line report in a host log."""

    slot: int
    reason: str
    outcome: str
    messages: int
    items_ok: int


def drain_lines(logs: str) -> list[DrainLine]:
    found = (DRAIN_LINE.search(line) for line in logs.splitlines())
    return [DrainLine(int(m[1]), m[2], m[3], int(m[4]), int(m[5])) for m in found if m]


def first_line_with(logs: str, needles: Iterable[str]) -> str | None:
    for line in logs.splitlines():
        if all(n in line for n in needles):
            return line
    return None
