"""A batch's trace as a waterfall, from the span file `shared.telemetry.export` writes (pure; standard library only).

The batch's trace is every span of the trace its submit began (the submit, the publish of its doorbell, the
drain that event woke, each chunk of the batch), plus the drain sessions of other traces that served some of its
chunks (a chunk's span links to the session that ran it). Printed in start order with each span's offset from
the submit, its duration, the gap since the span before it ended, and a bar.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

BAR_WIDTH = 40
SHOWN = ("queue_drain.reason", "queue_drain.chunk", "queue_drain.items", "queue_drain.outcome", "queue_drain.slot")


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Spans from the trace file and the one before it (`<name>.1`); unreadable lines are skipped."""
    spans = []
    for one in (path.with_name(path.name + ".1"), path):
        try:
            lines = one.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                span = json.loads(line)
            except ValueError:
                continue
            if isinstance(span, dict) and {"trace_id", "span_id", "start_ns", "end_ns", "name"} <= span.keys():
                spans.append(span)
    return spans


def batch_spans(spans: Iterable[dict[str, Any]], batch_id: str) -> list[dict[str, Any]]:
    spans = list(spans)
    traces = {
        s["trace_id"]
        for s in spans
        if s["name"] == "queue_drain.submit" and s.get("attributes", {}).get("queue_drain.batch_id") == batch_id
    }
    mine = [s for s in spans if s["trace_id"] in traces]
    ids = {s["span_id"] for s in mine}
    linked = {link["span_id"] for s in mine for link in s.get("links", [])}
    others = [s for s in spans if s["span_id"] in linked and s["span_id"] not in ids]
    return sorted(mine + others, key=lambda s: (s["start_ns"], s["end_ns"]))


def depth_of(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> int:
    depth, parent = 0, span.get("parent_id")
    while parent in by_id and depth < 16:
        depth, parent = depth + 1, by_id[parent].get("parent_id")
    return depth


def render(spans: Sequence[dict[str, Any]], batch_id: str) -> list[str]:
    if not spans:
        return [f"no spans for batch {batch_id} (is TRACES_FILE set for the host, and has the batch been submitted?)"]
    start = spans[0]["start_ns"]
    total = max(max(s["end_ns"] for s in spans) - start, 1)
    by_id = {s["span_id"]: s for s in spans}
    lines = [f"batch {batch_id}: {len(spans)} spans over {total / 1e6:.1f} ms", ""]
    lines.append(f"{'start ms':>9} {'dur ms':>8} {'gap ms':>7}  {'':<{BAR_WIDTH}}  span")
    last_end = start
    for s in spans:
        offset, duration = s["start_ns"] - start, s["end_ns"] - s["start_ns"]
        gap = max(0, s["start_ns"] - last_end)
        last_end = max(last_end, s["end_ns"])
        lead = round(offset / total * BAR_WIDTH)
        width = max(1, round(duration / total * BAR_WIDTH))
        bar = (" " * lead + "#" * width)[:BAR_WIDTH]
        attrs = s.get("attributes", {})
        detail = " ".join(f"{k.split('.', 1)[1]}={attrs[k]}" for k in SHOWN if k in attrs)
        marker = "" if s["trace_id"] == spans[0]["trace_id"] else " (linked)"
        name = "  " * depth_of(s, by_id) + s["name"].removeprefix("queue_drain.")
        times = f"{offset / 1e6:>9.1f} {duration / 1e6:>8.1f} {gap / 1e6:>7.1f}"
        lines.append(f"{times}  {bar:<{BAR_WIDTH}}  {name} {detail}{marker}")
    lines += ["", *milestones(spans)]
    return lines


def milestones(spans: Sequence[dict[str, Any]]) -> list[str]:
    """Wake (the doorbell's publish ended -> its drain started) and submit -> first and last chunk handled."""
    submit = next((s for s in spans if s["name"] == "queue_drain.submit"), None)
    publish = next((s for s in spans if s["name"] == "queue_drain.publish"), None)
    drains = [s for s in spans if s["name"] == "queue_drain.drain"]
    chunks = [s for s in spans if s["name"] == "queue_drain.chunk"]
    out = []
    if publish is not None and drains:
        woke = min((d["start_ns"] for d in drains if d["start_ns"] >= publish["start_ns"]), default=None)
        if woke is not None:
            out.append(f"wake: doorbell published -> drain started in {(woke - publish['end_ns']) / 1e6:.1f} ms")
    if submit is not None and chunks:
        first = min(c["end_ns"] for c in chunks) - submit["end_ns"]
        last = max(c["end_ns"] for c in chunks) - submit["end_ns"]
        out.append(f"accepted -> first chunk handled {first / 1e6:.1f} ms, last {last / 1e6:.1f} ms")
        out.append(f"chunks: {len(chunks)}, drain sessions: {len(drains)}")
    return out
