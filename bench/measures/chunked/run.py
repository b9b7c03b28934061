"""`python -m bench.chunked`: peer (a'), the built-in queue trigger fed the app's own 250-item chunks, beside (a)
and the app, in one run on one Azurite: what batching by hand gives, and what the push drain gives on top.

- Throughput and transactions: the app's drain of ITEMS items (submitted through its own `submit`, drained by
  one `Drainer` in a fresh process, as in section 2 of BENCHMARKS.md); (a) on PEER_ITEMS items, one message
  each; (a') on the same ITEMS items as the app, cut into the app's chunk messages (`bench.peers.chunked`).
- The app all in: the same backlog submitted over HTTP to the local function host (the real function_app.py)
  and drained there, its storage transactions counted by the host itself (`/api/queues`, the API's reads left
  out) from before the submit until the look chain has ended: the submit, the drain, the look chain's looks,
  the scale checks and the batch's completion. The fallback timer is at its default (every 6 hours), so no tick
  falls in the window (the ticks are the idle cost, section 4).
- Wake latency: (a) and (a') side by side, LANES queues each, the same submissions at the same moments after
  idle gaps of 20-180 s (`bench.tools.schedule`), from the last message stored to the handler's call.
- Idle: (a')'s loop on an always-empty queue for a simulated day (`bench.peers.base.SimQueue`), as (a)'s.

    python -m bench.chunked [--items 200000] [--lanes 4] [--per-lane 3] -> bench/results/chunked.json (about 9 min)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.measures.latency.run import Acks, latencies, wait_done
from bench.measures.throughput.run import app_throughput, drain_peer, merged, peer_throughput, per_thousand
from bench.peers.base import SimQueue
from bench.peers.builtin_trigger import BuiltinQueueTrigger
from bench.peers.chunked import BuiltinChunkTrigger, chunk_texts
from bench.tools import enqueue, machine, tenant_cost
from bench.tools.clock import SimClock
from bench.tools.config import app_env, trigger_queue
from bench.tools.handlers import noop_items
from bench.tools.items import items, message_text, ndjson
from bench.tools.schedule import submissions
from bench.tools.stack import Stack
from shared.telemetry.metering import TransactionCounter

log = logging.getLogger("bench.measures.chunked.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"
ITEMS = 200_000
PEER_ITEMS = 3_000
DAY_S = 86_400.0
LATENCY_ITEMS = 100
GAPS_S = (20.0, 180.0)


async def chunked_throughput(storage: str, token: str, count: int, run_dir: Path) -> dict[str, Any]:
    """(a'): the app's chunk messages of `count` items enqueued (counted), then drained in a fresh process."""
    name = f"chk-a2-{token}"
    counter = TransactionCounter()
    producer = enqueue.client(storage, name, counter)
    await enqueue.create(producer)
    texts = chunk_texts(items("tput", count))
    started = time.monotonic()
    await enqueue.put_all(producer, texts)
    enqueue_s = time.monotonic() - started
    await producer.close()
    drained = drain_peer(storage, "a2", name, len(texts), run_dir / "drain-peer-a2")
    total = merged(counter.totals(), drained["transactions"])
    seconds = drained["seconds"]
    return {
        "items": count,
        "messages": len(texts),
        "message_bytes": max(len(t) for t in texts),
        "enqueue_seconds": enqueue_s,
        "drain_seconds": seconds,
        "messages_ok": drained["items"],
        "items_per_s": count * drained["items"] / len(texts) / seconds,
        "messages_per_s": drained["items"] / seconds,
        "cpu_seconds": drained.get("cpu_seconds"),
        "peak_rss_mb": drained["peak_rss_mb"],
        "transactions": total,
        "transactions_per_1000": per_thousand(total, count),
    }


async def host_counts(session: aiohttp.ClientSession) -> tuple[dict[str, int], bool]:
    """The host's own storage work so far (the API's reads left out), and whether a look chain is armed."""
    async with session.get("/api/queues") as r:
        body = await r.json()
    found = body["storage_transactions"]
    armed = any(p["look_chain"]["armed"] for p in body["partitions"])
    return tenant_cost.work(found["by_operation"], found["reads"]["by_operation"]), armed


async def app_all_in(stack: Stack, token: str, count: int, run_dir: Path) -> dict[str, Any]:
    record = run_dir / "record-chkhost.log"
    env = app_env(stack.storage, stack.servicebus, "chkhost", token, HANDLER="bench.tools.handlers:record")
    env |= {"FALLBACK_SCHEDULE": "0 0 */6 * * *", "BENCH_RECORD_FILE": str(record)}
    process, port = stack.host("chkhost", env)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            before, _ = await host_counts(session)
            started = time.monotonic()
            body = ndjson(items("H", count))
            async with session.post("/api/batches", data=body, headers={"Content-Type": "application/x-ndjson"}) as r:
                answer = await r.json()
                if r.status != 202:
                    raise RuntimeError(f"submit answered {r.status}: {answer}")
            acked = time.monotonic()
            await wait_done(record, "H", count, 600)
            drained = time.monotonic()
            while True:  # until the look chain has ended (its first look that finds the queue empty)
                after, armed = await host_counts(session)
                if not armed or time.monotonic() - drained > 240:
                    break
                await asyncio.sleep(2)
            ended = time.monotonic()
    finally:
        stack.stop(process)
    spent = tenant_cost.delta(before, after)
    return {
        "items": count,
        "submit_seconds": acked - started,
        "drained_after_ack_seconds": drained - acked,
        "chain_ended_after_drain_seconds": ended - drained,
        "chain_armed_at_end": armed,
        "transactions": dict(sorted(spent.items())),
        "transactions_per_1000": per_thousand(spent, count),
    }


async def wake_latency(stack: Stack, token: str, lanes: int, per_lane: int, run_dir: Path) -> dict[str, Any]:
    """(a) and (a'), `lanes` queues each, the same submissions at the same moments."""
    events = submissions(lanes, per_lane, GAPS_S, random.Random(20240601))
    records = {kind: run_dir / f"record-lat-{kind}.log" for kind in ("a", "a2")}
    clients, procs = {}, {}
    for kind in records:
        names = [f"chklat-{kind}-{lane}-{token}" for lane in range(lanes)]
        clients[kind] = [enqueue.client(stack.storage, n) for n in names]
        for c in clients[kind]:
            await enqueue.create(c)
        procs[kind] = stack.peer(kind, names, run_dir / f"serve-{kind}.json", records[kind])
    acks = {kind: Acks() for kind in records}
    started = time.monotonic()
    log.info("latency: %d submissions over about %.0f s", len(events), events[-1].at_s if events else 0)

    async def put(kind: str, client: Any, tag: str) -> None:
        batch = items(tag, LATENCY_ITEMS)
        await enqueue.put_all(client, chunk_texts(batch) if kind == "a2" else [message_text(i) for i in batch])
        acks[kind].at[tag], acks[kind].size[tag] = time.monotonic(), LATENCY_ITEMS

    for event in events:
        await asyncio.sleep(max(0.0, started + event.at_s - time.monotonic()))
        await asyncio.gather(*(put(k, clients[k][event.lane], f"{k}-{event.index}") for k in records))
    for kind, record in records.items():
        for tag, size in acks[kind].size.items():
            await wait_done(record, tag, size, 120)
    for kind in records:
        stack.stop(procs[kind])
        for c in clients[kind]:
            await c.close()
    return {"batch_items": LATENCY_ITEMS, "systems": {k: latencies(records[k], acks[k]) for k in records}}


async def idle_day() -> dict[str, dict[str, int]]:
    """A simulated idle day of (a)'s loop and (a')'s (the same loop: the counts must agree)."""
    out = {}
    for kind, cls in (("a", BuiltinQueueTrigger), ("a2", BuiltinChunkTrigger)):
        queue = SimQueue()
        peer = cls(queue, noop_items, SimClock(), seed=1)
        peer.until = DAY_S
        await peer.run()
        out[kind] = dict(sorted(queue.counts.items()))
    return out


async def measure(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    stack = Stack(run_dir / "stack", [trigger_queue(role, token) for role in ("tput", "chkhost")])
    out: dict[str, Any] = {"idle_day": await idle_day()}
    try:
        stack.start()
        log.info("the app: %d items", args.items)
        out["app"] = await app_throughput(stack.storage, stack.servicebus, token, args.items, run_dir)
        log.info("(a'): %d items in chunks", args.items)
        out["a2"] = await chunked_throughput(stack.storage, token, args.items, run_dir)
        log.info("(a): %d items", args.peer_items)
        out["a"] = await peer_throughput(stack.storage, token, "a", args.peer_items, run_dir)
        log.info("the app all in, through the host: %d items", args.items)
        out["app_all_in"] = await app_all_in(stack, token, args.items, run_dir)
        if args.lanes:
            out["latency"] = await wake_latency(stack, token, args.lanes, args.per_lane, run_dir)
    finally:
        stack.stop_all()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chunked", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--peer-items", type=int, default=PEER_ITEMS)
    parser.add_argument("--lanes", type=int, default=4, help="latency queues per peer (0: no latency phase)")
    parser.add_argument("--per-lane", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS / "chunked.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"chunked-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    at_start = machine.details()
    with machine.LoadSampler() as load:
        found = asyncio.run(measure(args, run_dir))
    doc = {
        "command": "make bench-chunked",
        "duration_s": round(time.monotonic() - started, 1),
        "machine": machine.details() | {"commit_at_start": at_start["commit"], "load_during_run": load.summary()},
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        **found,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    log.info("done in %.0f s", doc["duration_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
