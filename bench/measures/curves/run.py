"""`python -m bench.curves`: cost and time against the batch's size, one batch of each size, on one Azurite.

For each size: the batch is submitted through the app's own `submit` in a fresh process, drained by one
`Drainer` in a fresh process (the no-op handler), then its status read, the first batch-list page and the whole
results export (`GET /api/batches/{id}/results`, pages of 100,000 lines) run through the HTTP API's own
functions in a fresh process (`bench.measures.curves.step`). Every step is timed, its storage transactions
counted and its peak RSS growth taken. Sizes not run are extended from the two largest measured by their
log-log slope (`bench.tools.growth`), and said to be.

    python -m bench.curves [--sizes 1000 10000 100000 1000000] [--extend-to 10000000]
        -> bench/results/curves.json, bench/results/curves.png
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.measures.fairness.run import big_settings
from bench.measures.throughput.run import drain_app, merged, run_child
from bench.tools import growth, machine
from bench.tools.config import app_env, trigger_queue
from bench.tools.stack import Stack

log = logging.getLogger("bench.measures.curves.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
EXTEND_TO = 10_000_000


def step(mode: str, env: dict[str, str], args: list[str], out: Path) -> dict[str, Any]:
    summary = out.with_suffix(".json")
    run_child("bench.measures.curves.step", [mode, *args, "--summary", str(summary)], env, out.with_suffix(".log"))
    return dict(json.loads(summary.read_text()))


def point(stack: Stack, token: str, count: int, run_dir: Path) -> dict[str, Any]:
    role = f"curve{count}"
    env = big_settings(
        app_env(stack.storage, stack.servicebus, role, token, HANDLER="shared.handlers.noop:handle"), count
    )
    env["MAX_BODY_BYTES"] = str(max(256 * 2**20, count * 160))  # these items are about 119 bytes of NDJSON each
    submitted = step("submit", env, ["--items", str(count)], run_dir / f"submit-{count}")
    log.info("%d items: submitted in %.1f s", count, submitted["seconds"])
    drained = drain_app(env, run_dir, role)
    report = drained["report"]
    log.info("%d items: drained in %.1f s (%s)", count, drained["seconds"], report["outcome"])
    reads = step("reads", env, ["--batch-id", submitted["batch_id"]], run_dir / f"reads-{count}")
    export = reads["export"]
    log.info("%d items: exported %d lines in %.1f s", count, export["lines"], export["seconds"])
    total = merged(submitted["transactions"], report["transactions"])
    return {
        "items": count,
        "chunks": submitted["chunks"],
        "submit": submitted,
        "drain": {
            "seconds": drained["seconds"],
            "items_ok": report["items_ok"],
            "outcome": report["outcome"],
            "peak_rss_mb": drained["peak_rss_mb"],
            "transactions": report["transactions"],
        },
        "result_blobs": report["transactions"].get("blob.PutBlob", 0),
        "transactions": total,
        "transactions_per_1000": sum(total.values()) * 1000 / count,
        "status": reads["status"],
        "status_body": reads["status_body"],
        "batch_list_page": reads["batch_list_page"],
        "export": export | {"items_per_s": export["lines"] / export["seconds"] if export["seconds"] else None},
    }


def total(transactions: dict[str, int]) -> int:
    return sum(transactions.values())


# name -> (label, unit, value of a point)
METRICS: dict[str, tuple[str, str, Callable[[dict[str, Any]], float | None]]] = {
    "submit_s": ("submit time", "s", lambda p: p["submit"]["seconds"]),
    "drain_s": ("drain time", "s", lambda p: p["drain"]["seconds"]),
    "transactions": ("storage transactions, submit to drained", "", lambda p: total(p["transactions"])),
    "transactions_per_1000": ("storage transactions per 1,000 items", "", lambda p: p["transactions_per_1000"]),
    "submit_rss_growth_mb": ("submit: peak RSS growth", "MB", lambda p: p["submit"]["peak_rss_growth_mb"]),
    "drain_peak_rss_mb": ("drain: peak RSS", "MB", lambda p: p["drain"]["peak_rss_mb"]),
    "status_s": ("status read time", "s", lambda p: p["status"]["seconds"]),
    "status_transactions": ("status read transactions", "", lambda p: total(p["status"]["transactions"])),
    "list_page_s": ("batch-list page time", "s", lambda p: p["batch_list_page"]["seconds"]),
    "list_page_transactions": (
        "batch-list page transactions", "", lambda p: total(p["batch_list_page"]["transactions"])
    ),
    "export_s": ("results export time", "s", lambda p: p["export"]["seconds"]),
    "export_transactions": ("results export transactions", "", lambda p: total(p["export"]["transactions"])),
    "export_rss_growth_mb": ("results export: peak RSS growth", "MB", lambda p: p["export"]["peak_rss_growth_mb"]),
    "result_blobs": ("result blobs written", "", lambda p: p["result_blobs"]),
}  # fmt: skip


def curves(points: list[dict[str, Any]], extend_to: int) -> dict[str, Any]:
    """Per metric: its measured values by size, the slope between the two largest, its name, the extension."""
    out = {}
    for name, (_, _, value) in METRICS.items():
        found = [(float(p["items"]), value(p)) for p in points]
        s = growth.last_slope(found)
        out[name] = {
            "values": {str(int(x)): y for x, y in found},
            "slope": None if s is None else round(s, 3),
            "grows": growth.named(s),
            "extended": {str(extend_to): growth.extended(found, extend_to)}
            if extend_to > max(p["items"] for p in points)
            else {},
        }
    # per 1,000 items falls towards a per-chunk floor: extended as the whole count's extension per 1,000 items
    for x, y in out["transactions"]["extended"].items():
        out["transactions_per_1000"]["extended"][x] = None if y is None else y * 1000 / int(x)
    return out


def plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(METRICS)
    cols = 4
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3.2 * rows))
    for ax, name in zip(axes.flat, names, strict=False):
        label, unit, _ = METRICS[name]
        curve = doc["curves"][name]
        xs = [int(x) for x, y in curve["values"].items() if y]
        ys = [y for y in curve["values"].values() if y]
        ax.loglog(xs, ys, "o-", color="tab:blue")
        for x, y in curve["extended"].items():
            if y and xs:
                ax.loglog([xs[-1], int(x)], [ys[-1], y], "--", color="tab:gray")
                ax.loglog([int(x)], [y], "o", color="tab:gray", mfc="white")
        ax.set_title(f"{label} ({curve['grows']})", fontsize=9)
        ax.set_xlabel("items in the batch", fontsize=8)
        if unit:
            ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle("One batch of each size: measured (solid), extended by the last slope (dashed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.curves", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--extend-to", type=int, default=EXTEND_TO)
    parser.add_argument("--json", type=Path, default=RESULTS / "curves.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from the JSON, measure nothing")
    parser.add_argument(
        "--merge", action="store_true", help="add these sizes' points to the JSON's (a size measured again replaces)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    if args.plot_only:
        plot(json.loads(args.json.read_text()), args.json.with_suffix(".png"))
        return 0
    token = uuid.uuid4().hex[:8]
    run_dir = RESULTS / "runs" / f"curves-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(run_dir / "stack", [trigger_queue(f"curve{n}", token) for n in args.sizes])
    started = time.monotonic()
    try:
        with machine.LoadSampler() as load:
            stack.start()
            points = [point(stack, token, n, run_dir) for n in sorted(args.sizes)]
    finally:
        stack.stop_all()
    duration_s = round(time.monotonic() - started, 1)
    runs = [{"sizes": sorted(args.sizes), "duration_s": duration_s}]
    if args.merge and args.json.exists():
        before = json.loads(args.json.read_text())
        points = sorted(
            [p for p in before["points"] if p["items"] not in args.sizes] + points, key=lambda p: p["items"]
        )
        runs = (
            before.get("runs", [{"sizes": [p["items"] for p in before["points"]], "duration_s": before["duration_s"]}])
            + runs
        )
        duration_s = round(sum(r["duration_s"] for r in runs), 1)
    # A batch one drain session did not finish (it stopped at its budget) is no point of the drain's curves: it is
    # kept as an attempt, said in the report, and its size is extended instead.
    attempts = [p for p in points if p["drain"]["items_ok"] < p["items"]]
    points = [p for p in points if p not in attempts]
    doc = {
        "command": "make bench-curves",
        "duration_s": duration_s,
        "runs": runs,
        "machine": machine.details() | {"load_during_run": load.summary()},
        "extend_to": args.extend_to,
        "points": points,
        "attempts": attempts,
        "curves": curves(points, args.extend_to),
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, args.json.with_suffix(".png"))
    log.info("done in %.0f s", doc["duration_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
