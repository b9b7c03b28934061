"""A storage queue message a drainer holds, and the clocks the drain engine reads."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from azure.storage.queue import QueueMessage
from azure.storage.queue.aio import QueueClient


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def epoch_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Received:
    """A received message; `pop_receipt` changes whenever its visibility is extended, so every operation
    that uses it holds `lock`."""

    message: QueueMessage
    queue: QueueClient  # the lane it was received from: every operation on it goes there
    received_at: float
    visible_at_ms: int = 0  # when it reappears if we do nothing more (wall clock, ms)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def pop_receipt(self) -> str:
        return str(self.message.pop_receipt)

    @property
    def dequeued(self) -> int:
        """How many times the message was received, this delivery included."""
        return int(self.message.dequeue_count or 1)
