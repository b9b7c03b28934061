"""Put messages on a queue concurrently (the peers' producer side), counted at the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from functools import partial

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue.aio import QueueClient

from shared.store.storage import configured
from shared.telemetry.metering import TransactionCounter

CONCURRENCY = 32


def client(connection: str, queue: str, counter: TransactionCounter | None = None) -> QueueClient:
    """A queue client configured as the app's own (`shared.store.storage.configured`), so the peers and the raw limit
    pay the same HTTP stack per request as the app."""
    hook = counter.hook("queue") if counter is not None else None
    return configured(partial(QueueClient.from_connection_string, connection, queue, raw_request_hook=hook))


async def create(queue: QueueClient) -> None:
    with contextlib.suppress(ResourceExistsError):
        await queue.create_queue()


async def put_all(queue: QueueClient, texts: Sequence[str], concurrency: int = CONCURRENCY) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> None:
        async with gate:
            await queue.send_message(text)

    await asyncio.gather(*(one(t) for t in texts))
