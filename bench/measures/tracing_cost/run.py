"""What tracing costs the drain: its message rate with tracing on and off, in paired rounds on one stack.

    python -m bench.tracing_cost [--items N] [--rounds R]   -> bench/results/tracing.json

Each round submits the same backlog twice, to two queues, and drains each in a process of its own
(`bench.measures.throughput.drain_process`, the app's default settings, the no-op handler, so the per-message
overhead shows at its largest): once with tracing off (no exporter: the OpenTelemetry API is a no-op) and once with
it on at the default sampling (every trace), spans written by the SDK's batch processor to a trace file
(`TRACES_FILE`, what `make run` uses). For the traced backlog the submit runs inside a sampled remote context, so
every chunk carries a traceparent and the drain makes a recording span per chunk as it would in production. The order
alternates between rounds, so drift on a shared machine falls on both; the figure is the median of the rounds' on/off
ratios of the steady message rate."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from bench.measures.throughput.run import drain_app, submit_backlog
from bench.tools.config import app_env, trigger_queue
from bench.tools.stack import Stack

RESULTS = Path(__file__).resolve().parents[2] / "results"
TARGET = 0.05  # issue 15: at most 5% slower at the default sampling
log = logging.getLogger("bench.tracing")


@contextmanager
def sampled_parent() -> Iterator[None]:
    """A sampled remote parent, as an HTTP caller or the Functions host would give the submit."""
    rng = random.Random()
    ctx = SpanContext(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1, True, TraceFlags(TraceFlags.SAMPLED))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ctx)))
    try:
        yield
    finally:
        otel_context.detach(token)


async def one(stack: Stack, token: str, mode: str, round_no: int, items: int, run_dir: Path) -> dict[str, Any]:
    role = f"trc{mode}{round_no}"
    env = app_env(stack.storage, stack.servicebus, role, token, HANDLER="shared.handlers.noop:handle")
    with sampled_parent() if mode == "on" else nullcontext():
        submitted = await submit_backlog(env, items, role)
    if mode == "on":
        env |= {"TRACES_FILE": str(run_dir / f"traces-{round_no}.jsonl")}
    drained = drain_app(env, run_dir, f"trace-{mode}-{round_no}")
    report = drained["report"]
    steady = drained["steady_seconds"] or drained["seconds"]
    spans = 0
    if mode == "on":
        spans = sum(1 for _ in (run_dir / f"traces-{round_no}.jsonl").open())
    result = {
        "mode": mode,
        "messages": report["messages"],
        "items_ok": report["items_ok"],
        "chunks": submitted["chunks"],
        "steady_seconds": round(steady, 3),
        "messages_per_s_steady": round(report["messages"] / steady, 1),
        "cpu_seconds": round(drained["cpu_seconds"], 3),
        "spans_written": spans,
    }
    log.info("tracing %s, round %d: %s", mode, round_no, result)
    return result


async def measure(items: int, rounds: int, run_dir: Path) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    roles = [f"trc{m}{r}" for r in range(rounds) for m in ("on", "off")]
    stack = Stack(run_dir / "stack", [trigger_queue(role, token) for role in roles])
    pairs = []
    try:
        stack.start()
        for r in range(rounds):
            done = {}
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                done[mode] = await one(stack, token, mode, r, items, run_dir)
            pairs.append(done)
    finally:
        stack.stop_all()
    ratios = [p["on"]["messages_per_s_steady"] / p["off"]["messages_per_s_steady"] for p in pairs]
    cpu = [p["on"]["cpu_seconds"] / p["off"]["cpu_seconds"] for p in pairs]
    slower = 1 - statistics.median(ratios)
    return {
        "items": items,
        "rounds": pairs,
        "on_over_off_rate": [round(r, 3) for r in ratios],
        "median_on_over_off_rate": round(statistics.median(ratios), 3),
        "median_on_over_off_cpu": round(statistics.median(cpu), 3),
        "slower_fraction": round(slower, 3),
        "target_slower_fraction": TARGET,
        "target_met": slower <= TARGET,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=RESULTS / "tracing.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"tracing-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(measure(args.items, args.rounds, run_dir))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
