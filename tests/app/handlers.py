"""Chunk handlers for tests, chosen through the HANDLER setting like any user's handler.

They record what they saw in module state (reset per test by the `handler_log` fixture), so tests can
count how often each item was handled.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome, Overloaded

calls: Counter[str] = Counter()
cancelled: list[str] = []
attempts_seen: list[int] = []
entered = asyncio.Event()
release = asyncio.Event()
on_chunk: list[Callable[[ChunkContext], Awaitable[None]]] = []


keys_seen: dict[str, list[str]] = {}
applied: Counter[str] = Counter()  # a downstream that applies each idempotency key once


def reset() -> None:
    keys_seen.clear()
    applied.clear()
    calls.clear()
    cancelled.clear()
    attempts_seen.clear()
    on_chunk.clear()
    started_at.clear()
    global entered, release, gate
    entered, release, gate = asyncio.Event(), asyncio.Event(), SyncGate()


OVERLOADED_CALLS = 3


async def overloaded_at_first(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """Its downstream answers 429 (Retry-After: 1) to the first OVERLOADED_CALLS calls, then takes everything;
    each call's attempt number is recorded."""
    attempts_seen.append(context.attempt)
    if len(attempts_seen) <= OVERLOADED_CALLS:
        raise Overloaded("downstream answered HTTP 429", retry_after_s=1)
    for item in items:
        calls[item_id(item)] += 1
    return ChunkResult([ItemOutcome.success() for _ in items])


def item_id(item: Any) -> str:
    return str(item["id"]) if isinstance(item, dict) else str(item)


async def record(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """Succeeds on every item, counting each one."""
    for item in items:
        calls[item_id(item)] += 1
    attempts_seen.append(context.attempt)
    for hook in list(on_chunk):
        await hook(context)
    return ChunkResult([ItemOutcome.success({"seen": item_id(i)}) for i in items])


async def keyed_downstream(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """Calls a downstream with each item's stable key as its idempotency key: the downstream applies a key once.
    Items whose id ends in 7 fail on their first attempt, after the downstream applied them (a lost answer)."""
    outcomes = []
    for index, item in enumerate(items):
        key = context.item_key(index)
        keys_seen.setdefault(item_id(item), []).append(key)
        applied[key] += 0 if key in applied else 1
        first = len(keys_seen[item_id(item)]) == 1
        failed = item_id(item).endswith("7") and first
        outcomes.append(ItemOutcome.failure("the answer was lost") if failed else ItemOutcome.success())
    return ChunkResult(outcomes)


def fail_sevens(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """A sync handler (runs on a thread): items whose id ends in 7 always fail, retryably."""
    outcomes = []
    for item in items:
        calls[item_id(item)] += 1
        if item_id(item).endswith("7"):
            outcomes.append(ItemOutcome.failure("sevens are unlucky"))
        else:
            outcomes.append(ItemOutcome.success())
    return ChunkResult(outcomes)


async def mixed(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """`perm-*` fail permanently, `trans-*` fail on the first attempt only, the rest succeed."""
    outcomes = []
    for item in items:
        name = item_id(item)
        calls[name] += 1
        if name.startswith("perm-"):
            outcomes.append(ItemOutcome.failure("permanently invalid", retryable=False))
        elif name.startswith("trans-") and context.attempt == 1:
            outcomes.append(ItemOutcome.failure("temporarily unavailable"))
        else:
            outcomes.append(ItemOutcome.success())
    return ChunkResult(outcomes)


async def mixed_once(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """`mixed`, with `trans-*` failing on their first call whatever the message's attempt (a test that holds a
    chunk back receives the others once)."""
    outcomes = []
    for item in items:
        name = item_id(item)
        calls[name] += 1
        if name.startswith("perm-"):
            outcomes.append(ItemOutcome.failure("permanently invalid", retryable=False))
        elif name.startswith("trans-") and calls[name] == 1:
            outcomes.append(ItemOutcome.failure("temporarily unavailable"))
        else:
            outcomes.append(ItemOutcome.success())
    return ChunkResult(outcomes)


async def blocking(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """Signals `entered`, then waits for `release` (a test cancels the drain meanwhile)."""
    for item in items:
        calls[item_id(item)] += 1
    entered.set()
    try:
        await release.wait()
    except asyncio.CancelledError:
        cancelled.append(f"{context.batch_id}/{context.chunk}")
        raise
    return ChunkResult([ItemOutcome.success() for _ in items])


def explodes(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    raise RuntimeError("the handler broke")


SLOW_SYNC_S = 1.0
started_at: list[tuple[str, float]] = []  # (batch id, time.time()) as each call of `slow_sync` began


def slow_sync(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """A sync handler (runs on a thread) that takes SLOW_SYNC_S a chunk, noting when each call began."""
    started_at.append((context.batch_id, time.time()))
    time.sleep(SLOW_SYNC_S)
    for item in items:
        calls[item_id(item)] += 1
    return ChunkResult([ItemOutcome.success() for _ in items])


GATE_WAIT_S = 120.0  # the longest a gated call blocks its thread (a failed test must not leave it running)


class SyncGate:
    """What `gated_sync` shares with its test (its calls run on threads of their own): the first call blocks its
    thread until `open` is set; the calls in flight are counted, and `events` notes each call's return."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.started: list[str] = []  # the batch of each call, as it began
        self.in_flight = 0
        self.most = 0  # the most calls in flight at once
        self.events: list[str] = []  # "call returned" as each call ends (a test adds its own events)
        self.on_start: Callable[[], None] | None = None  # called on the call's thread as it begins


gate = SyncGate()


def gated_sync(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """A sync handler whose first call blocks its thread until `gate.open` is set; succeeds on every item."""
    with gate.lock:
        gate.started.append(context.batch_id)
        first = len(gate.started) == 1
        gate.in_flight += 1
        gate.most = max(gate.most, gate.in_flight)
    if gate.on_start is not None:
        gate.on_start()
    try:
        if first:
            gate.open.wait(GATE_WAIT_S)
    finally:
        with gate.lock:
            gate.in_flight -= 1
            gate.events.append("call returned")
    return ChunkResult([ItemOutcome.success() for _ in items])
