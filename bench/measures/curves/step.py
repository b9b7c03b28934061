"""One step of a curve point (`bench.curves`), in a process of its own so its memory is its own.

    python -m bench.measures.curves.step submit --items N --summary out.json
        Submit one batch of N items through the app's own `submit` (the HTTP route's code without HTTP).
    python -m bench.measures.curves.step reads --batch-id ID --summary out.json
        The status read, the first batch-list page and the whole results export, each through the HTTP API's
        own function (`shared.api`: the routes' code without HTTP), timed and counted.

App settings come from the environment. Each step's peak RSS is VmHWM reset just before the step
(`bench.tools.memory.reset_peak`), with the RSS at that moment: the growth is the step's own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.tools.items import items
from bench.tools.memory import peak_rss_mb, reset_peak, rss_mb
from shared import api, runtime
from shared.core.settings import Settings
from shared.intake.submit import submit
from shared.telemetry import metering

STATUS_READS = 5
EXPORT_PAGE = api.MAX_RESULT_LINES


def body_of(count: int, tag: str, every: int = 50_000) -> bytes:
    """The batch's NDJSON body, built a slice at a time (a million item dicts at once would be the bench's
    memory, not the app's)."""

    def lines() -> Iterator[str]:
        for start in range(0, count, every):
            for item in items(tag, min(every, count - start), start):
                yield json.dumps(item, separators=(",", ":"))

    return "\n".join(lines()).encode("ascii")


class Step:
    """Time, storage transactions and memory growth of one awaited step."""

    def __init__(self) -> None:
        self.found: dict[str, Any] = {}

    async def measure(self, call: Callable[[], Awaitable[Any]]) -> Any:
        gc.collect()
        reset_peak()
        base = rss_mb()
        started = time.monotonic()
        with metering.tally() as tally:
            out = await call()
        self.found = {
            "seconds": time.monotonic() - started,
            "transactions": dict(sorted(tally.items())),
            "rss_at_start_mb": round(base, 1),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_rss_growth_mb": round(peak_rss_mb() - base, 1),
        }
        return out


async def submit_step(count: int) -> dict[str, Any]:
    runtime.configure(Settings.from_env(os.environ))
    body = body_of(count, "C")
    step = Step()
    done = await step.measure(
        lambda: submit(
            runtime.services(), body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
        )
    )
    await runtime.close()
    return step.found | {"batch_id": done.manifest.batch_id, "chunks": done.manifest.chunks, "body_bytes": len(body)}


async def reads_step(batch_id: str) -> dict[str, Any]:
    runtime.configure(Settings.from_env(os.environ))
    out: dict[str, Any] = {}
    times, step = [], Step()
    for _ in range(STATUS_READS):  # the first is the cold one; the median says what a poller sees
        answer = await step.measure(lambda: api.batch_status(batch_id))
        assert answer.status == 200, answer.body
        times.append(step.found["seconds"])
    out["status"] = step.found | {"seconds": statistics.median(times), "seconds_each": times}
    out["status_body"] = {k: answer.body.get(k) for k in ("status", "items", "chunks")}
    listed = await step.measure(lambda: api.batch_list({}))
    assert listed.status == 200, listed.body
    out["batch_list_page"] = step.found | {"batches": len(listed.body["batches"])}

    async def export_all() -> tuple[int, int]:
        lines, pages, token = 0, 0, "0"
        while token is not None:
            page = await api.batch_results(batch_id, {"limit": str(EXPORT_PAGE), "continuation": token})
            assert page.status == 200, page.body
            lines += (page.raw or b"").count(b"\n")
            pages += 1
            token = page.headers.get("X-Continuation")
        return lines, pages

    lines, pages = await step.measure(export_all)
    out["export"] = step.found | {"lines": lines, "pages": pages, "page_lines": EXPORT_PAGE}
    await runtime.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.measures.curves.step")
    parser.add_argument("mode", choices=["submit", "reads"])
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--batch-id")
    parser.add_argument("--summary", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.mode == "submit":
        result = asyncio.run(submit_step(args.items))
    else:
        result = asyncio.run(reads_step(str(args.batch_id)))
    args.summary.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
