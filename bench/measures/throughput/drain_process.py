"""Drain the app's queue once, in a process of its own, and report what it took.

    python -m bench.measures.throughput.drain_process --summary out.json [--profile out.txt]

App settings come from the environment, as in the function host. One `Drainer` (slot 0, the app's default
settings) runs until the queue is empty; the summary holds its DrainReport, wall seconds, the steady window
(first GetMessages to last DeleteMessage, `bench.tools.window`), CPU seconds of this process and its peak RSS.
With --profile, pyinstrument samples the run: its text report is written there, and the time spent in each
part of the per-message work goes into the summary (`bench.tools.profile_parts`). With --cpu-profile, where its
busy time went instead (`bench.tools.profile_parts.cpu_entries`: the selector's waits left out).
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

from bench.tools.memory import cpu_seconds, peak_rss_mb
from bench.tools.window import steady_window
from shared import runtime
from shared.core.settings import Settings
from shared.engine.drainer import Drainer


async def drain_once() -> dict[str, Any]:
    runtime.configure(Settings.from_env(os.environ))
    services = runtime.services()
    stamps: list[tuple[float, str]] = []
    cpu_at: dict[float, float] = {}  # this process's CPU seconds at each stamp
    count = services.counter.count

    def stamped(operation: str) -> None:  # every storage request, as the app's own metering sees it
        now = time.monotonic()
        stamps.append((now, operation))
        cpu_at[now] = cpu_seconds()
        count(operation)

    services.counter.count = stamped  # type: ignore[method-assign]
    started, cpu_started = time.monotonic(), cpu_seconds()
    report = await Drainer(services, services.settings.work_queue).run()
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu_started
    await runtime.close()
    window = steady_window(stamps)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "steady_seconds": window.seconds if window else None,
        # the CPU of the same window: the drain's work per message without its set-up and tear-down
        "steady_cpu_seconds": cpu_at[window.last_delete_s] - cpu_at[window.first_receive_s] if window else None,
        "set_up_seconds": window.first_receive_s - started if window else None,
        "report": report.as_dict(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.measures.throughput.drain_process")
    parser.add_argument("--summary", type=Path, required=True)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--cpu-profile", action="store_true", help="pyinstrument, where the CPU goes (`cpu_entries`)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.profile is not None:
        from pyinstrument import Profiler

        from bench.tools.profile_parts import parts

        profiler = Profiler(interval=0.001, async_mode="enabled")
        profiler.start()
        result = asyncio.run(drain_once())
        profiler.stop()
        args.profile.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        session = profiler.last_session
        assert session is not None
        result["profile_parts"] = parts(session.root_frame())
        result["profile_cpu_seconds"] = session.cpu_time
        result["profile_duration_s"] = session.duration
    elif args.cpu_profile:
        from pyinstrument import Profiler

        from bench.tools.profile_parts import cpu_entries

        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        result = asyncio.run(drain_once())
        profiler.stop()
        session = profiler.last_session
        assert session is not None
        result["cpu_profile"] = cpu_entries(session.root_frame(), top=15)
    else:
        result = asyncio.run(drain_once())
    result["peak_rss_mb"] = peak_rss_mb()
    args.summary.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
