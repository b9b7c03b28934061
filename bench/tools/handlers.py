"""Handlers for benchmark runs, the same observation for the app (HANDLER=bench.tools.handlers:record) and the peers.

`observe` appends one line per call to the file named by BENCH_RECORD_FILE:
`<monotonic seconds> <batch tag> <items>`, with the tag taken from the items (`{"b": tag, ...}`).
Lines are written with one `os.write` on an O_APPEND descriptor, so processes can share a file.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome

RECORD_ENV = "BENCH_RECORD_FILE"
_OK = ItemOutcome.success()
_fd: int | None = None


def _descriptor() -> int | None:
    global _fd
    if _fd is None:
        path = os.environ.get(RECORD_ENV)
        if not path:
            return None
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return _fd


def observe(items: Sequence[Any]) -> None:
    """Record that these items were handled, now."""
    now = time.monotonic()
    fd = _descriptor()
    if fd is None:
        return
    tags = Counter(str(item.get("b", "-")) if isinstance(item, dict) else "-" for item in items)
    os.write(fd, "".join(f"{now:.6f} {tag} {n}\n" for tag, n in tags.items()).encode("ascii"))


async def record(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """The app's chunk handler for latency runs: observe, then succeed on every item."""
    observe(items)
    return ChunkResult([_OK] * len(items))


WAIT_MS_ENV = "BENCH_WAIT_MS_PER_CHUNK"


async def record_then_wait(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """`record`, then wait BENCH_WAIT_MS_PER_CHUNK as a call to a downstream service would (no CPU)."""
    observe(items)
    await asyncio.sleep(float(os.environ.get(WAIT_MS_ENV) or 0) / 1000)
    return ChunkResult([_OK] * len(items))


async def record_items(items: Sequence[Any]) -> None:
    """The peers' handler for latency runs."""
    observe(items)


async def noop_items(items: Sequence[Any]) -> None:
    """The peers' no-op handler for throughput runs."""
    return None


CPU_MS_ENV = "BENCH_CPU_MS_PER_ITEM"


_loops_per_ms: int | None = None


def _spin(n: int) -> int:
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def _burn(seconds: float) -> None:
    """Spend about this much CPU: a pure-Python loop (it holds the GIL, as real Python work does), sized once
    per process against this thread's CPU clock, so no clock is read while it runs."""
    global _loops_per_ms
    if _loops_per_ms is None:
        n, started = 200_000, time.thread_time()
        _spin(n)
        _loops_per_ms = max(1, int(n / max((time.thread_time() - started) * 1000, 1e-3)))
    _spin(int(seconds * 1000 * _loops_per_ms))


def cpu(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """A CPU-bound chunk handler for the scale-out bench: BENCH_CPU_MS_PER_ITEM of CPU per item (1 ms if unset),
    then one record line `<monotonic seconds> <pid> <items>`, so each host's share can be counted."""
    _burn(len(items) * float(os.environ.get(CPU_MS_ENV) or 1.0) / 1000)
    fd = _descriptor()
    if fd is not None:
        os.write(fd, f"{time.monotonic():.6f} {os.getpid()} {len(items)}\n".encode("ascii"))
    return ChunkResult([_OK] * len(items))
