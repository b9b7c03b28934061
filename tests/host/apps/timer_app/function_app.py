"""A timer app for the local host's tests; each run appends one JSON line to $TEST_MARKER_DIR/ticks.jsonl."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import azure.functions as func

app = func.FunctionApp()
TICKS = Path(os.environ["TEST_MARKER_DIR"]) / "ticks.jsonl"
USE_MONITOR = {"1": True, "0": False}.get(os.environ.get("TICK_USE_MONITOR", ""))


@app.timer_trigger(
    schedule="%TICK_SCHEDULE%",
    arg_name="timer",
    run_on_startup=os.environ.get("TICK_RUN_ON_STARTUP") == "1",
    use_monitor=USE_MONITOR,
)
async def tick(timer: func.TimerRequest) -> None:
    record = {
        "pid": os.getpid(),
        "at": datetime.now(UTC).isoformat(),
        "past_due": timer.past_due,
        "status": timer.schedule_status,
    }
    with TICKS.open("a") as f:
        f.write(json.dumps(record) + "\n")
