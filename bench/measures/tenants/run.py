"""`python -m bench.tenants`: what tenant lanes cost, with 1, 100, 1,000 and 2,000 distinct tenants.

For each count, on one Azurite and the local function host (the real function_app.py): that many tenants each
submit 10 items (each makes its lane, a queue per partition), and the host drains them. After a settle (the
look chain ends at its first look that finds the queue empty: `BACKOFF_FLOOR_MS`, 60 s), the host's own storage
transactions (the API's reads left out: `/api/queues` counts both) are taken over an idle window; then one
tenant submits a backlog and the same is taken while it drains, with the drain's message rate and the wake
latency of a newcomer tenant (10 items over HTTP every second, each from a tenant never seen before: from its
202 to the handler's call). `GET /api/queues` and the operator's page refresh (its three GETs at once, as
dashboard.js makes them) are timed and counted at each count.

The fallback timer ticks every minute here (the bench's app settings), so the idle window counts its ticks (most
find the queue not due: its back-off grows to 30 minutes). At the default schedule (every 6 hours) every tick is
due, and one a day reads every lane: a day of due ticks is counted in this process (`due_day`) and spread
over the day.

    python -m bench.tenants [--tenants 1 100 1000 2000] [--idle-s 180] [--backlog 200000]
        -> bench/results/tenants.json (about 40 minutes)

Rerun it after the engine's lane changes land: they change what a lane costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.measures.fairness.run import observed
from bench.tools import machine, tenant_cost
from bench.tools.config import app_env, trigger_queue
from bench.tools.items import items, ndjson
from bench.tools.stack import Stack
from bench.tools.stats import summary
from shared import runtime
from shared.core.lanes import Lane
from shared.core.settings import Settings
from shared.intake.submit import submit
from shared.telemetry import metering
from shared.watch.fallback import poll

log = logging.getLogger("bench.measures.tenants.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"
COUNTS = (1, 100, 1000, 2000)
LANE_ITEMS = 10
SETTLE_S = 75.0
DEFAULT_TICK_S = 6 * 3600.0
PAGE_BATCHES = 10  # dashboard.js BATCHES


async def submit_lanes(env: dict[str, str], count: int, concurrency: int = 16) -> float:
    """Tenants t0000.. each submit LANE_ITEMS items, in this process through the app's own submit."""
    runtime.configure(Settings.from_env(env))
    gate = asyncio.Semaphore(concurrency)
    started = time.monotonic()

    async def one(i: int) -> None:
        async with gate:
            await submit(
                runtime.services(),
                ndjson(items("L", LANE_ITEMS, i * LANE_ITEMS)),
                content_type="application/x-ndjson",
                content_encoding=None,
                idempotency_key=None,
                lane=Lane("", f"t{i:04d}"),
            )

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await runtime.close()
    return time.monotonic() - started


async def submit_backlog(env: dict[str, str], count: int) -> None:
    """Tenant t0000's backlog, in this process. Its deadline is the default's 30 s stretched to 80 s (still
    within the host's STAGING_TTL_S): 200,000 items on these shared 2 cores beside 2,000 lanes took about 30 s."""
    runtime.configure(Settings.from_env(env | {"SUBMIT_DEADLINE_S": "80"}))
    try:
        await submit(
            runtime.services(),
            ndjson(items("D", count)),
            content_type="application/x-ndjson",
            content_encoding=None,
            idempotency_key=None,
            lane=Lane("", "t0000"),
        )
    finally:
        await runtime.close()


async def due_day(env: dict[str, str]) -> dict[str, dict[str, int]]:
    """A day of the default 6-hour schedule's ticks, each of which finds every partition due (the back-off never
    waits longer than 30 minutes), counted in this process: the day's one thorough tick (every lane's depth
    read) and one of its three others (what a look of the chain reads). `{"thorough": ..., "light": ...}`."""
    runtime.configure(Settings.from_env(env))
    now_ms = int(time.time() * 1000)
    found: dict[str, dict[str, int]] = {}
    try:
        for name, later_s in (("thorough", 24 * 3600.0), ("light", 24 * 3600.0 + DEFAULT_TICK_S)):
            at_ms = now_ms + round(later_s * 1000)
            with metering.tally() as tally:
                await poll(runtime.services(), clock_ms=lambda at_ms=at_ms: at_ms)
            found[name] = dict(sorted(tally.items()))
    finally:
        await runtime.close()
    return found


def per_hour_at_default(day: dict[str, dict[str, int]]) -> float:
    """A day's ticks at the default schedule: one thorough and the rest light, per hour."""
    ticks = round(24 * 3600 / DEFAULT_TICK_S)
    return (sum(day["thorough"].values()) + (ticks - 1) * sum(day["light"].values())) / 24


async def wait_items(record: Path, tag: str, count: int, timeout_s: float) -> list[float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = [(t, k) for t, g, k in observed(record) if g == tag]
        if sum(k for _, k in rows) >= count:
            return [t for t, _ in rows]
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{tag}: {count} items not handled in {timeout_s:.0f} s")


class Host:
    """The host's HTTP API: its storage counts and the reads of the operator."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def counts(self) -> tuple[dict[str, int], dict[str, int], float]:
        """(the app's own work, the API's reads, seconds the GET took) from `GET /api/queues`."""
        started = time.monotonic()
        async with self.session.get("/api/queues") as r:
            body = await r.json()
        seconds = time.monotonic() - started
        found = body["storage_transactions"]
        totals, reads = found["by_operation"], found["reads"]["by_operation"]
        return tenant_cost.work(totals, reads), reads, seconds

    async def get(self, path: str) -> float:
        started = time.monotonic()
        async with self.session.get(path) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"GET {path} answered {r.status}")
        return time.monotonic() - started


async def settle(host: Host, every_s: float = 15.0, quiet: int = 10, limit_s: float = 900.0) -> float:
    """Wait until the host's own work is quiet (at most `quiet` transactions in `every_s`): the drain executions
    the lanes' doorbells started are over. Seconds waited."""
    started = time.monotonic()
    last, _, _ = await host.counts()
    while time.monotonic() - started < limit_s:
        await asyncio.sleep(every_s)
        now, _, _ = await host.counts()
        if sum(tenant_cost.delta(last, now).values()) <= quiet:
            break
        last = now
    return time.monotonic() - started


async def operator_reads(host: Host) -> dict[str, Any]:
    """`GET /api/queues` three times (time and transactions of each), then the page refresh three times."""
    _, reads0, _ = await host.counts()
    times, costs, last = [], [], reads0
    for _ in range(3):
        _, reads, seconds = await host.counts()
        times.append(seconds)
        costs.append(sum(tenant_cost.delta(last, reads).values()))
        last = reads
    page_times = []
    for _ in range(3):
        started = time.monotonic()
        await asyncio.gather(
            host.get("/api/queues"), host.get(f"/api/batches?limit={PAGE_BATCHES}"), host.get("/api/poison")
        )
        page_times.append(time.monotonic() - started)
    _, reads, _ = await host.counts()
    page = (sum(tenant_cost.delta(last, reads).values()) - statistics.median(costs)) / 3
    return {
        "queues_seconds": statistics.median(times),
        "queues_transactions": statistics.median(costs),
        "page_seconds": statistics.median(page_times),
        "page_transactions": page,
    }


async def newcomers(host: Host, record: Path, stop: asyncio.Event, every_s: float, label: str) -> list[float]:
    """A new tenant every `every_s` submits 10 items over HTTP until `stop`: each one's 202 to handler (ms)."""
    acks: dict[str, float] = {}
    n = 0
    while not stop.is_set():
        tag = f"N{n}"
        headers = {"Content-Type": "application/x-ndjson", "X-Tenant": f"new{label}x{n}"}
        async with host.session.post("/api/batches", data=ndjson(items(tag, LANE_ITEMS)), headers=headers) as r:
            await r.read()
            if r.status == 202:
                acks[tag] = time.monotonic()
        n += 1
        await asyncio.sleep(every_s)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = {g: t for t, g, _ in observed(record) if g.startswith("N")}
        if set(acks) <= set(seen):
            break
        await asyncio.sleep(0.2)
    return [(seen[tag] - at) * 1000 for tag, at in acks.items() if tag in seen]


async def one_count(stack: Stack, token: str, count: int, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    role = f"ten{count}"
    record = run_dir / f"record-{role}.log"
    env = app_env(
        stack.storage,
        stack.servicebus,
        role,
        token,
        HANDLER="bench.tools.handlers:record",
        MAX_TENANTS=str(max(args.tenants) + 10),
    )
    process, port = stack.host(role, env | {"BENCH_RECORD_FILE": str(record)})
    try:
        lanes_s = await submit_lanes(env, count)
        await wait_items(record, "L", count * LANE_ITEMS, 600)
        log.info("%d tenants: lanes made in %.1f s and drained; settling %.0f s", count, lanes_s, SETTLE_S)
        await asyncio.sleep(SETTLE_S)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            host = Host(session)
            settled_s = await settle(host)
            idle_reads = await operator_reads(host)
            before, _, _ = await host.counts()
            started = time.monotonic()
            await asyncio.sleep(args.idle_s)
            after, _, _ = await host.counts()
            idle_s = time.monotonic() - started
            idle = tenant_cost.delta(before, after)
            log.info("%d tenants idle for %.0f s: %s", count, idle_s, idle)
            day = await due_day(env)
            log.info("%d tenants: a day's due ticks cost %s", count, day)
            before, _, _ = await host.counts()
            started = time.monotonic()
            stop = asyncio.Event()
            arrivals = asyncio.create_task(newcomers(host, record, stop, args.newcomer_every_s, str(count)))
            await submit_backlog(env, args.backlog)
            submitted_s = time.monotonic() - started
            drained = await wait_items(record, "D", args.backlog, 900)
            busy_reads = await operator_reads(host)
            stop.set()
            waits = await arrivals
            after, _, _ = await host.counts()
            busy_s = time.monotonic() - started
        drain_s = max(drained) - min(drained)
        busy = tenant_cost.delta(before, after)
    finally:
        stack.stop(process)
    idle_total = sum(idle.values())
    result = {
        "tenants": count,
        "lanes_submit_s": round(lanes_s, 1),
        "settled_after_s": round(SETTLE_S + settled_s, 1),
        "idle": {
            "seconds": round(idle_s, 1),
            "transactions": idle,
            "per_hour": tenant_cost.per_hour(idle_total, idle_s),
            "due_day": day,
            "per_hour_at_default_schedule": per_hour_at_default(day),
        },
        "draining": {
            "backlog_items": args.backlog,
            "submit_s": round(submitted_s, 1),
            "seconds": round(busy_s, 1),
            "drain_s": round(drain_s, 2),
            "messages_per_s": round(args.backlog / 250 / drain_s, 1) if drain_s else None,
            "items_per_s": round(args.backlog / drain_s, 0) if drain_s else None,
            "transactions": busy,
            "per_hour": tenant_cost.per_hour(sum(busy.values()), busy_s),
            "newcomer_wake_ms": summary(waits),
        },
        "operator_idle": idle_reads,
        "operator_draining": busy_reads,
    }
    log.info("%d tenants: %s", count, json.dumps(result))
    return result


async def measure(args: argparse.Namespace, run_dir: Path) -> list[dict[str, Any]]:
    token = uuid.uuid4().hex[:8]
    stack = Stack(run_dir / "stack", [trigger_queue(f"ten{n}", token) for n in args.tenants])
    try:
        stack.start()
        return [await one_count(stack, token, n, args, run_dir) for n in args.tenants]
    finally:
        stack.stop_all()


def verdicts(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    idle = {r["tenants"]: r["idle"]["per_hour_at_default_schedule"] for r in found}
    idle_tick = {r["tenants"]: r["idle"]["per_hour"] for r in found}
    busy = {r["tenants"]: r["draining"]["per_hour"] for r in found}
    return [
        tenant_cost.verdict("while the app is idle (default 6-hour timer)", idle),
        tenant_cost.verdict("while the app is idle (a timer tick a minute, as measured)", idle_tick),
        tenant_cost.verdict("while another tenant drains", busy),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tenants", description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=COUNTS)
    parser.add_argument("--idle-s", type=float, default=180.0)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--newcomer-every-s", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=RESULTS / "tenants.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"tenants-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with machine.LoadSampler() as load:
        found = asyncio.run(measure(args, run_dir))
    doc = {
        "command": "make bench-tenants",
        "duration_s": round(time.monotonic() - started, 1),
        "machine": machine.details() | {"load_during_run": load.summary()},
        "lane_target_per_hour": tenant_cost.LANE_TARGET_PER_HOUR,
        "counts": found,
        "targets": verdicts(found),
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    log.info("done in %.0f s", doc["duration_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
