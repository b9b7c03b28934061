"""BENCHMARKS.md's section on what tracing costs, from bench/results/tracing.json (`python -m bench.tracing_cost`,
part of `make bench`); a missing file is said, not hidden."""

from __future__ import annotations

from bench.tools.results import load, section_start, target_row


def section() -> str:
    doc, head = section_start("tracing.json", "Tracing: what it costs the drain", "python -m bench.tracing_cost")
    if doc is None:
        return "\n".join(head)
    rows = [
        *head,
        f"Paired rounds on one stack (`bench.tracing_cost`): the same {doc['items']:,}-item backlog drained by "
        "the app's default settings and the no-op handler, once with tracing off (no exporter: the "
        "OpenTelemetry API is a no-op) and once on at the default sampling (every trace; a recording span per "
        "chunk and per drain session, written by the SDK's batch processor to the trace file `make run` uses), "
        "in alternating order. The no-op handler shows the overhead at its largest: a real handler's own time "
        "makes it a smaller share.",
        "",
        "| round | off: messages/s (steady) | on: messages/s (steady) | on ÷ off | spans written | "
        "drain CPU on ÷ off |",
        "|---|---|---|---|---|---|",
    ]
    for n, pair in enumerate(doc["rounds"]):
        off, on = pair["off"], pair["on"]
        rows.append(
            f"| {n + 1} | {off['messages_per_s_steady']:,.1f} | {on['messages_per_s_steady']:,.1f} | "
            f"{on['messages_per_s_steady'] / off['messages_per_s_steady']:.3f} | {on['spans_written']:,} | "
            f"{on['cpu_seconds'] / off['cpu_seconds']:.2f} |"
        )
    slower = doc["slower_fraction"]
    verdict = "met" if doc["target_met"] else "**missed**"
    rows += [
        "",
        f"Median on ÷ off message rate {doc['median_on_over_off_rate']:.3f}: tracing makes the drain "
        f"{abs(slower) * 100:.1f}% {'slower' if slower >= 0 else 'faster (noise)'}; the target, at most "
        f"{doc['target_slower_fraction'] * 100:.0f}% slower, is {verdict}. The drain process's CPU grows by a "
        f"median {(doc['median_on_over_off_cpu'] - 1) * 100:.0f}% with tracing on; on this machine Azurite, not "
        "the drain's CPU, sets the message rate, so the rate hides most of it. Where the drain is CPU-bound "
        "(a costly handler on a busy instance) expect up to that CPU share, or sample (`OTEL_TRACES_SAMPLER`).",
        "",
    ]
    return "\n".join(rows)


def headline_targets() -> list[str]:
    """Tracing's target for the first screen's table."""
    doc = load("tracing.json")
    if doc is None:
        return []
    return [
        target_row(
            f"tracing on slows the drain by at most {doc['target_slower_fraction']:.0%}",
            f"{doc['slower_fraction']:.1%} slower (median of {len(doc['rounds'])} paired rounds)",
            doc["target_met"],
            "python -m bench.tracing_cost",
            "tracing.json",
            doc,
        )
    ]
