"""What a month costs in money, this app beside the built-in queue trigger, for given volumes (a model).

`python -m bench.cost` prints the table BENCHMARKS.md and docs/deploying.md show. Counts come from the bench
runs where they were measured (bench/results/latest.json: storage transactions per item and items a second of
one draining process, both local, on Azurite) or modelled (bench/results/idle_sources.json: an idle day on
Flex Consumption); the rest are assumptions named in `Assumptions`. Prices are inputs, not measurements: each
names its source and date in `PRICES`. Free grants (per subscription, shared by every app in it) are not
deducted. Left out: Service Bus operations the platform makes (the trigger's scale probes and idle receives,
cadence not published), storage capacity, egress, and any platform traffic we do not know of.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
DAYS = 30
SECONDS_PER_MONTH = DAYS * 86_400
VOLUMES = (("idle", 0), ("1 million items a day", 1_000_000), ("100 million items a day", 100_000_000))


@dataclass(frozen=True)
class Price:
    usd: float
    per: str
    source: str
    as_of: str


FLEX = "Azure Functions pricing page (Flex Consumption, East US), as quoted by modal.com's pricing guide"
UNVERIFIED = "not re-read for this model (no access to the pricing page here): verify before relying on it"
PRICES = {
    "flex_gb_s": Price(0.000026, "GB-s of on-demand execution", FLEX, "2025-05-22"),
    "flex_executions": Price(0.40, "million executions", "Azure Functions pricing page (Flex Consumption)", UNVERIFIED),
    "flex_always_ready_gb_s": Price(
        0.000004, "GB-s of always-ready baseline", "Azure Functions pricing page", UNVERIFIED
    ),
    "storage_queue": Price(
        0.004, "10,000 queue operations (GPv2, LRS)", "Azure Queue Storage pricing page", UNVERIFIED
    ),
    "storage_blob_write": Price(0.05, "10,000 blob writes (hot, LRS)", "Azure Blob Storage pricing page", UNVERIFIED),
    "storage_blob_read": Price(0.004, "10,000 blob reads (hot, LRS)", "Azure Blob Storage pricing page", UNVERIFIED),
    "service_bus_basic": Price(0.05, "million operations (Basic)", "Azure Service Bus pricing page", UNVERIFIED),
    "log_analytics": Price(2.30, "GB ingested (Analytics logs)", "Azure Monitor pricing page", UNVERIFIED),
}


@dataclass(frozen=True)
class Assumptions:
    """What the model cannot measure here; each one named, so a reader can change it."""

    items_per_batch: int = 1_000  # one submit carries this many items (the walk-through's batch)
    memory_gb: float = 2.0  # instanceMemoryMB 2048, the template's default
    always_ready: int = 0  # DRAIN_ALWAYS_READY
    log_bytes_per_execution: int = 1_000  # the host's request record and its start/end lines (assumed)
    log_bytes_per_chunk: int = 1_000  # the app's chunk span and its log line, 250 items a chunk (assumed)
    chunk_items: int = 250
    # This app's Service Bus operations per batch: the doorbell sent, received, completed, the watchdog scheduled
    # and cancelled (shared.publisher); and per look of the chain (one a minute at most while work waits):
    # scheduled, received, completed.
    sb_ops_per_batch: int = 5
    sb_ops_per_look: int = 3
    looks_per_batch: float = 2.0  # a look during the drain and the one that ends the chain (BENCHMARKS section 4)
    executions_idle_per_day: int = 4  # the fallback timer every 6 hours


@dataclass(frozen=True)
class Counts:
    """One system's counts: per item while working, per day while idle."""

    storage_per_item: float  # transactions, all operations
    blob_writes_per_item: float
    blob_reads_per_item: float
    items_per_s: float  # one instance's drain rate: GB-s follow it
    executions_per_item: float
    idle_storage_per_day: float
    idle_blob_writes_per_day: float = 0.0


def measured_counts(results: Path = RESULTS) -> dict[str, Counts]:
    """The counts of the last full bench run and idle model."""
    latest = json.loads((results / "latest.json").read_text())
    idle = json.loads((results / "idle_sources.json").read_text())
    shipped = next(
        r
        for r in idle["rows"]
        if r["plan"] == "Flex Consumption" and r["queues"] == 1 and r["linger_s"] == 300.0 and r["shipped"]
    )
    figures = latest["summary"]["figures"]
    app_ops = latest["throughput"]["app"]["drain_transactions"]
    app_items = latest["config"]["app_backlog_items"]
    writes = sum(
        n for op, n in app_ops.items() if op.startswith("blob.") and not op.startswith(("blob.Get", "blob.List"))
    )
    reads = sum(n for op, n in app_ops.items() if op.startswith(("blob.Get", "blob.List")))
    a = Assumptions()
    return {
        "queue-drain": Counts(
            storage_per_item=figures["transactions_per_1000"]["app"] / 1000,
            blob_writes_per_item=writes / app_items,
            blob_reads_per_item=reads / app_items,
            items_per_s=figures["items_per_s"]["app"],
            executions_per_item=(2 + a.looks_per_batch) / a.items_per_batch,  # submit, drain, looks
            idle_storage_per_day=shipped["c_total"],
        ),
        "built-in queue trigger": Counts(
            storage_per_item=figures["transactions_per_1000"]["a"] / 1000,
            blob_writes_per_item=0.0,
            blob_reads_per_item=0.0,
            items_per_s=figures["items_per_s"]["a"],
            executions_per_item=1.0,  # one invocation per message, one item per message
            idle_storage_per_day=shipped["a_total"],
        ),
    }


def monthly_bill(
    counts: Counts, items_per_day: float, *, app: bool, assume: Assumptions = Assumptions()
) -> dict[str, float]:
    """USD a month by component (pure)."""
    items = items_per_day * DAYS
    blob_writes = counts.blob_writes_per_item * items
    blob_reads = counts.blob_reads_per_item * items
    queue_ops = counts.storage_per_item * items - blob_writes - blob_reads + counts.idle_storage_per_day * DAYS
    executions = counts.executions_per_item * items + (assume.executions_idle_per_day * DAYS if app else 0)
    gb_s = items / counts.items_per_s * assume.memory_gb
    batches = items / assume.items_per_batch if app else 0.0
    sb_ops = batches * (assume.sb_ops_per_batch + assume.looks_per_batch * assume.sb_ops_per_look)
    chunks = items / assume.chunk_items if app else 0.0
    log_gb = (executions * assume.log_bytes_per_execution + chunks * assume.log_bytes_per_chunk) / 1e9
    baseline = assume.always_ready * assume.memory_gb * SECONDS_PER_MONTH
    p = {k: v.usd for k, v in PRICES.items()}
    return {
        "storage": queue_ops / 1e4 * p["storage_queue"]
        + blob_writes / 1e4 * p["storage_blob_write"]
        + blob_reads / 1e4 * p["storage_blob_read"],
        "service_bus": sb_ops / 1e6 * p["service_bus_basic"],
        "execution": gb_s * p["flex_gb_s"] + executions / 1e6 * p["flex_executions"],
        "always_ready": baseline * p["flex_always_ready_gb_s"],
        "log_analytics": log_gb * p["log_analytics"],
    }


def table(counts: dict[str, Counts], assume: Assumptions = Assumptions()) -> list[dict[str, Any]]:
    rows = []
    for label, per_day in VOLUMES:
        for system, c in counts.items():
            bill = monthly_bill(c, per_day, app=system == "queue-drain", assume=assume)
            rows.append({"volume": label, "system": system, **bill, "total": sum(bill.values())})
    return rows


def money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else "<$0.01"


def markdown(rows: list[dict[str, Any]], assume: Assumptions = Assumptions()) -> str:
    head = "| volume | system | storage | Service Bus | execution | always ready | Log Analytics | total a month |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["storage"], r["service_bus"], r["execution"], r["always_ready"], r["log_analytics"], r["total"]]
        lines.append(f"| {r['volume']} | {r['system']} | " + " | ".join(money(c) for c in cells) + " |")
    prices = ["| price | USD | per | source | as of |", "|---|---|---|---|---|"]
    prices += [f"| {k} | {v.usd:.6f}".rstrip("0") + f" | {v.per} | {v.source} | {v.as_of} |" for k, v in PRICES.items()]
    return "\n".join([*lines, "", *prices])


def section() -> str:
    """BENCHMARKS.md's money section, from the same results the rest of the report reads."""
    assume = Assumptions()
    return f"""## What it costs in money (a model)

`python -m bench.cost`: a month (30 days) at list prices, this app beside the built-in queue trigger for the
same volumes, from the storage transactions per item and the items a second measured above (local, on
Azurite), the idle day modelled in section 4 (Flex Consumption, the timer every 6 hours, a 5-minute linger),
and named assumptions: {assume.items_per_batch:,} items a submit, {assume.memory_gb:g} GB instances, no
always-ready instance, about {assume.log_bytes_per_execution:,} bytes of logs per execution. Free grants are not
deducted; the execution time of a real handler is not in it (the no-op handler's); nor are the platform's own
Service Bus probes. The prices are inputs, with their source and date; several could not be re-read here.

{markdown(table(measured_counts(), assume), assume)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--always-ready", type=int, default=0, help="always-ready instances (DRAIN_ALWAYS_READY)")
    parser.add_argument("--items-per-batch", type=int, default=Assumptions().items_per_batch)
    args = parser.parse_args()
    assume = replace(Assumptions(), always_ready=args.always_ready, items_per_batch=args.items_per_batch)
    print(markdown(table(measured_counts(), assume), assume))


if __name__ == "__main__":
    main()
