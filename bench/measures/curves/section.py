"""BENCHMARKS.md's cost curves (bench/results/curves.json, `make bench-curves`), with the results export's own row
(issue 28): a missing file is said, not hidden."""

from __future__ import annotations

from typing import Any

from bench.measures.curves.run import METRICS, curves
from bench.tools.results import fmt, load, section_start, target_row

EXPORT_ITEMS_PER_S, EXPORT_RSS_MB = 50_000, 100  # issue 28's targets for the export of 1,000,000 items

# What sets each curve's growth, from the code (checked against the measured slope beside it).
WHY = {
    "submit_s": "work linear in items (a fixed set-up weighs below 10^5): the submit parses, cuts and encodes every "
    "item and stores one message per chunk (`shared/intake/submit.py`, `shared/batch/chunking.py`); a measured "
    "slope under 1 is that set-up and the shared machine's noise",
    "drain_s": "linear in chunks (items / 250) above 10^5, a fixed set-up (lease, Service Bus connection) below: "
    "per chunk a share of a GetMessages of 32, the handler, a DeleteMessage (`shared/engine/drainer.py`)",
    "transactions": "linear in chunks: per chunk a PutMessage and a DeleteMessage and 1/32 of a GetMessages, per "
    "result blob one PutBlob (group commit), per batch a few fixed writes",
    "transactions_per_1000": "constant once the batch's fixed writes are spread: the per-chunk floor, about 8.2 "
    "per 1,000 items at 250 items a chunk",
    "submit_rss_growth_mb": "linear in items: the submit holds the whole body and its encoded items while it stores "
    "them (`shared/intake/submit.py`); MAX_BODY_BYTES (64 MB by default, about 580,000 of these items) caps one "
    "request",
    "drain_peak_rss_mb": "nearly flat: the drainer holds the messages in flight and one group commit of result "
    "records, not the batch",
    "status_s": "grows with the result blobs it lists (about one per 11,000 items here); transactions stay 2",
    "status_transactions": "constant up to 5,000 result blobs: a manifest read and one listing page "
    "(`shared/ops/reports.py` `read_batch_status`); one more page per 5,000 result blobs",
    "list_page_s": "grows with the result blobs of the batches on the page (one listing each)",
    "list_page_transactions": "constant: one index listing, one results listing per batch on the page "
    "(`read_batch_page`)",
    "export_s": "work linear in items: every line is built and serialised (`shared/ops/lifecycle.py` `export`); a "
    "measured slope under 1 is the per-page fixed cost and the shared machine's noise",
    "export_transactions": "linear in result blobs and pages: per page of 100,000 lines one manifest read and one "
    "listing, one GetBlob per result blob per window of 256 chunks",
    "export_rss_growth_mb": "bounded by one page (100,000 lines, `MAX_RESULT_LINES`) plus the listing's entries "
    "(a few dozen bytes a chunk): the slope flattens above 10^5",
    "result_blobs": "linear in chunks: one blob per group commit of settled chunks",
}


def cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and unit != "s":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:,.3f}" if value < 1 else f"{value:,.1f}"
    return fmt(value, 1 if value < 100 else 0)


def section() -> str:
    doc, rows = section_start("curves.json", "Cost and time against the batch's size", "make bench-curves")
    if doc is None:
        return "\n".join(rows)
    sizes = [p["items"] for p in doc["points"]]
    far = doc["extend_to"]
    found = curves(doc["points"], far)  # worked out again from the points, as the summary of `make bench` is
    m = doc["machine"]
    extending = far > max(sizes)
    tried = any(a["items"] == far for a in doc.get("attempts", []))
    reach = (
        ("The" if tried else f"{far:,} items were not run here; the")
        + f" {far:,} column extends the two largest measured sizes by their log-log slope, and says so in "
        "italics."
        if extending
        else f"{max(sizes):,} items were run too (its submit raised MAX_BODY_BYTES for a "
        f"{doc['points'][-1]['submit']['body_bytes'] / 1e9:.2f} GB body: beyond the 64 MB default one request may "
        "carry)."
    )
    reach += "".join(attempted(a) for a in doc.get("attempts", []))
    rows += [
        f"One batch of each size on one Azurite, the app alone (`make bench-curves`, {doc['duration_s'] / 60:.1f} "
        f"minutes; commit `{str(m['commit'])[:12]}`, the machine's {m['cores']} cores shared with other engineers' "
        "tests: times are noisy, transactions are not). Each step in a fresh process: the submit through the app's "
        "own `submit`, the drain by one `Drainer` (no-op handler), then the status read (median of 5), the first "
        "batch-list page and the whole results export through the HTTP API's own functions (`shared.api`: the "
        "routes without HTTP). RSS growth is the step's own peak (VmHWM reset before it) over its start. " + reach,
        "",
        "| | "
        + " | ".join(f"{n:,}" for n in sizes)
        + (f" | *{far:,} (extended)*" if extending else "")
        + " | grows | what sets it |",
        "|---|" + "---|" * (len(sizes) + 2 + extending),
    ]
    for name, (label, unit, _) in METRICS.items():
        curve = found[name]
        values = [cell(curve["values"].get(str(n)), unit) for n in sizes]
        if extending:
            values.append(f"*{cell(curve['extended'].get(str(far)), unit)}*")
        rows.append(
            f"| {label}{f' ({unit})' if unit else ''} | {' | '.join(values)} | "
            f"{curve['grows']} (slope {curve['slope'] if curve['slope'] is not None else '-'}) | {WHY.get(name, '')} |"
        )
    rows += ["", "![cost and time against the batch's size](bench/results/curves.png)", "", *export_row(doc)]
    return "\n".join(rows) + "\n"


def attempted(a: dict[str, Any]) -> str:
    """A size that was run but whose drain one session did not finish: what it did measure."""
    d = a["drain"]
    gets = d["transactions"].get("queue.GetMessages", 0)
    return (
        f" **{a['items']:,} items were tried** ({a['chunks']:,} chunks, a {a['submit']['body_bytes'] / 1e9:.2f} GB "
        f"body): the submit took {a['submit']['seconds']:,.0f} s and {a['submit']['peak_rss_growth_mb']:,.0f} MB "
        f"of RSS growth, the status read {a['status']['seconds'] * 1000:,.0f} ms; but one drain session handled "
        f"{d['items_ok']:,} items in {d['seconds']:,.0f} s and stopped at its budget (outcome `{d['outcome']}`): "
        f"{gets} GetMessages in that time, about {d['seconds'] / max(1, gets):.1f} s each, as Azurite serves a queue "
        f"{a['chunks']:,} messages deep of about 28 KB each. Draining it would take hours on this machine, so the "
        "column is extended, and the attempt's own figures are these."
    )


def export_row(doc: dict[str, Any]) -> list[str]:
    point = next((p for p in doc["points"] if p["items"] == 1_000_000), None)
    if point is None:
        return ["No 1,000,000-item export in this run.", ""]
    e = point["export"]
    rate_met = e["items_per_s"] >= EXPORT_ITEMS_PER_S
    rss_met = e["peak_rss_growth_mb"] <= EXPORT_RSS_MB
    return [
        "**The results export of a 1,000,000-item batch** (`GET /api/batches/{id}/results`, NDJSON pages of "
        f"{e['page_lines']:,} lines following `X-Continuation`; issue 28), from the same run:",
        "",
        "| | figure | target | met |",
        "|---|---|---|---|",
        f"| items/s | {fmt(e['items_per_s'], 0)} ({e['lines']:,} lines in {e['pages']} pages, "
        f"{e['seconds']:.1f} s) | >= {EXPORT_ITEMS_PER_S:,} | {'yes' if rate_met else '**no**'} |",
        f"| peak RSS growth of the process | {fmt(e['peak_rss_growth_mb'])} MB (from {fmt(e['rss_at_start_mb'])} MB) "
        f"| <= {EXPORT_RSS_MB} MB | {'yes' if rss_met else '**no**'} |",
        f"| storage transactions | {sum(e['transactions'].values()):,} "
        f"({', '.join(f'{k} {v:,}' for k, v in e['transactions'].items())}) | | |",
        "",
    ]


def headline_targets() -> list[str]:
    """The results export's targets (issue 28) for the first screen's table."""
    doc = load("curves.json")
    point = next((p for p in doc["points"] if p["items"] == 1_000_000), None) if doc else None
    if point is None:
        return []
    e = point["export"]
    return [
        target_row(
            f"results export of 1,000,000 items >= {EXPORT_ITEMS_PER_S:,} items/s",
            fmt(e["items_per_s"], 0),
            e["items_per_s"] >= EXPORT_ITEMS_PER_S,
            "make bench-curves",
            "curves.json",
            doc,
        ),
        target_row(
            f"results export: peak RSS growth <= {EXPORT_RSS_MB} MB",
            f"{fmt(e['peak_rss_growth_mb'])} MB",
            e["peak_rss_growth_mb"] <= EXPORT_RSS_MB,
            "make bench-curves",
            "curves.json",
            doc,
        ),
    ]
