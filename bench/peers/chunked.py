"""(a') The built-in queue trigger fed the app's own chunk messages: what batching by hand gives a user of it.

The producer cuts the items as the app's submit does (`shared.batch.chunking.plan_chunks`, CHUNK_MAX_ITEMS and
CHUNK_MAX_BYTES) and writes each chunk as the app's own message (`shared.batch.envelope.encode_inline`), one
PutMessage each. The consumer is (a)'s loop unchanged (`BuiltinQueueTrigger`: GetMessages of 16, the next batch at
<= 8 in flight, the same randomized back-off, visibility and poison rules); each message is decoded with the app's
decoder and the handler is called once per message with the chunk's items, as a function bound to the trigger
would be. Nothing of the app's bookkeeping (manifest, result records, settlement) is done: that is the point of
the comparison, and what it leaves out.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from bench.peers.base import Message
from bench.peers.builtin_trigger import BuiltinQueueTrigger
from shared.batch import envelope
from shared.batch.chunking import plan_chunks
from shared.core.settings import Settings


def default(name: str) -> Any:
    """The app's shipped default for one setting."""
    return next(f.default for f in fields(Settings) if f.name == name)


def chunk_texts(batch: Sequence[Any]) -> list[str]:
    """The app's chunk messages for these items at its default chunk limits (inline, compressed if need be)."""
    encoded = envelope.encode_items(batch)
    batch_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex[:8]
    texts = []
    limits = {"max_items": default("chunk_max_items"), "max_bytes": default("chunk_max_bytes")}
    for chunk in plan_chunks(encoded, **limits):
        text = envelope.encode_inline(envelope.ChunkHeader(batch_id, attempt, chunk.index), chunk.items)
        if text is None:
            raise ValueError(f"chunk {chunk.index} does not fit a message inline")
        texts.append(text)
    return texts


def chunk_items(text: str) -> list[Any]:
    """A chunk message's items, by the app's own decoder."""
    items = envelope.decode(text).items
    if items is None:
        raise ValueError("a claim-check chunk: not produced by chunk_texts")
    return items


class BuiltinChunkTrigger(BuiltinQueueTrigger):
    """(a)'s loop; the handler gets a message's whole chunk of items."""

    async def handle(self, message: Message) -> bool:
        try:
            await self.handler(message.item)
        except Exception:
            return False
        self.handled += 1
        return True
