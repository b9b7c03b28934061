"""`python -m bench [--quick]`: every figure of issue 5 in one run, on one Azurite and one Service Bus stand-in.

Writes bench/results/latest.json (or quick.json), the plots beside it, and BENCHMARKS.md (full runs only).
Logs, record files and service data go to bench/results/runs/<run>/ (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import report
from bench.measures.chunked.run import chunked_throughput
from bench.measures.idle import run as idle
from bench.measures.latency import run as latency
from bench.measures.raw_limit import paired
from bench.measures.raw_limit import run as raw_limit
from bench.measures.rounds.plan import history_row
from bench.measures.rounds.run import append_history
from bench.measures.throughput import run as throughput
from bench.peers import PEERS
from bench.report import plots, summary
from bench.tools import machine
from bench.tools.config import FULL, QUICK, ROLES, BenchConfig, trigger_queue
from bench.tools.stack import Stack

log = logging.getLogger("bench")

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent


async def measure(cfg: BenchConfig, stack: Stack, token: str, run_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    app_messages = raw_limit.messages_for(cfg.app_backlog_items)
    log.info("raw Azurite limit: %d messages per round", app_messages)
    results["raw_limit"] = await raw_limit.measure(
        stack.storage, token, app_messages, cfg.raw_concurrency, cfg.raw_rounds
    )
    log.info("drain throughput: the app, %d items", cfg.app_backlog_items)
    results["throughput"] = {
        "app": await throughput.app_throughput(stack.storage, stack.servicebus, token, cfg.app_backlog_items, run_dir)
    }
    log.info("drain throughput: peer (a'), the app's %d items as its chunk messages", cfg.app_backlog_items)
    results["throughput"]["a2"] = await chunked_throughput(stack.storage, token, cfg.app_backlog_items, run_dir)
    for kind in PEERS:
        log.info("drain throughput: peer %s, %d items", kind, cfg.peer_backlog_items)
        results["throughput"][kind] = await throughput.peer_throughput(
            stack.storage, token, kind, cfg.peer_backlog_items, run_dir
        )
    log.info("paired rounds: the raw loop and the app's drain back to back, %d times", cfg.paired_rounds)
    results["paired"] = await paired.measure(
        stack.storage,
        stack.servicebus,
        token,
        cfg.app_backlog_items,
        results["raw_limit"]["best_clients"],
        cfg.paired_rounds,
        run_dir,
    )
    log.info("peers on a %d-item backlog, %.0f s each", cfg.deep_backlog_items, cfg.deep_window_s)
    results["deep_backlog"] = await throughput.peers_deep(
        stack.storage, token, cfg.deep_backlog_items, cfg.deep_window_s, run_dir
    )
    log.info("wake latency and the real-time idle run (%.0f s)", cfg.idle_real_s)
    results["latency"] = await latency.run(stack, cfg, token, run_dir)
    real_idle = results["latency"].pop("idle_real")
    log.info("idle transactions: simulated day per policy, and the real-time window again")
    results["idle"] = await idle.simulate_all(stack.storage, stack.servicebus, token, real_idle)
    if cfg.profile_items:
        log.info("profile: the app's drain of %d items under pyinstrument", cfg.profile_items)
        results["profile"] = await throughput.app_profile(
            stack.storage, stack.servicebus, token, cfg.profile_items, run_dir
        )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in under 5 minutes")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the plots and BENCHMARKS.md from latest.json, measure nothing",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        return write_report(json.loads((RESULTS / "latest.json").read_text()), "latest", markdown=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("azure", "shared"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cfg = QUICK if args.quick else FULL
    token = uuid.uuid4().hex[:8]
    started_at = datetime.now(timezone.utc)
    run_dir = RESULTS / "runs" / f"{started_at:%Y%m%dT%H%M%SZ}-{cfg.name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    at_start = machine.details()  # the working tree is shared: say what it was when the run began, and at its end
    stack = Stack(run_dir, [trigger_queue(role, token) for role in ROLES])
    try:
        with machine.LoadSampler() as load:
            stack.start()
            results = asyncio.run(measure(cfg, stack, token, run_dir))
    finally:
        stack.stop_all()
        shutil.rmtree(run_dir / "azurite", ignore_errors=True)
    command = "make bench-quick" if args.quick else "make bench"
    document = {
        "command": command,
        "config": cfg.__dict__,
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - started, 1),
        "machine": machine.details()
        | {
            "commit_at_start": at_start["commit"],
            "tree_modified_at_start": at_start["tree_modified"],
            "load_during_run": load.summary(),
        },
        **results,
    }
    log.info("done in %.0f s", document["duration_s"])
    append_history(cpu_row(document))
    return write_report(document, "latest" if not args.quick else "quick", markdown=not args.quick)


def cpu_row(document: dict[str, Any]) -> dict[str, Any]:
    """The run's line in the CPU history: the app's and (a')'s CPU seconds per message on the same backlog."""
    tput, m = document["throughput"], document["machine"]
    app, a2 = tput["app"], tput["a2"]
    found = {
        "median_cpu_s_per_message_app": app["drain_cpu_seconds"] / app["messages"],
        "median_cpu_s_per_message_a2": a2["cpu_seconds"] / a2["messages_ok"] if a2.get("cpu_seconds") else None,
    }
    items = document["config"]["app_backlog_items"]
    return history_row(m["commit"], m["tree_modified"], document["command"], items, found, m["load_during_run"])


def write_report(document: dict[str, Any], name: str, *, markdown: bool) -> int:
    """The run's JSON (with its summary worked out again), its plots, and BENCHMARKS.md for a full run."""
    document["summary"] = summary.summarize(document)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    plots.write(document, RESULTS, prefix=name)
    if markdown:
        (ROOT / "BENCHMARKS.md").write_text(report.render(document))
    log.info("wrote %s", out.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
