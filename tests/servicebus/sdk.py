"""Helpers for driving the real SDK in tests (no fakes: thin conveniences over sync receivers and senders)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from azure.servicebus import ServiceBusReceiveMode, ServiceBusReceiver

WAIT_S = 5.0  # the most a message that should arrive may take
QUIET_S = 0.5  # how long to watch for a message that should not arrive


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def texts(messages: list[Any]) -> list[str]:
    return [str(m) for m in messages]


@contextmanager
def opened(*handlers: Any) -> Iterator[tuple[Any, ...]]:
    """Open SDK senders/receivers together and close them together.

    Each open and each close costs the SDK about half a second of client-side waiting; doing them side by side
    keeps the suite fast without changing what is tested.
    """
    with ThreadPoolExecutor(max_workers=len(handlers)) as pool:
        try:
            list(pool.map(lambda handler: handler.__enter__(), handlers))
            yield handlers
        finally:
            list(pool.map(lambda handler: handler.close(), handlers))


def take(receiver: ServiceBusReceiver, count: int, *, wait_s: float = WAIT_S, complete: bool = True) -> list[Any]:
    """Up to `count` messages within `wait_s` seconds, completed unless told otherwise."""
    got: list[Any] = []
    deadline = time.monotonic() + wait_s
    while len(got) < count and time.monotonic() < deadline:
        wait = max(0.1, min(1.0, deadline - time.monotonic()))
        got += receiver.receive_messages(max_message_count=count - len(got), max_wait_time=wait)
    if complete and receiver._receive_mode == ServiceBusReceiveMode.PEEK_LOCK:
        for message in got:
            receiver.complete_message(message)
    return got


def nothing_arrives(receiver: ServiceBusReceiver) -> bool:
    return receiver.receive_messages(max_message_count=1, max_wait_time=QUIET_S) == []
