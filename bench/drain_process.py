"""Drain the app's queue once, in a process of its own, and report what it took.

    python -m bench.drain_process --summary out.json [--profile out.txt]

App settings come from the environment, as in the function host. One `Drainer` (slot 0, the app's default
settings) runs until the queue is empty; the summary holds its DrainReport, wall seconds and peak RSS.
With --profile, pyinstrument samples the run and its text report is written there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.memory import peak_rss_mb
from shared import runtime
from shared.drain import Drainer
from shared.settings import Settings


async def drain_once() -> dict[str, Any]:
    runtime.configure(Settings.from_env(os.environ))
    services = runtime.services()
    started = time.monotonic()
    report = await Drainer(services, services.settings.work_queue).run()
    seconds = time.monotonic() - started
    await runtime.close()
    return {"seconds": seconds, "report": report.as_dict()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_process")
    parser.add_argument("--summary", type=Path, required=True)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="enabled")
        profiler.start()
        result = asyncio.run(drain_once())
        profiler.stop()
        args.profile.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    else:
        result = asyncio.run(drain_once())
    result["peak_rss_mb"] = peak_rss_mb()
    args.summary.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
