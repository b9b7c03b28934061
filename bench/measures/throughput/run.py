"""Drain throughput, transactions per 1,000 items and peak RSS: the app's backlog, then each peer's.

The app: the backlog is submitted in this process through the app's own `submit` (counted by its metering),
then drained by one `Drainer` in a fresh process (`bench.measures.throughput.drain_process`) with the no-op handler.
A peer: one message per item is enqueued here (counted at the client), then the peer drains them in a fresh
process (`bench.peers.process drain`) with a no-op handler.
The deep backlog: one queue of 200,000 items (one message each) that every peer in turn drains for a fixed
window, so each peer's rate is measured at the issue's depth without the hours a full drain each would take.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.peers import PEERS
from bench.peers.base import StorageQueue
from bench.tools import enqueue
from bench.tools.config import app_env
from bench.tools.items import items, message_text, ndjson
from bench.tools.stats import full_drain_hours
from devstack.host import ROOT
from shared import runtime
from shared.core.settings import Settings
from shared.intake.submit import submit
from shared.telemetry import metering
from shared.telemetry.metering import TransactionCounter

log = logging.getLogger(__name__)


def per_thousand(transactions: dict[str, int], item_count: int) -> float:
    return sum(transactions.values()) * 1000 / item_count


def merged(*counts: dict[str, int]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return dict(sorted(total.items()))


async def submit_backlog(env: dict[str, str], count: int, tag: str) -> dict[str, Any]:
    runtime.configure(Settings.from_env(env))
    services = runtime.services()
    body = ndjson(items(tag, count))
    started = time.monotonic()
    with metering.tally() as tally:
        done = await submit(
            services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
        )
    seconds = time.monotonic() - started
    await runtime.close()
    return {
        "items": done.manifest.items,
        "chunks": done.manifest.chunks,
        "body_bytes": len(body),
        "seconds": seconds,
        "trigger": done.trigger,
        "transactions": dict(sorted(tally.items())),
    }


def run_child(module: str, args: list[str], env: dict[str, str], log_path: Path, root: Path = ROOT) -> None:
    """`python -m module args` in a fresh process, from this checkout or another (`root`)."""
    full_env = {**os.environ, **env, "PYTHONPATH": str(root)}
    with log_path.open("ab") as out:
        subprocess.run(
            [sys.executable, "-m", module, *args], env=full_env, cwd=root, stdout=out, stderr=out, check=True
        )


def drain_app(
    env: dict[str, str],
    run_dir: Path,
    label: str,
    profile: bool = False,
    cpu_profile: bool = False,
    root: Path = ROOT,
) -> dict[str, Any]:
    summary = run_dir / f"drain-{label}.json"
    args = ["--summary", str(summary)]
    if profile:
        args += ["--profile", str(run_dir / f"profile-{label}.txt")]
    if cpu_profile:
        args += ["--cpu-profile"]
    run_child("bench.measures.throughput.drain_process", args, env, run_dir / f"drain-{label}.log", root)
    return dict(json.loads(summary.read_text()))


async def app_throughput(
    storage: str, servicebus: str, token: str, count: int, run_dir: Path, root: Path = ROOT, label: str = "app"
) -> dict[str, Any]:
    """Submit `count` items, drain them in a fresh process (from this checkout, or `root`'s)."""
    env = app_env(storage, servicebus, "tput", token, HANDLER="shared.handlers.noop:handle")
    submitted = await submit_backlog(env, count, "tput")
    log.info("app: %d items in %d chunks submitted in %.1f s", count, submitted["chunks"], submitted["seconds"])
    drained = drain_app(env, run_dir, label, root=root)
    drained["watchdog_publish_failures"] = sum(
        "could not publish watchdog" in line for line in (run_dir / f"drain-{label}.log").read_text().splitlines()
    )
    report = drained["report"]
    steady = drained["steady_seconds"] or drained["seconds"]
    total = merged(submitted["transactions"], report["transactions"])
    result = {
        "items": count,
        "chunk_items": int(Settings.from_env(env).chunk_max_items),
        "messages": report["messages"],
        "submit": submitted,
        "drain_seconds": drained["seconds"],
        "drain_cpu_seconds": drained["cpu_seconds"],
        "steady_cpu_seconds": drained.get("steady_cpu_seconds"),
        "drain_set_up_seconds": drained["set_up_seconds"],
        "steady_seconds": steady,
        "watchdog_publish_failures": drained["watchdog_publish_failures"],
        "drain_outcome": report["outcome"],
        "items_ok": report["items_ok"],
        "items_per_s": report["items_ok"] / drained["seconds"],
        "messages_per_s": report["messages"] / drained["seconds"],
        "messages_per_s_steady": report["messages"] / steady,
        "peak_rss_mb": drained["peak_rss_mb"],
        "drain_transactions": report["transactions"],
        "transactions": total,
        "transactions_per_1000": per_thousand(total, count),
    }
    log.info(
        "app: drained %d items in %.2f s (%.0f items/s; %.1f messages/s, %.1f steady; CPU %.2f s), "
        "%.1f transactions per 1,000, RSS %.0f MB",
        report["items_ok"], drained["seconds"], result["items_per_s"], result["messages_per_s"],
        result["messages_per_s_steady"], drained["cpu_seconds"], result["transactions_per_1000"],
        drained["peak_rss_mb"],
    )  # fmt: skip
    return result


async def app_profile(storage: str, servicebus: str, token: str, count: int, run_dir: Path) -> dict[str, Any]:
    """The same drain under pyinstrument (on a backlog of its own): where the drain spends its time."""
    env = app_env(storage, servicebus, "profile", token, HANDLER="shared.handlers.noop:handle")
    await submit_backlog(env, count, "profile")
    drained = drain_app(env, run_dir, "profile", profile=True)
    return {
        "items": count,
        "seconds_under_profiler": drained["seconds"],
        "cpu_seconds_under_profiler": drained["profile_cpu_seconds"],
        "parts_s": drained["profile_parts"],
        "profile_text": portable((run_dir / "profile-profile.txt").read_text()),
    }


def portable(profile_text: str) -> str:
    """pyinstrument's text without this checkout's location (its header names the profiled script's path)."""
    lines = [line for line in profile_text.splitlines() if not line.startswith("Profile at ")]
    return "\n".join(lines).replace(f"{ROOT}/", "")


async def peer_throughput(storage: str, token: str, kind: str, count: int, run_dir: Path) -> dict[str, Any]:
    name = f"tput-{kind}-{token}"
    counter = TransactionCounter()
    producer = enqueue.client(storage, name, counter)
    await enqueue.create(producer)
    started = time.monotonic()
    await enqueue.put_all(producer, [message_text(i) for i in items("tput", count)])
    enqueue_s = time.monotonic() - started
    await producer.close()
    drained = drain_peer(storage, kind, name, count, run_dir / f"drain-peer-{kind}")
    total = merged(counter.totals(), drained["transactions"])
    result = {
        "items": count,
        "enqueue_seconds": enqueue_s,
        "drain_seconds": drained["seconds"],
        "items_ok": drained["items"],
        "items_per_s": drained["items_per_s"],
        "messages_per_s": drained["items_per_s"],
        "peak_rss_mb": drained["peak_rss_mb"],
        "transactions": total,
        "transactions_per_1000": per_thousand(total, count),
    }
    log.info(
        "peer %s: drained %d items in %.2f s (%.0f items/s), %.0f transactions per 1,000",
        kind, drained["items"], drained["seconds"], drained["items_per_s"], result["transactions_per_1000"],
    )  # fmt: skip
    return result


def drain_peer(storage: str, kind: str, queue: str, count: int, out: Path, window_s: float | None = None) -> Any:
    """Run the peer's drain in a fresh process; its summary (items, seconds, transactions, peak RSS)."""
    summary = out.with_suffix(".json")
    args = ["drain", "--peer", kind, "--queues", queue, "--items", str(count), "--summary", str(summary)]
    if window_s is not None:
        args += ["--window-s", str(window_s)]
    run_child("bench.peers.process", args, {"BENCH_STORAGE": storage}, out.with_suffix(".log"))
    return json.loads(summary.read_text())


async def peers_deep(storage: str, token: str, count: int, window_s: float, run_dir: Path) -> dict[str, Any]:
    """Every peer drains the same `count`-deep queue for `window_s` seconds, one after another: items/s and
    peak RSS at that depth (each peer takes a few percent of it at most)."""
    name = f"deep-{token}"
    producer = enqueue.client(storage, name)
    await enqueue.create(producer)
    started = time.monotonic()
    await enqueue.put_all(producer, [message_text(i) for i in items("deep", count)])
    result: dict[str, Any] = {"items": count, "window_s": window_s, "enqueue_seconds": time.monotonic() - started}
    queue = StorageQueue(producer)
    try:
        for kind in PEERS:
            depth = await queue.depth()
            drained = drain_peer(storage, kind, name, count, run_dir / f"deep-peer-{kind}", window_s)
            result[kind] = {
                "depth_at_start": depth,
                "items_ok": drained["items"],
                "seconds": drained["seconds"],
                "items_per_s": drained["items_per_s"],
                "peak_rss_mb": drained["peak_rss_mb"],
                "full_drain_hours_estimate": full_drain_hours(count, drained["items_per_s"]),
            }
            log.info(
                "peer %s on the %d-deep queue (%d at its start): %d items in %.1f s (%.2f items/s), RSS %.0f MB",
                kind, count, depth, drained["items"], drained["seconds"], drained["items_per_s"] or 0,
                drained["peak_rss_mb"],
            )  # fmt: skip
        result["depth_at_end"] = await queue.depth()
    finally:
        # Azurite's GetMessages slows with depth: the phases after this one must not share Azurite with it.
        await producer.delete_queue()
        await producer.close()
    return result
