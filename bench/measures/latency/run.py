"""Wake latency after idle, and the real-time idle run, side by side in one run.

Every system gets the same submissions at the same moments: `lanes` independent instances of each peer
(one queue each) and the app as deployed locally (the function host running function_app.py, Service Bus
trigger and all). A submission is acknowledged when the app answers 202, or when the last of a peer's
messages is stored; both are observed by the same handler (`bench.tools.handlers`) appending monotonic timestamps
to a file. Meanwhile one more instance of each peer, and a second host, sit on queues that never get work:
the real-time idle run, counted at the client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from bench.peers import PEERS
from bench.tools import enqueue
from bench.tools.config import BenchConfig, app_env
from bench.tools.items import items, message_text, ndjson
from bench.tools.schedule import Event, observations, submissions
from bench.tools.stack import Stack
from bench.tools.stats import summary

log = logging.getLogger(__name__)

APP_WAIT_S = 10.0
FINAL_WAIT_S = 120.0  # the slowest peer wakes within a minute; allow for its processing


@dataclass
class Acks:
    """Monotonic acknowledgement time per batch tag, and how many items each holds."""

    at: dict[str, float] = field(default_factory=dict)
    size: dict[str, int] = field(default_factory=dict)


def lane_queue(kind: str, lane: int, token: str) -> str:
    return f"lat-{kind}-{lane}-{token}"


def idle_queue(kind: str, token: str) -> str:
    return f"idle-{kind}-{token}"


async def submit_app(session: aiohttp.ClientSession, tag: str, count: int, acks: Acks) -> None:
    body = ndjson(items(tag, count))
    async with session.post("/api/batches", data=body, headers={"Content-Type": "application/x-ndjson"}) as r:
        answer = await r.json()
        acks.at[tag] = time.monotonic()
        if r.status != 202:
            raise RuntimeError(f"submit answered {r.status}: {answer}")
    acks.size[tag] = count


async def submit_peer(client: Any, tag: str, count: int, acks: Acks) -> None:
    await enqueue.put_all(client, [message_text(i) for i in items(tag, count)])
    acks.at[tag] = time.monotonic()
    acks.size[tag] = count


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def wait_done(record: Path, tag: str, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tag in observations(read_lines(record), {tag: count}):
            return
        await asyncio.sleep(0.05)
    log.warning("batch %s not completed within %.0f s", tag, timeout_s)


async def queue_totals(session: aiohttp.ClientSession) -> dict[str, int]:
    async with session.get("/api/queues") as r:
        return dict((await r.json())["storage_transactions"]["by_operation"])


async def app_idle_counts(port: int) -> dict[str, int]:
    """The idle host's storage transactions since start, less what reading them cost (read twice)."""
    async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as session:
        first = await queue_totals(session)
        second = await queue_totals(session)
    cost = {op: second.get(op, 0) - first.get(op, 0) for op in second}
    return {op: n - cost.get(op, 0) for op, n in first.items() if n - cost.get(op, 0) > 0}


STAMP = re.compile(
    r"^\[(\d{4}-\d\d-\d\dT[\d:.]+)Z\] (Executing|Executed) 'Functions\.(\w+)'.*?(?:Duration=(\d+)ms)?\)?$"
)


def host_timeline(lines: list[str]) -> dict[str, Any]:
    """From the host's console: how long each `drain` ran, and how long after `submit_batch` ended it started
    (Service Bus delivery through the local host). The trigger is published inside `submit_batch`, so a
    drain can start before the submit's own `Executed` line: that gap is negative."""
    gaps, durations = [], []
    submitting = False
    submitted: datetime | None = None
    early: datetime | None = None  # a drain that started while the submit was still finishing
    for line in lines:
        match = STAMP.match(line.strip())
        if match is None:
            continue
        at = datetime.fromisoformat(match[1])
        if match[3] == "submit_batch":
            submitting = match[2] == "Executing"
            if not submitting:
                submitted = at
                if early is not None:
                    gaps.append((early - at).total_seconds())
                    submitted = early = None
        elif match[2] == "Executing" and match[3] == "drain":
            if submitting and early is None:
                early = at
            elif submitted is not None:
                gaps.append((at - submitted).total_seconds())
                submitted = None
        elif match[2] == "Executed" and match[3] == "drain" and match[4]:
            durations.append(int(match[4]) / 1000)
    return {"delivery_gap_s": summary(gaps), "drain_duration_s": summary(durations)}


def latencies(record: Path, acks: Acks) -> dict[str, Any]:
    seen = observations(read_lines(record), acks.size)
    first = [seen[t].first_s - acks.at[t] for t in acks.at if t in seen]
    done = [seen[t].done_s - acks.at[t] for t in acks.at if t in seen]
    return {
        "submissions": len(acks.at),
        "completed": len(seen),
        "first_item_s": summary(first),
        "batch_done_s": summary(done),
        "first_item_samples_s": first,
        "batch_done_samples_s": done,
    }


async def run(stack: Stack, cfg: BenchConfig, token: str, run_dir: Path) -> dict[str, Any]:
    events = submissions(cfg.latency_lanes, cfg.latency_per_lane, cfg.latency_gap_s, random.Random(cfg.seed))
    records = {kind: run_dir / f"record-{kind}.log" for kind in ("app", *PEERS)}
    app_proc, app_port = stack.host(
        "bench-latency",
        app_env(stack.storage, stack.servicebus, "latency", token, HANDLER="bench.tools.handlers:record")
        | {"BENCH_RECORD_FILE": str(records["app"])},
    )
    idle_proc, idle_port = stack.host(
        "bench-idle", app_env(stack.storage, stack.servicebus, "idle", token, HANDLER="shared.handlers.noop:handle")
    )
    idle_started_wall, idle_started = time.time(), time.monotonic()
    clients: dict[str, list[Any]] = {}
    peers = {}
    for kind in PEERS:
        names = [lane_queue(kind, lane, token) for lane in range(cfg.latency_lanes)] + [idle_queue(kind, token)]
        clients[kind] = [enqueue.client(stack.storage, n) for n in names[:-1]]
        for name in names:
            async with enqueue.client(stack.storage, name) as c:
                await enqueue.create(c)
        peers[kind] = stack.peer(kind, names, run_dir / f"serve-{kind}.json", records[kind])
    acks = {kind: Acks() for kind in records}
    started = time.monotonic()
    log.info("latency: %d submissions over about %.0f s", len(events), events[-1].at_s if events else 0)
    async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{app_port}") as session:
        for event in events:
            await asyncio.sleep(max(0.0, started + event.at_s - time.monotonic()))
            await submit_event(session, event, clients, acks, records, cfg.latency_batch_items)
        for kind, record in records.items():
            for tag, size in acks[kind].size.items():
                await wait_done(record, tag, size, FINAL_WAIT_S)
    for kind_clients in clients.values():
        for c in kind_clients:
            await c.close()
    remaining = idle_started + cfg.idle_real_s - time.monotonic()
    if remaining > 0:
        log.info("idle run: %.0f s to go", remaining)
        await asyncio.sleep(remaining)
    app_idle = await app_idle_counts(idle_port)
    app_idle_s = time.monotonic() - idle_started
    for process in peers.values():
        stack.stop(process)
    stack.stop(app_proc)
    stack.stop(idle_proc)
    timeline = host_timeline(read_lines(app_proc.log_path))
    serve = {kind: json.loads((run_dir / f"serve-{kind}.json").read_text()) for kind in PEERS}
    return {
        "events": [{"index": e.index, "lane": e.lane, "at_s": e.at_s} for e in events],
        "batch_items": cfg.latency_batch_items,
        "systems": {kind: latencies(records[kind], acks[kind]) for kind in records},
        "app_host_timeline": timeline,
        "idle_real": {
            "app": {"seconds": app_idle_s, "first_tick_s": 60 - idle_started_wall % 60, "transactions": app_idle},
            **{
                kind: {
                    "seconds": serve[kind]["seconds"],
                    "transactions": serve[kind]["queues"][idle_queue(kind, token)],
                }
                for kind in PEERS
            },
        },
    }


async def submit_event(
    session: aiohttp.ClientSession,
    event: Event,
    clients: dict[str, list[Any]],
    acks: dict[str, Acks],
    records: dict[str, Path],
    count: int,
) -> None:
    """The app first, alone, until its batch is done; then every peer's lane at once."""
    tag = f"app-{event.index}"
    await submit_app(session, tag, count, acks["app"])
    await wait_done(records["app"], tag, count, APP_WAIT_S)
    await asyncio.gather(
        *(submit_peer(clients[kind][event.lane], f"{kind}-{event.index}", count, acks[kind]) for kind in clients)
    )
