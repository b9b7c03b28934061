"""Headline figures, ratios and targets from a run's document (BENCHMARKS.md is written from them by
`bench.report`)."""

from __future__ import annotations

from typing import Any

from bench.tools.results import SYSTEMS
from bench.tools.stats import ratio


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    tput, lat, idle = doc["throughput"], doc["latency"]["systems"], doc["idle"]
    per_1000 = {k: tput[k]["transactions_per_1000"] for k in SYSTEMS}
    per_day = {k: idle[k]["per_day"] for k in SYSTEMS}
    raw = doc["raw_limit"]["limit_messages_per_s"]
    app = tput["app"]
    figures = {
        "transactions_per_1000": per_1000,
        "fewer_transactions_than_a": {k: ratio(per_1000["a"], per_1000[k]) for k in SYSTEMS},
        "items_per_s": {k: tput[k]["items_per_s"] for k in SYSTEMS},
        "first_item_p99_s": {k: lat[k]["first_item_s"].get("p99") for k in SYSTEMS},
        "idle_per_day": per_day,
        "idle_fraction_of_a": {k: ratio(per_day[k], per_day["a"]) for k in SYSTEMS},
        "raw_limit_messages_per_s": raw,
        # like for like: the messages the drain got and deleted over its first GetMessages..last DeleteMessage
        "app_messages_per_s": app["messages_per_s_steady"],
        "app_fraction_of_raw": ratio(app["messages_per_s_steady"], raw),
        "paired_median_fraction_of_raw": (doc.get("paired") or {}).get("median_ratio"),
        "app_messages_per_s_wall": app["messages_per_s"],
        "app_fraction_of_raw_wall": ratio(app["messages_per_s"], raw),
        "raw_with_decode_messages_per_s": doc["raw_limit"]["with_decode"]["limit_messages_per_s"],
        "app_fraction_of_raw_with_decode": ratio(
            app["messages_per_s_steady"], doc["raw_limit"]["with_decode"]["limit_messages_per_s"]
        ),
        "app_result_blobs": app["drain_transactions"].get("blob.PutBlob", 0),
        "app_drain_cpu_share": ratio(app["drain_cpu_seconds"], app["drain_seconds"]),
        "app_peak_rss_mb": app["peak_rss_mb"],
    }
    p99 = figures["first_item_p99_s"]["app"]
    targets = [
        target(
            "transactions per 1,000 items: >= 200x fewer than (a)",
            figures["fewer_transactions_than_a"]["app"],
            200,
            ">=",
        ),
        target("wake latency p99 (first item) <= 250 ms", None if p99 is None else p99 * 1000, 250, "<="),
        target(
            "idle transactions per queue per day <= 1/15 of (a)", figures["idle_fraction_of_a"]["app"], 1 / 15, "<="
        ),
        target("drain >= 20,000 items/s (no-op handler)", app["items_per_s"], 20_000, ">="),
        target("drain message rate >= 70% of the raw Azurite limit", figures["app_fraction_of_raw"], 0.70, ">="),
        target("drain peak RSS <= 256 MB", app["peak_rss_mb"], 256, "<="),
    ]
    return {"figures": figures, "targets": targets}


def target(name: str, figure: float | None, bound: float, op: str) -> dict[str, Any]:
    met = figure is not None and (figure >= bound if op == ">=" else figure <= bound)
    return {"target": name, "figure": figure, "bound": bound, "met": met}
