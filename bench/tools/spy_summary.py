"""Where a sampled process spent its time, from py-spy's raw (collapsed) stacks (the parsing is pure).

    python -m bench.tools.spy_summary RAW --into bench/results/fairness-parts.json

A diagnostic run by hand (py-spy is not among the project's requirements): `py-spy record --pid PID --format
raw --nonblocking` on the local host during a run, then this. Each line of RAW is `frame;frame;... count`, the
root first. A sample is idle when its innermost frame waits in the selector (or is an idle pool thread); an
area's share counts every sample with one of the area's files anywhere on its stack (areas overlap: a receive's
SDK call counts in both).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

AREAS = {
    "receive (shared/engine/receiving.py)": ("shared/engine/receiving.py",),
    "settle (shared/engine/settling.py)": ("shared/engine/settling.py",),
    "result records (shared/store/result_store.py)": ("shared/store/result_store.py",),
    "lane listing (shared/engine/lane_watch.py, lane_queues.py)": ("lane_watch.py", "lane_queues.py"),
    "submit (shared/intake)": ("shared/intake/",),
    "JSON (shared/core/fastjson.py, json)": ("fastjson.py", "json/"),
    "Azure SDK (azure.core, azure.storage)": ("core/pipeline/", "core/tracing/", "queue/_", "blob/_"),
    "HTTP client (aiohttp/)": ("aiohttp/",),
    "the handler (bench/handlers.py)": ("bench/handlers.py", "bench/tools/handlers.py"),
}
IDLE = ("select (selectors.py", "_worker (concurrent/futures/thread.py", "wait (threading.py")  # leaf frames


def parse(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    out = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def summary(stacks: list[tuple[list[str], int]]) -> dict[str, Any]:
    total = sum(n for _, n in stacks)
    idle = sum(n for frames, n in stacks if frames and any(i in frames[-1] for i in IDLE))
    busy = total - idle
    areas = {
        name: sum(n for frames, n in stacks if any(m in f for f in frames for m in marks))
        for name, marks in AREAS.items()
    }
    return {
        "samples": total,
        "idle_share": round(idle / total, 3) if total else None,
        "busy_samples": busy,
        "areas_share_of_busy": {k: round(v / busy, 3) if busy else None for k, v in areas.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.spy_summary", description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--into", type=Path, help="a result file to store it in, as its `profile`")
    parser.add_argument("--note", default="", help="what was sampled, and when")
    args = parser.parse_args(argv)
    found = summary(parse(args.raw.read_text().splitlines())) | {"note": args.note}
    if args.into is not None:
        doc = json.loads(args.into.read_text())
        doc["profile"] = found
        args.into.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
