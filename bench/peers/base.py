"""What every peer shares: the queue it polls (real or simulated), its handler, its life cycle."""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from azure.storage.queue.aio import QueueClient

from bench.tools.clock import Clock
from shared.store.storage import request_id

log = logging.getLogger(__name__)

Handler = Callable[[Sequence[Any]], Awaitable[None]]


@dataclass
class Message:
    id: str
    pop_receipt: str
    dequeue_count: int
    item: Any
    raw: Any = None  # the SDK's QueueMessage, for delete/update


class PeerQueue(Protocol):
    async def get(self, count: int, visibility_s: int) -> list[Message]:
        """One GetMessages of up to `count` messages."""
        ...

    async def delete(self, message: Message) -> None: ...

    async def release(self, message: Message, visibility_s: int) -> None:
        """UpdateMessage: make it visible again after `visibility_s`."""
        ...

    async def depth(self) -> int:
        """GetQueueMetadata: the approximate message count."""
        ...

    async def poison(self, message: Message) -> None:
        """Copy to the poison queue, then delete here."""
        ...


class StorageQueue:
    """A real storage queue through the aio SDK (count its transactions with the client's raw_request_hook).
    A message's item is its text decoded by `decode` (JSON: one item; `bench.peers.chunked`: a chunk's items)."""

    def __init__(
        self, client: QueueClient, poison_client: QueueClient | None = None, decode: Callable[[str], Any] = json.loads
    ) -> None:
        self.client = client
        self.poison_client = poison_client
        self.decode = decode

    async def get(self, count: int, visibility_s: int) -> list[Message]:
        pager = self.client.receive_messages(
            messages_per_page=count, visibility_timeout=visibility_s, client_request_id=request_id()
        ).by_page()
        try:
            page = await pager.__anext__()  # exactly one GetMessages
        except StopAsyncIteration:
            return []
        return [
            Message(m.id, str(m.pop_receipt), int(m.dequeue_count or 1), self.decode(str(m.content)), m)
            async for m in page
        ]

    async def delete(self, message: Message) -> None:
        await self.client.delete_message(message.raw, pop_receipt=message.pop_receipt, client_request_id=request_id())

    async def release(self, message: Message, visibility_s: int) -> None:
        updated = await self.client.update_message(
            message.raw, pop_receipt=message.pop_receipt, visibility_timeout=visibility_s
        )
        message.pop_receipt = str(updated.pop_receipt)

    async def depth(self) -> int:
        return int((await self.client.get_queue_properties()).approximate_message_count or 0)

    async def poison(self, message: Message) -> None:
        if self.poison_client is None:
            raise RuntimeError("no poison queue configured")
        await self.poison_client.send_message(json.dumps(message.item))
        await self.delete(message)


class SimQueue:
    """An always-empty queue for a simulated clock: counts each call as the storage operation it stands for.

    A simulated day of a 1 s poller is 86,400 calls; against Azurite that would take longer than the run.
    The real-time idle run counts the same policies against the real Azurite at the client, as a cross-check.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    async def get(self, count: int, visibility_s: int) -> list[Message]:
        self.counts["queue.GetMessages"] += 1
        return []

    async def delete(self, message: Message) -> None:
        self.counts["queue.DeleteMessage"] += 1

    async def release(self, message: Message, visibility_s: int) -> None:
        self.counts["queue.UpdateMessage"] += 1

    async def depth(self) -> int:
        self.counts["queue.GetQueueMetadata"] += 1
        return 0

    async def poison(self, message: Message) -> None:
        self.counts["queue.PutMessage"] += 1
        self.counts["queue.DeleteMessage"] += 1


class Peer:
    """A polling consumer of one queue. Subclasses implement `loop`; `run` runs it until `stop`."""

    def __init__(self, queue: PeerQueue, handler: Handler, clock: Clock, *, seed: int | None = None) -> None:
        import random

        self.queue = queue
        self.handler = handler
        self.clock = clock
        self.random = random.Random(seed)
        self.until = math.inf  # the loop ends once the clock passes this (simulated runs); real runs are cancelled
        self.handled = 0

    def running(self) -> bool:
        return self.clock.now() < self.until

    async def run(self) -> None:
        """The polling loop, until `until` (or cancellation)."""
        raise NotImplementedError

    async def handle(self, message: Message) -> bool:
        """Run the handler on one message's item; False if it raised (logged)."""
        try:
            await self.handler([message.item])
        except Exception:
            log.exception("handler failed on message %s", message.id)
            return False
        self.handled += 1
        return True
