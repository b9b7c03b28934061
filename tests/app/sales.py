"""Batches of sales submitted through the app's own submit path, and what a drain left of them (the result positions
settled, the poison queue's messages): what the drain engine's tests and many others share."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from shared.batch import poison, results
from shared.intake.submit import submit
from shared.services import Services
from shared.store.result_store import read_records

SALE = {"amount": "10.00", "currency": "EUR", "author": "a", "distributor": "d"}


def ndjson(ids: list[str], **extra: Any) -> bytes:
    return "\n".join(json.dumps({"id": i, **SALE, **extra}) for i in ids).encode()


async def submit_ids(services: Services, ids: list[str], key: str | None = None, **extra: Any) -> str:
    done = await submit(
        services,
        ndjson(ids, **extra),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=key,
    )
    return done.manifest.batch_id


async def result_positions(services: Services, batch_id: str) -> Counter[tuple[int, int]]:
    """(chunk, position) -> how many result records hold it as settled (ok or failed), as status reads them."""
    container = services.storage.container(services.settings.results_container)
    seen: Counter[tuple[int, int]] = Counter()
    for record in await read_records(container, batch_id):
        for position in [p for p, _ in results.successes(record)] + [f["i"] for f in record["failed"]]:
            seen[(record["chunk"], position)] += 1
    return seen


async def poison_messages(services: Services) -> list[poison.PoisonMessage]:
    queue = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    return [poison.decode(m.content) for m in await queue.peek_messages(max_messages=32)]
