"""The local physical limit: raw GetMessages(32) + DeleteMessage messages/s on Azurite, no processing.

The queue is filled with messages of the app's own backlog shape (same count, same text size), because
Azurite's GetMessages slows with depth and message size; then `c` concurrent clients receive 32 at a time
and delete each message (concurrently), until the queue is empty. Filling is not timed.

A second limit adds the one piece of work no consumer of these messages can skip: decoding each message's
items (the app's own `envelope.decode`) before the delete.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from dataclasses import fields
from typing import Any

from azure.storage.queue.aio import QueueClient

from bench.tools import enqueue
from bench.tools.items import items
from shared.batch import envelope
from shared.core.settings import Settings
from shared.store.storage import request_id

log = logging.getLogger(__name__)

CHUNK_ITEMS: int = next(f.default for f in fields(Settings) if f.name == "chunk_max_items")  # CHUNK_MAX_ITEMS
VISIBILITY_S = 30


def messages_for(items: int) -> int:
    """How many messages the app's default chunking makes of `items` items."""
    return -(-items // CHUNK_ITEMS)


def chunk_texts(count: int) -> list[str]:
    """`count` message texts as the app enqueues them for its benchmark items (chunks of CHUNK_ITEMS)."""
    texts = []
    for chunk in range(count):
        batch = items("raw", CHUNK_ITEMS, start=chunk * CHUNK_ITEMS)
        header = envelope.ChunkHeader(batch_id="0" * 32, attempt="0" * 16, chunk=chunk)
        text = envelope.encode_inline(header, envelope.encode_items(batch))
        assert text is not None
        texts.append(text)
    return texts


async def drain_raw(connection: str, queue: str, clients: int, decode: bool = False) -> None:
    async def settle_one(client: QueueClient, message: Any) -> None:
        if decode:
            envelope.decode(str(message.content))
        await client.delete_message(message, client_request_id=request_id())

    async def worker(client: QueueClient) -> None:
        while True:
            pager = client.receive_messages(
                messages_per_page=32, visibility_timeout=VISIBILITY_S, client_request_id=request_id()
            ).by_page()
            try:
                page = [m async for m in await pager.__anext__()]
            except StopAsyncIteration:
                return
            if not page:
                return
            await asyncio.gather(*(settle_one(client, m) for m in page))

    workers = [enqueue.client(connection, queue) for _ in range(clients)]
    try:
        await asyncio.gather(*(worker(c) for c in workers))
    finally:
        for c in workers:
            await c.close()


async def levels(
    connection: str, name: str, texts: list[str], concurrency: tuple[int, ...], rounds: int, decode: bool
) -> list[dict[str, Any]]:
    filler = enqueue.client(connection, name)
    await enqueue.create(filler)
    out = []
    try:
        for clients in concurrency:
            rates = []
            for _ in range(rounds):
                await enqueue.put_all(filler, texts)
                started = time.monotonic()
                await drain_raw(connection, name, clients, decode)
                rates.append(len(texts) / (time.monotonic() - started))
            out.append({"clients": clients, "rates": rates, "median": statistics.median(rates)})
            log.info(
                "raw%s with %d client(s): %.0f messages/s (median of %d)",
                " + decode" if decode else "", clients, out[-1]["median"], rounds,
            )  # fmt: skip
    finally:
        await filler.close()
    return out


async def measure(
    connection: str, token: str, messages: int, concurrency: tuple[int, ...], rounds: int
) -> dict[str, Any]:
    texts = chunk_texts(messages)
    plain = await levels(connection, f"raw-{token}", texts, concurrency, rounds, False)
    decoded = await levels(connection, f"rawdecode-{token}", texts, concurrency, rounds, True)
    best = max(plain, key=lambda level: level["median"])
    best_decoded = max(decoded, key=lambda level: level["median"])
    return {
        "messages_per_round": messages,
        "message_bytes": len(texts[0]),
        "levels": plain,
        "limit_messages_per_s": best["median"],
        "best_clients": best["clients"],
        "with_decode": {
            "levels": decoded,
            "limit_messages_per_s": best_decoded["median"],
            "best_clients": best_decoded["clients"],
        },
    }
