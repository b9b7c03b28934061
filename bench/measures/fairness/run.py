"""`python -m bench.fairness`: is the drain fair to a small tenant, and does it hold the handler to its limits?

Fairness: tenant A's 1,000,000-item batch drains in the local host (the real function_app.py, Service Bus
trigger and all; a recording handler that returns at once, or waits 200 ms per chunk as a downstream call
would, HANDLER_WAITS_MS); while it drains, tenant B submits 10 items every PROBE_EVERY_S
over HTTP. B's latency is from its 202 to the handler's call on its items (the result record follows in the
same settle; also reported from the request's start); A's throughput is its items over its drain. Each handler
runs twice: with lanes (A and B name their tenants) and without (both in the shared lane: the app before
lanes, the control).

Handler limits: a 60,000-item backlog drained with HANDLER_ITEMS_PER_S set, by 1, 2 and 4 drainers (one host
running that many drain executions at once: `maxConcurrentCalls`, recruited by scale-out events); the
observed handler rate against the limit.

    python -m bench.fairness [--items N] [--limit R] [--spin 2]   -> bench/results/fairness.json

--spin N runs N CPU-bound processes beside the whole run (started and stopped by the bench by their pids), so a
loaded machine is a load anyone can reproduce.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import re
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.measures.fairness import beside
from bench.tools import azurite_probe, machine
from bench.tools.azurite_probe import AzuriteProbe
from bench.tools.config import app_env, trigger_queue
from bench.tools.handlers import WAIT_MS_ENV
from bench.tools.items import items, ndjson
from bench.tools.spinners import spinning
from bench.tools.stack import Stack
from bench.tools.stats import summary
from devstack.host import ROOT
from shared import runtime
from shared.core.lanes import Lane
from shared.core.settings import Settings
from shared.intake.submit import submit

log = logging.getLogger("bench.measures.fairness.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"
PROBE_ITEMS = 10
PROBE_EVERY_S = 0.25
WAKE_TARGET_P99_MS = 250.0  # the wake-latency target on an idle app (issue 17 holds B to it)
RATE_ITEMS = 60_000
DRAINERS = (1, 2, 4)
# The handler: no-op (the drain machinery alone keeps the host's one event loop saturated: the worst case for a
# newcomer's latency), and a downstream call of 200 ms per chunk (16 chunks at once: about 20,000 items/s).
HANDLER_WAITS_MS = (0.0, 200.0)
DRAIN_LINE = re.compile(r"drain \S+ slot (\d+) \(")


def observed(record: Path) -> list[tuple[float, str, int]]:
    """(monotonic time, batch tag, items) of every handler call so far."""
    if not record.exists():
        return []
    rows = []
    for line in record.read_text().splitlines():
        t, tag, n = line.split()
        rows.append((float(t), tag, int(n)))
    return rows


def drain_slots(host_log: Path) -> list[int]:
    """The drainer slots whose sessions the host logged."""
    return sorted({int(m[1]) for m in DRAIN_LINE.finditer(host_log.read_text(errors="replace"))})


def big_settings(env: dict[str, str], count: int) -> dict[str, str]:
    """Room for one batch of `count` items: the body limit, the item count and the submit's deadline."""
    return env | {
        "MAX_ITEMS": str(count),
        "MAX_BODY_BYTES": str(256 * 2**20),
        "SUBMIT_DEADLINE_S": "600",
        "STAGING_TTL_S": "700",
    }


async def submit_in_process(env: dict[str, str], count: int, tag: str, tenant: str) -> dict[str, Any]:
    """The big batch, through the app's own submit (an HTTP body of 110 MB is not what is measured here)."""
    runtime.configure(Settings.from_env(env))
    try:
        done = await submit(
            runtime.services(),
            ndjson(items(tag, count)),
            content_type="application/x-ndjson",
            content_encoding=None,
            idempotency_key=None,
            lane=Lane("", tenant),
        )
    finally:
        await runtime.close()
    return {"items": done.manifest.items, "chunks": done.manifest.chunks, "trigger": done.trigger}


async def probe(
    session: aiohttp.ClientSession,
    tag: str,
    tenant: str | None,
    sent: dict[str, float],
    acks: dict[str, float],
    azurite: AzuriteProbe | None = None,
) -> None:
    """Submit B's 10 items; `sent` is when the request left, `acks` when its 202 was read; then, with `azurite`,
    time Azurite's own calls on B's path at that moment."""
    headers = {"Content-Type": "application/x-ndjson"} | ({"X-Tenant": tenant} if tenant else {})
    body = ndjson(items(tag, PROBE_ITEMS))
    started = time.monotonic()
    async with session.post("/api/batches", data=body, headers=headers) as reply:
        await reply.read()
        if reply.status == 202:
            sent[tag], acks[tag] = started, time.monotonic()
            if azurite is not None:
                await azurite.sample(tag)


def fair_role(lanes: bool, wait_ms: float, round_no: int) -> str:
    return f"fair{'l' if lanes else 's'}{int(wait_ms)}r{round_no}"


async def fairness_round(
    stack: Stack,
    token: str,
    lanes: bool,
    count: int,
    run_dir: Path,
    wait_ms: float,
    round_no: int,
    probe_every_s: float = PROBE_EVERY_S,
    azurite_parts: bool = False,
    root: Path = ROOT,
    side: str = "",
) -> dict[str, Any]:
    """One round; `root`: the checkout whose app the host runs, `side` (in its role's name) which one it is."""
    role = fair_role(lanes, wait_ms, round_no) + side
    record = run_dir / f"record-{role}.log"
    handler = "bench.tools.handlers:record_then_wait" if wait_ms else "bench.tools.handlers:record"
    env = big_settings(app_env(stack.storage, stack.servicebus, role, token, HANDLER=handler), count)
    process, port = stack.host(role, env | {"BENCH_RECORD_FILE": str(record), WAIT_MS_ENV: f"{wait_ms:g}"}, root)
    submitted = await submit_in_process(env, count, "A", "acme" if lanes else "default")
    sent: dict[str, float] = {}
    acks: dict[str, float] = {}
    probes: list[asyncio.Task[None]] = []
    azurite = AzuriteProbe(stack.storage, env["WORK_QUEUE"]) if azurite_parts else None
    async with contextlib.AsyncExitStack() as scope:
        if azurite is not None:
            await scope.enter_async_context(azurite)
        session = await scope.enter_async_context(aiohttp.ClientSession(f"http://127.0.0.1:{port}"))
        started = time.monotonic()
        while not any(tag == "A" for _, tag, _ in observed(record)):  # A is draining
            if time.monotonic() - started > 120:
                raise TimeoutError("the big batch never started draining")
            await asyncio.sleep(0.05)
        n = 0
        while sum(k for _, tag, k in observed(record) if tag == "A") < count:
            tenant = "bolt" if lanes else None
            probes.append(asyncio.create_task(probe(session, f"B{n}", tenant, sent, acks, azurite)))
            n += 1
            await asyncio.sleep(probe_every_s)
            if time.monotonic() - started > 900:
                raise TimeoutError("the big batch did not drain in 15 minutes")
        await asyncio.gather(*probes)
    deadline = time.monotonic() + 120
    while True:
        rows = observed(record)
        seen = {tag: t for t, tag, _ in rows if tag.startswith("B")}
        if set(acks) <= set(seen) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    a_times = [t for t, tag, _ in rows if tag == "A"]
    a_items = sum(k for _, tag, k in rows if tag == "A")
    b_items = sum(k for _, tag, k in rows if tag.startswith("B"))
    # From the 202 (as the wake latency after idle is measured) to the handler's call on its items; and from the
    # request's start, its submit's own round trip included.
    latencies = [(seen[tag] - at) * 1000 for tag, at in acks.items() if tag in seen]
    from_send = [(seen[tag] - at) * 1000 for tag, at in sent.items() if tag in seen]
    submit_ms = [(acks[tag] - at) * 1000 for tag, at in sent.items()]
    a_seconds = max(a_times) - min(a_times)
    stack.stop(process)
    # Each probe's times (monotonic s), to find a slow one in the host's log (record-*.log has the same clock).
    (run_dir / f"probes-{role}.tsv").write_text(
        f"# wall clock = monotonic + {time.time() - time.monotonic():.3f}\ntag\tsent\tanswered\thandled\n"
        + "".join(f"{tag}\t{sent[tag]:.3f}\t{acks[tag]:.3f}\t{seen.get(tag, float('nan')):.3f}\n" for tag in acks)
    )
    result = {
        "lanes": lanes,
        "handler_wait_ms_per_chunk": wait_ms,
        "a_items": a_items,
        "a_chunks": submitted["chunks"],
        "a_seconds": round(a_seconds, 3),
        "a_items_per_s": round(a_items / a_seconds, 1),
        "b_probes": len(acks),
        "b_never_seen": len(set(acks) - set(seen)),
        "b_items_during_a": b_items,
        "b_share_of_items": round(b_items / max(1, a_items + b_items), 5),
        "b_latency_ms": summary(latencies),
        "b_latency_from_send_ms": summary(from_send),
        "b_submit_ms": summary(submit_ms),
    }
    if azurite is not None:
        waited = {tag: (seen[tag] - at) * 1000 for tag, at in acks.items() if tag in seen}
        result["taken_apart"] = azurite_probe.parts(waited, azurite.samples)
    log.info("fairness (lanes %s): %s", lanes, result)
    return result


async def rate_round(stack: Stack, token: str, drainers: int, limit: float, run_dir: Path) -> dict[str, Any]:
    role = f"rate{drainers}"
    record = run_dir / f"record-{role}.log"
    env = app_env(
        stack.storage,
        stack.servicebus,
        role,
        token,
        HANDLER="bench.tools.handlers:record",
        HANDLER_ITEMS_PER_S=f"{limit:g}",
        MAX_DRAINERS_PER_QUEUE=str(drainers),
        SCALE_OUT_DEPTH="5",
    )
    host_env = env | {
        "BENCH_RECORD_FILE": str(record),
        "AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls": str(drainers),
    }
    process, _ = stack.host(role, host_env)
    await submit_in_process(env, RATE_ITEMS, "R", "default")
    started = time.monotonic()
    while sum(k for _, _, k in observed(record)) < RATE_ITEMS:
        if time.monotonic() - started > 600:
            raise TimeoutError(f"{drainers} drainer(s): the backlog did not drain in 10 minutes")
        await asyncio.sleep(0.2)
    rows = observed(record)
    stack.stop(process)
    seconds = rows[-1][0] - rows[0][0]
    items_per_second: Counter[int] = Counter()
    for t, _, k in rows:
        items_per_second[int(t - rows[0][0])] += k
    slots = drain_slots(process.log_path)
    result = {
        "drainers": drainers,
        "drainer_slots_seen": slots,
        "limit_items_per_s": limit,
        "items": sum(k for _, _, k in rows),
        "seconds": round(seconds, 2),
        "observed_items_per_s": round(sum(k for _, _, k in rows) / seconds, 1),
        "busiest_second_items": max(items_per_second.values()),
        "chunk_calls": len(rows),
    }
    log.info("rate limit with %d drainer(s): %s", drainers, result)
    return result


def share_of_chunks(run: dict[str, Any]) -> float:
    """B's share of the chunks handled during A's drain (each B batch is one chunk)."""
    probes, chunks = int(run["b_probes"]), int(run["a_chunks"])
    return round(probes / max(1, chunks + probes), 5)


def scenario_summary(wait_ms: float, paired: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the paired rounds of one handler (pure)."""

    def median_of(side: str, key: str, stat: str | None = None) -> float:
        values = [float(run[side][key][stat] if stat else run[side][key]) for run in paired]
        return round(statistics.median(values), 1)

    p99 = median_of("with_lanes", "b_latency_ms", "p99")
    lanes_rate, shared_rate = median_of("with_lanes", "a_items_per_s"), median_of("shared_lane", "a_items_per_s")
    return {
        "handler_wait_ms_per_chunk": wait_ms,
        "rounds": paired,
        "b_p50_ms_median": median_of("with_lanes", "b_latency_ms", "p50"),
        "b_p99_ms_median": p99,
        "b_p99_ms_median_shared_lane": median_of("shared_lane", "b_latency_ms", "p99"),
        "a_items_per_s_median": lanes_rate,
        "a_items_per_s_median_shared_lane": shared_rate,
        "b_p99_met": p99 <= WAKE_TARGET_P99_MS,
        "a_throughput_drop": round(1 - lanes_rate / shared_rate, 4),
        "b_share_of_items": statistics.median(run["with_lanes"]["b_share_of_items"] for run in paired),
        "b_share_of_chunks": statistics.median(share_of_chunks(run["with_lanes"]) for run in paired),
    }


async def measure(
    count: int,
    limit: float,
    run_dir: Path,
    rates: bool = True,
    rounds: int = 2,
    waits: tuple[float, ...] = HANDLER_WAITS_MS,
    probe_every_s: float = PROBE_EVERY_S,
    azurite_parts: bool = False,
    before: Path | None = None,
) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    roles = [fair_role(lanes, w, r) for w in waits for lanes in (True, False) for r in range(rounds)]
    roles += [fair_role(True, w, r) + side[0] for w in waits for r in range(rounds) for side in beside.sides(0)]
    roles += [f"rate{d}" for d in DRAINERS]
    stack = Stack(run_dir / "stack", [trigger_queue(role, token) for role in roles])
    scenarios = []
    try:
        stack.start()
        for wait_ms in waits if before is not None else ():  # a change against its parent, in the same rounds
            play = functools.partial(
                fairness_round, stack, token, True, count, run_dir, wait_ms, probe_every_s=probe_every_s,
                azurite_parts=azurite_parts,
            )  # fmt: skip
            scenarios.append(await beside.measure_change(play, before, rounds, wait_ms))
        for wait_ms in waits if before is None else ():
            paired = []
            for r in range(rounds):  # the order alternates, so drift on a shared machine falls on both
                done = {}
                for lanes in (True, False) if r % 2 == 0 else (False, True):
                    done[lanes] = await fairness_round(
                        stack, token, lanes, count, run_dir, wait_ms, r, probe_every_s, azurite_parts
                    )
                paired.append({"with_lanes": done[True], "shared_lane": done[False]})
            scenarios.append(scenario_summary(wait_ms, paired))
        limited = [await rate_round(stack, token, d, limit, run_dir) for d in DRAINERS] if rates and not before else []
    finally:
        stack.stop_all()
    return {
        "a_items": count,
        "probe_items": PROBE_ITEMS,
        "probe_every_s": probe_every_s,
        "b_p99_target_ms": WAKE_TARGET_P99_MS,
        "scenarios": scenarios,
        "rate_limit": limited,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--limit", type=float, default=5_000.0, help="HANDLER_ITEMS_PER_S for the rate scenario")
    parser.add_argument("--json", type=Path, default=RESULTS / "fairness.json")
    parser.add_argument("--no-rates", action="store_true", help="the fairness scenario only")
    parser.add_argument("--rounds", type=int, default=2, help="paired rounds (with and without lanes) per handler")
    parser.add_argument("--waits", type=float, nargs="+", default=HANDLER_WAITS_MS, help="handler ms per chunk")
    parser.add_argument("--probe-every", type=float, default=PROBE_EVERY_S, help="seconds between B's batches")
    parser.add_argument(
        "--azurite-parts", action="store_true", help="time Azurite's own calls on B's path at each of B's 202s"
    )
    parser.add_argument("--spin", type=int, default=0, help="CPU-bound processes the bench runs beside it")
    parser.add_argument("--before", type=Path, help="another checkout (a change's parent): with lanes only, both sides")
    parser.add_argument("--before-commit", default="", help="the commit --before's checkout holds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"fairness-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    at_start = machine.details()
    with machine.LoadSampler() as load, spinning(args.spin):
        result = asyncio.run(
            measure(
                args.items,
                args.limit,
                run_dir,
                rates=not args.no_rates,
                rounds=args.rounds,
                waits=tuple(args.waits),
                probe_every_s=args.probe_every,
                azurite_parts=args.azurite_parts,
                before=args.before,
            )
        )
    if args.before is not None:
        result["before_commit"] = args.before_commit
        result["command"] = " ".join(["python -m bench.fairness", *(argv or sys.argv[1:])]).replace(
            str(args.before), f"<a checkout of {args.before_commit or 'the parent'}>"
        )
    result["spinners"] = args.spin  # CPU-bound processes beside the whole run, started and stopped by it
    result["machine"] = machine.details() | {"commit_at_start": at_start["commit"], "load_during_run": load.summary()}
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
