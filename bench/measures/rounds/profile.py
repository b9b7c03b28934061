"""Where the app's drain spends its CPU: one drain of its own backlog under pyinstrument (the selector's waits
left out, `bench.tools.profile_parts.cpu_entries`), per message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.measures.throughput.run import drain_app, submit_backlog
from bench.tools.config import app_env


async def app_cpu_profile(storage: str, servicebus: str, token: str, count: int, run_dir: Path) -> dict[str, Any]:
    env = app_env(storage, servicebus, "profile", token, HANDLER="shared.handlers.noop:handle")
    await submit_backlog(env, count, "profile")
    drained = drain_app(env, run_dir, "cpu-profile", cpu_profile=True)
    messages = drained["report"]["messages"]
    return {
        "items": count,
        "messages": messages,
        "cpu_seconds_under_profiler": drained["cpu_seconds"],
        "cpu_s_per_message_under_profiler": drained["cpu_seconds"] / messages if messages else None,
        **drained["cpu_profile"],
    }
