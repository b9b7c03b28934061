"""Run one peer in its own process, against real queues on Azurite, counting transactions at the client.

    python -m bench.peers.process serve --peer a --queues q1,q2 --summary out.json
        Poll every queue (one peer instance each) until SIGTERM; then write each queue's transaction
        counts by operation to the summary file. Items are observed with `bench.tools.handlers.record_items`.
    python -m bench.peers.process drain --peer a --queues q --items N [--window-s S] --summary out.json
        Drain N items with the no-op handler, or as many as it can in S seconds (a window on a backlog too
        deep to drain in full); write items, seconds, counts and peak RSS.

The storage connection string comes from BENCH_STORAGE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peers import CHUNKED, PEERS
from bench.peers.base import Handler, Message, Peer, StorageQueue
from bench.peers.chunked import chunk_items
from bench.tools import enqueue
from bench.tools.clock import RealClock
from bench.tools.handlers import noop_items, record_items
from bench.tools.memory import cpu_seconds, peak_rss_mb
from shared.telemetry.metering import TransactionCounter

log = logging.getLogger(__name__)

STORAGE_ENV = "BENCH_STORAGE"


class CountingQueue(StorageQueue):
    """A storage queue that also knows how many of its messages were deleted (drain completion)."""

    deleted = 0
    target = 0
    drained: asyncio.Event | None = None

    async def delete(self, message: Message) -> None:
        await super().delete(message)
        self.deleted += 1
        if self.drained is not None and self.deleted >= self.target:
            self.drained.set()


def write_summary(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=1))


def open_queue(connection: str, name: str, counter: TransactionCounter, kind: str = "a") -> CountingQueue:
    poison = enqueue.client(connection, f"{name}-poison", counter)
    decode = chunk_items if kind in CHUNKED else json.loads
    return CountingQueue(enqueue.client(connection, name, counter), poison, decode)


def peer_for(kind: str, queue: CountingQueue, handler: Handler, seed: int) -> Peer:
    return (PEERS | CHUNKED)[kind](queue, handler, RealClock(), seed=seed)


async def serve(kind: str, names: Sequence[str], summary: Path) -> None:
    connection = os.environ[STORAGE_ENV]
    counters = {name: TransactionCounter() for name in names}
    queues = {name: open_queue(connection, name, counters[name], kind) for name in names}
    peers = [peer_for(kind, queues[name], record_items, seed=i) for i, name in enumerate(names)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    started = time.monotonic()
    tasks = [asyncio.create_task(p.run(), name=f"peer {kind} {n}") for p, n in zip(peers, names, strict=True)]
    log.info("peer %s polling %d queue(s)", kind, len(names))
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    document = {
        "peer": kind,
        "seconds": time.monotonic() - started,
        "queues": {name: counters[name].totals() for name in names},
        "handled": {name: p.handled for name, p in zip(names, peers, strict=True)},
    }
    write_summary(summary, document)
    await close_all(queues.values())


async def drain(kind: str, name: str, items: int, summary: Path, window_s: float | None = None) -> None:
    connection = os.environ[STORAGE_ENV]
    counter = TransactionCounter()
    queue = open_queue(connection, name, counter, kind)
    peer = peer_for(kind, queue, noop_items, seed=0)
    queue.target, queue.drained = items, asyncio.Event()
    started, cpu_started = time.monotonic(), cpu_seconds()
    task = asyncio.create_task(peer.run())
    waiter = asyncio.create_task(queue.drained.wait())
    await asyncio.wait({task, waiter}, timeout=window_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu_started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    document: dict[str, Any] = {
        "peer": kind,
        "items": queue.deleted,  # messages: one item each, or one chunk each for a chunked peer
        "seconds": seconds,
        "items_per_s": queue.deleted / seconds if seconds else None,
        "cpu_seconds": cpu,  # this process's CPU from its first receive to its last delete, as the app's drain
        "transactions": counter.totals(),
        "peak_rss_mb": peak_rss_mb(),
    }
    write_summary(summary, document)
    await close_all([queue])


async def close_all(queues: Any) -> None:
    for queue in queues:
        await queue.client.close()
        if queue.poison_client is not None:
            await queue.poison_client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.process")
    parser.add_argument("mode", choices=["serve", "drain"])
    parser.add_argument("--peer", choices=sorted(PEERS | CHUNKED), required=True)
    parser.add_argument("--queues", required=True, help="comma-separated queue names")
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--window-s", type=float, help="drain mode: stop after this many seconds")
    parser.add_argument("--summary", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    names = [n for n in args.queues.split(",") if n]
    if args.mode == "serve":
        asyncio.run(serve(args.peer, names, args.summary))
    else:
        asyncio.run(drain(args.peer, names[0], args.items, args.summary, args.window_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
