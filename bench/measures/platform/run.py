"""`python -m bench.platform [--items N] [--cpu-ms-per-item F] [--seed S] [--json PATH]`: the platform model's runs.

The model itself, with what it models and leaves out, is `bench.measures.platform.model`; this module runs it over the
sizes and handler costs BENCHMARKS.md shows, and writes bench/results/platform.json and its plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.measures.platform.model import AppModel, BuiltinQueueModel, Execution, Instance
from bench.measures.platform.params import (
    LOCK_READINGS,
    ROOT,
    SLOW_COLD_START_S,
    AppPolicy,
    PlatformParams,
    Workload,
    setting_default,
)

__all__ = [
    "BEFORE",
    "ROOT",
    "AppModel",
    "AppPolicy",
    "BuiltinQueueModel",
    "Execution",
    "Instance",
    "PlatformParams",
    "Workload",
    "setting_default",
]

# The app before this change: host.json maxConcurrentCalls 16, at most 4 drainers per queue, one more drainer per
# 200 messages waiting (the settings' former defaults).
BEFORE = AppPolicy(max_concurrent_calls=16, max_drainers_per_queue=4, scale_out_depth=200)
SIZES = (10**5, 10**6, 10**7, 10**8)
COSTS_MS = (0.01, 0.1, 1.0)
# Storage transactions per 1,000 items, enqueue through completion. The built-in trigger: one PutMessage, one
# DeleteMessage and 1/16 of a GetMessages per item (README's formula), idle polls left out. The app: the
# figure `make bench` measured at the wire (bench/results/latest.json), or this default from BENCHMARKS.md.
BUILTIN_PER_1000 = 2_062.5
APP_PER_1000_DEFAULT = 8.3


def app_per_1000() -> float:
    latest = Path(__file__).resolve().parents[2] / "results" / "latest.json"
    try:
        return float(json.loads(latest.read_text())["throughput"]["app"]["transactions_per_1000"])
    except (OSError, KeyError, ValueError):
        return APP_PER_1000_DEFAULT


def grid(params: PlatformParams, seed: int, sizes: Sequence[int] = SIZES) -> list[dict[str, Any]]:
    """Time to drain and instance-seconds for every size x handler cost: (a) built-in, (b) before, (c) after."""
    rows = []
    for items in sizes:
        for cost_ms in COSTS_MS:
            work = Workload(items=items, cpu_s_per_item=cost_ms / 1000)
            step = replace(params, step_s=max(params.step_s, items * cost_ms / 1000 / 400_000))
            a = BuiltinQueueModel(step, work, seed).run()
            b = AppModel(step, work, BEFORE, seed).run()
            c = AppModel(step, work, AppPolicy(), seed).run()
            c_ready = AppModel(replace(step, locked_counts_as_active=False), work, AppPolicy(), seed).run()
            rows.append(
                {
                    "items": items,
                    "cpu_ms_per_item": cost_ms,
                    "a": a.summary(),
                    "b": b.summary(),
                    "c": c.summary(),
                    "c_ready_only": c_ready.summary(),
                    "c_over_a_time": round(c.drained_s / a.drained_s, 3),
                    "c_over_b_time": round(c.drained_s / b.drained_s, 3),
                }
            )
    return rows


def wake_latency(params: PlatformParams, always_ready: int, seeds: int = 50) -> dict[str, float]:
    """Mean seconds from a one-chunk submit after idle to its first item handled, (a) and (c)."""
    fine = replace(params, always_ready=always_ready, step_s=0.05)
    work = Workload(items=250, cpu_s_per_item=0.001)
    a = [BuiltinQueueModel(fine, work, s).run().first_item_s for s in range(seeds)]
    c = [AppModel(fine, work, AppPolicy(), s).run().first_item_s for s in range(seeds)]
    return {"a": round(sum(a) / seeds, 2), "c": round(sum(c) / seeds, 2)}


def linear_growth(params: PlatformParams, seed: int) -> list[dict[str, Any]]:
    """(c)'s rate as the plan allows more instances: it should grow in proportion up to the storage target."""
    work = Workload(items=3 * 10**7, cpu_s_per_item=0.001)
    out = []
    for limit in (1, 2, 4, 8, 16, 32, 64, 100):
        run = AppModel(replace(params, max_instances=limit, step_s=1.0), work, AppPolicy(), seed).run()
        out.append({"max_instances": limit, "peak_items_per_s": run.peak_items_per_s})
    return out


def headline(params: PlatformParams, seed: int) -> list[dict[str, Any]]:
    """README's case, 10^7 items at 1 ms of CPU each, over what is not published: the cold start (typical and
    slow) and whether locked trigger events count; (a) does not depend on the second."""
    work = Workload(items=10**7, cpu_s_per_item=0.001)
    out = []
    for cold in (params.cold_start_s, SLOW_COLD_START_S):
        a = BuiltinQueueModel(replace(params, cold_start_s=cold), work, seed).run()
        for locked in LOCK_READINGS:
            at = replace(params, cold_start_s=cold, locked_counts_as_active=locked)
            c = AppModel(at, work, AppPolicy(), seed).run()
            out.append({"cold_start_s": list(cold), "locked_counts": locked, "a": a.summary(), "c": c.summary()})
    return out


def measure(params: PlatformParams, seed: int, sizes: Sequence[int] = SIZES) -> dict[str, Any]:
    ours = app_per_1000()
    return {
        "params": asdict(params),
        "policy_before": asdict(BEFORE),
        "policy_after": asdict(AppPolicy()),
        "seed": seed,
        "grid": grid(params, seed, sizes),
        "headline": headline(params, seed),
        "wake_latency_s": {str(n): wake_latency(params, n) for n in (0, 1)},
        "linear_growth": linear_growth(params, seed),
        "transactions_per_1000": {"a": BUILTIN_PER_1000, "app": ours, "a_over_app": round(BUILTIN_PER_1000 / ours)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.platform", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-instances", type=int, default=PlatformParams.max_instances)
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parents[2] / "results" / "platform.json")
    args = parser.parse_args(argv)
    result = measure(replace(PlatformParams(), max_instances=args.max_instances), args.seed)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    from bench.measures.platform.plot import platform_plot  # matplotlib only where a figure is drawn

    platform_plot(result, args.json.with_name("platform-scale.png"))
    for row in result["grid"]:
        print(
            f"{row['items']:>11,} items x {row['cpu_ms_per_item']:>5} ms: "
            f"(a) {row['a']['drained_s']:>9.0f} s  (b) {row['b']['drained_s']:>9.0f} s  "
            f"(c) {row['c']['drained_s']:>9.0f} s  c/a {row['c_over_a_time']}"
        )
    for h in result["headline"]:
        print(
            f"10^7 x 1 ms, cold start {h['cold_start_s']} s, locked events counted {h['locked_counts']}: "
            f"(a) {h['a']['drained_s']:.0f} s on {h['a']['peak_instances']}, (c) {h['c']['drained_s']:.0f} s on "
            f"{h['c']['peak_instances']} ({h['c']['busy_drained']} busy instances drained)"
        )
    print("wake latency after idle:", result["wake_latency_s"])
    print("growth:", result["linear_growth"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
