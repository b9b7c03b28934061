"""What a month costs in money, this app beside the built-in queue trigger, for given volumes (a model).

`python -m bench.cost` prints the table BENCHMARKS.md and docs/deploying.md show, and the price table it used.
Counts come from the bench runs where they were measured (bench/results/latest.json: storage transactions of a
drain by operation, items a second of one draining process, both local, on Azurite) or modelled
(bench/results/idle_sources.json: an idle day on Flex Consumption); the rest are assumptions named in
`Assumptions`. Each storage operation is priced by the category Microsoft bills it in (`CATEGORY`, from "Map each
REST operation to a price": LeaseBlob is "Other", List Blobs and Create Container are "List and create container",
Delete Blob is free), and execution time as Flex Consumption bills it: instance memory x the time an instance is
busy, each busy period at least the minimum billable period (1,000 ms), on-demand or always-ready. Prices are
inputs, not measurements: each names its source and date in `PRICES`. Free grants (per subscription, shared by
every app in it) are not deducted. Left out: Service Bus operations the platform makes (the trigger's scale probes
and idle receives, cadence not published), storage capacity, egress, and any platform traffic we do not know of.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
DAYS = 30
SECONDS_PER_DAY = 86_400
SECONDS_PER_MONTH = DAYS * SECONDS_PER_DAY
VOLUMES = (("idle", 0), ("10^4 items a day", 10_000), ("10^6 items a day", 1_000_000), ("10^8 items a day", 10**8))


@dataclass(frozen=True)
class Price:
    usd: float
    per: str
    source: str
    as_of: str


FLEX = "Azure Functions pricing page (Flex Consumption, East US), as quoted by modal.com's pricing guide"
FLEX_BILLING = "Microsoft Learn, Flex Consumption plan: billing (minimum billable execution period)"
MAPPING = "Microsoft Learn, Blob Storage: Map each REST operation to a price (operation types, GPv2)"
UNVERIFIED = "not re-read for this model (no access to the pricing page here): verify before relying on it"
PRICES = {
    "flex_on_demand_gb_s": Price(0.000026, "GB-s of on-demand execution", FLEX, "2025-05-22"),
    "flex_executions": Price(0.40, "million executions", "Azure Functions pricing page (Flex Consumption)", UNVERIFIED),
    "flex_always_ready_baseline_gb_s": Price(
        0.000004, "GB-s of always-ready baseline (all the time)", "Azure Functions pricing page", UNVERIFIED
    ),
    "flex_always_ready_execution_gb_s": Price(
        0.000016, "GB-s of execution on an always-ready instance", "Azure Functions pricing page", UNVERIFIED
    ),
    "flex_minimum_billable_s": Price(
        1.0, "s: the least one busy period of an instance is billed", FLEX_BILLING, UNVERIFIED
    ),
    "blob_write": Price(
        0.05, "10,000 Write operations (hot, LRS)", f"Azure Blob Storage pricing page; {MAPPING}", UNVERIFIED
    ),
    "blob_list_create": Price(
        0.05,
        "10,000 List and create container operations (hot, LRS)",
        f"Azure Blob Storage pricing page; {MAPPING}",
        UNVERIFIED,
    ),
    "blob_read": Price(
        0.004, "10,000 Read operations (hot, LRS)", f"Azure Blob Storage pricing page; {MAPPING}", UNVERIFIED
    ),
    "blob_other": Price(
        0.004, "10,000 All other operations (hot, LRS)", f"Azure Blob Storage pricing page; {MAPPING}", UNVERIFIED
    ),
    "queue": Price(0.004, "10,000 queue operations (GPv2, LRS)", "Azure Queue Storage pricing page", UNVERIFIED),
    "service_bus_basic": Price(0.05, "million operations (Basic)", "Azure Service Bus pricing page", UNVERIFIED),
    "log_analytics": Price(2.30, "GB ingested (Analytics logs)", "Azure Monitor pricing page", UNVERIFIED),
}

# The billing category of each operation the app's metering names (shared.telemetry.metering); Delete is free.
CATEGORY = {
    "blob.PutBlob": "blob_write",
    "blob.PutBlock": "blob_write",
    "blob.PutBlockList": "blob_write",
    "blob.SetBlobMetadata": "blob_write",
    "blob.SetBlobProperties": "blob_write",
    "blob.CopyBlob": "blob_write",
    "blob.ListBlobs": "blob_list_create",
    "blob.CreateContainer": "blob_list_create",
    "blob.ListContainers": "blob_list_create",
    "blob.GetBlob": "blob_read",
    "blob.GetBlockList": "blob_read",
    "blob.GetBlobProperties": "blob_other",
    "blob.GetBlobMetadata": "blob_other",
    "blob.GetContainerProperties": "blob_other",
    "blob.DeleteBlob": "free",
    "blob.DeleteContainer": "free",
}
# The idle model's sources (bench.idle_sources), by the operations they make.
IDLE_SOURCE_CATEGORY = {
    "scale-controller probes": "queue",
    "trigger polls": "queue",
    "fallback looks": "queue",
    "look chain": "queue",
    "fresh-instance reads": "blob_read",
    "host secrets at start": "blob_read",
    "package download": "blob_read",
    "primary-host lock": "blob_other",
    "timer listener lock": "blob_other",
    "timer's listings": "blob_list_create",
}


def category(operation: str) -> str:
    """Microsoft's billing category of one metered operation (LeaseBlob.* is 'Other'; every queue operation
    is one queue operation)."""
    if operation.startswith("queue."):
        return "queue"
    if operation.startswith("blob.LeaseBlob"):
        return "blob_other"
    return CATEGORY.get(operation, "blob_other")


@dataclass(frozen=True)
class Assumptions:
    """What the model cannot measure here; each one named, so a reader can change it."""

    items_per_batch: int = 1_000  # one submit carries this many items (the walk-through's batch)
    memory_gb: float = 2.0  # instanceMemoryMB 2048, the template's default
    always_ready: int = 0  # DRAIN_ALWAYS_READY
    linger_s: float = 300.0  # how long an idle instance lives on (the idle model's middle case)
    log_bytes_per_execution: int = 1_000  # the host's request record and its start/end lines (assumed)
    log_bytes_per_chunk: int = 1_000  # the app's chunk span and its log line, 250 items a chunk (assumed)
    chunk_items: int = 250
    # This app's Service Bus operations per batch: the doorbell sent, received, completed, the watchdog scheduled
    # and cancelled (shared.publisher); and per look of the chain: scheduled, received, completed.
    sb_ops_per_batch: int = 5
    sb_ops_per_look: int = 3
    looks_per_batch: float = 2.0  # a look during the drain and the one that ends the chain (BENCHMARKS section 4)
    timer_executions_per_day: int = 4  # the fallback timer every 6 hours


@dataclass(frozen=True)
class Counts:
    """One system's counts: storage operations by billing category per item, per batch, per process start and
    per idle day; its drain rate; its executions."""

    per_item: Mapping[str, float]
    per_batch: Mapping[str, float]
    per_start: Mapping[str, float]
    idle_per_day: Mapping[str, float]
    items_per_s: float  # one instance's drain rate: the busy time of a batch follows it
    drain_executions_per_batch: float  # billed executions of the draining function per batch
    submits_per_batch: float = 0.0  # HTTP executions (their own scale group), each its own busy period
    looks_per_batch: float = 0.0  # short executions of the drain function, each its own busy period
    push: bool = False  # this app's machinery: Service Bus events, the fallback timer, DRAIN_ALWAYS_READY


def by_category(operations: Mapping[str, float], divisor: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for op, n in operations.items():
        out[category(op)] = out.get(category(op), 0.0) + n / divisor
    return out


def by_source(sources: Mapping[str, float]) -> dict[str, float]:
    """An idle day's operations, from the idle model's sources, by billing category."""
    out: dict[str, float] = {}
    for source, n in sources.items():
        out[IDLE_SOURCE_CATEGORY[source]] = out.get(IDLE_SOURCE_CATEGORY[source], 0.0) + n
    return out


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
    drain_ops = dict(latest["throughput"]["app"]["drain_transactions"])
    bench_items = latest["config"]["app_backlog_items"]
    a = Assumptions()
    starts = {op: n for op, n in drain_ops.items() if ".Create" in op}  # once per process and container or queue
    leases = {op: n for op, n in drain_ops.items() if op.startswith("blob.LeaseBlob")}  # per drain execution
    per_item_ops = {op: n for op, n in drain_ops.items() if op not in starts and op not in leases}
    # The submit side, outside the drain's count: one PutMessage a chunk, and per batch two manifest writes and
    # one index write (docs/architecture.md "Cost is counted").
    drained = sum(per_item_ops.values()) + sum(starts.values()) + sum(leases.values())
    submitted = figures["transactions_per_1000"]["app"] / 1000 * bench_items - drained
    per_item = by_category(per_item_ops, bench_items)
    per_item["queue"] = per_item.get("queue", 0.0) + max(submitted - 3, 0) / bench_items
    idle_app = by_source(shipped["c"])
    idle_peer = by_source(shipped["a"])
    return {
        "queue-drain": Counts(
            per_item=per_item,
            per_batch={"blob_write": 3.0, **by_category(leases, 1.0)},
            per_start=by_category(starts, 1.0),
            idle_per_day=idle_app,
            items_per_s=figures["items_per_s"]["app"],
            drain_executions_per_batch=1.0,
            submits_per_batch=1.0,
            looks_per_batch=a.looks_per_batch,
            push=True,
        ),
        "built-in queue trigger": Counts(
            per_item={"queue": figures["transactions_per_1000"]["a"] / 1000},  # put, get (shared), delete
            per_batch={},
            per_start={},
            idle_per_day=idle_peer,
            items_per_s=figures["items_per_s"]["a"],
            drain_executions_per_batch=float(a.items_per_batch),  # one invocation a message, one item a message
        ),
    }


def busy_s_per_day(periods: list[tuple[float, float]], minimum_s: float) -> float:
    """Billed seconds a day of one function's instances, given its busy periods as (how many a day, seconds each):
    each period is billed at least `minimum_s`, and periods that come closer than that merge, so the bill is at
    most the instances needed kept busy all day (pure)."""
    billed = sum(n * max(seconds, minimum_s) for n, seconds in periods if n > 0)
    if billed == 0:
        return 0.0
    working = sum(n * seconds for n, seconds in periods if n > 0)
    instances = max(1, math.ceil(working / SECONDS_PER_DAY))
    return min(billed, instances * SECONDS_PER_DAY)


def monthly_bill(counts: Counts, items_per_day: float, *, assume: Assumptions = Assumptions()) -> dict[str, float]:
    """USD a month by component (pure)."""
    p = {k: v.usd for k, v in PRICES.items()}
    batches = items_per_day / assume.items_per_batch
    starts = min(batches, SECONDS_PER_DAY / assume.linger_s) if counts.per_start else 0.0
    ops: dict[str, float] = {}
    for rates, n in ((counts.per_item, items_per_day), (counts.per_batch, batches), (counts.per_start, starts)):
        for cat, rate in rates.items():
            ops[cat] = ops.get(cat, 0.0) + rate * n * DAYS
    for cat, n in counts.idle_per_day.items():
        ops[cat] = ops.get(cat, 0.0) + n * DAYS
    storage = sum(n / 1e4 * p[cat] for cat, n in ops.items() if cat != "free")
    # Execution: the draining function busy for each batch and for each look, the submits, the timer's ticks.
    minimum = p["flex_minimum_billable_s"]
    timer = assume.timer_executions_per_day if counts.push else 0
    drain_s = DAYS * busy_s_per_day(
        [(batches, assume.items_per_batch / counts.items_per_s), (batches * counts.looks_per_batch, 0.0)], minimum
    )
    other_s = DAYS * (
        busy_s_per_day([(batches * counts.submits_per_batch, 0.0)], minimum) + busy_s_per_day([(timer, 0.0)], minimum)
    )
    ready = assume.always_ready and counts.push  # DRAIN_ALWAYS_READY: the drain function runs on that instance
    drain_rate = p["flex_always_ready_execution_gb_s"] if ready else p["flex_on_demand_gb_s"]
    per_batch = counts.drain_executions_per_batch + counts.submits_per_batch + counts.looks_per_batch
    executions = DAYS * (batches * per_batch + timer)
    chunks = items_per_day * DAYS / assume.chunk_items if counts.push else 0.0
    sb_ops = DAYS * batches * (assume.sb_ops_per_batch + assume.looks_per_batch * assume.sb_ops_per_look)
    log_gb = (executions * assume.log_bytes_per_execution + chunks * assume.log_bytes_per_chunk) / 1e9
    baseline = assume.always_ready * assume.memory_gb * SECONDS_PER_MONTH if counts.push else 0.0
    return {
        "storage": storage,
        "service_bus": sb_ops / 1e6 * p["service_bus_basic"] if counts.push else 0.0,
        "execution": assume.memory_gb * (drain_s * drain_rate + other_s * p["flex_on_demand_gb_s"])
        + executions / 1e6 * p["flex_executions"],
        "always_ready": baseline * p["flex_always_ready_baseline_gb_s"],
        "log_analytics": log_gb * p["log_analytics"],
    }


def table(counts: dict[str, Counts], assume: Assumptions = Assumptions()) -> list[dict[str, Any]]:
    rows = []
    for label, per_day in VOLUMES:
        for system, c in counts.items():
            bill = monthly_bill(c, per_day, assume=assume)
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
    prices += [
        f"| {k} | {f'{v.usd:.6f}'.rstrip('0').rstrip('.')} | {v.per} | {v.source} | {v.as_of} |"
        for k, v in PRICES.items()
    ]
    categories = ["| operation | billed as |", "|---|---|"]
    categories += [f"| `{op}` | {cat} |" for op, cat in CATEGORY.items()]
    categories += ["| `blob.LeaseBlob.*` | blob_other |", "| `queue.*` | queue |"]
    return "\n".join([*lines, "", *prices, "", *categories])


def section() -> str:
    """BENCHMARKS.md's money section, from the same results the rest of the report reads."""
    assume = Assumptions()
    return f"""## What it costs in money (a model)

`python -m bench.cost`: a month (30 days) at list prices, this app beside the built-in queue trigger for the
same volumes, from the storage transactions per item and the items a second measured above (local, on
Azurite), the idle day modelled in section 4 (Flex Consumption, the timer every 6 hours, a 5-minute linger),
and named assumptions: {assume.items_per_batch:,} items a submit, {assume.memory_gb:g} GB instances, no
always-ready instance, about {assume.log_bytes_per_execution:,} bytes of logs per execution. Each storage operation
is priced by the category Microsoft bills it in (table below), and execution as Flex Consumption bills it: an
instance's busy time, each busy period at least 1,000 ms (so each short execution, a submit or a look, bills a
second). Free grants are not deducted; the execution time of a real handler is not in it (the no-op handler's);
nor are the platform's own Service Bus probes. The prices are inputs, with their source and date; several could
not be re-read here.

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
