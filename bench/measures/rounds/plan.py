"""The rounds' order and what they add up to (pure): medians of the ratios, CPU seconds per message, and the
row each run adds to the CPU history (bench/results/cpu_history.json)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

APP, A2, RAW = "app", "a2", "raw"
BEFORE = "before"  # the app as another checkout has it (--before): a change's cost measured in the same rounds


def order(round_index: int, before: bool = False) -> tuple[str, ...]:
    """Who drains when in a round: the app and (a') alternate which goes first (app, (a'), (a'), app, ...), and
    the raw loop is always right beside the app (its paired ratio sees the same moment); the app before a change,
    if measured, right beside it too, on the other side in every other round."""
    sides = (RAW, APP, A2) if round_index % 2 == 0 else (A2, APP, RAW)
    if not before:
        return sides
    at = sides.index(APP)
    return (*sides[:at], BEFORE, APP, *sides[at + 1 :]) if round_index % 4 < 2 else (
        *sides[: at + 1], BEFORE, *sides[at + 1 :])  # fmt: skip


def per_message(cpu_seconds: float | None, messages: int) -> float | None:
    return None if cpu_seconds is None or not messages else cpu_seconds / messages


def median(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def summarize(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per round each side's messages/s (whole session) and CPU s per message; the medians of the ratios."""

    def ratios(num: str, den: str, key: str = "messages_per_s") -> list[float | None]:
        return [r[num][key] / r[den]["messages_per_s"] if r.get(num) and r.get(den) else None for r in rounds]

    out = {
        "app_over_a2": ratios(APP, A2),
        "app_over_raw": ratios(APP, RAW),
        "app_steady_over_raw": ratios(APP, RAW, "messages_per_s_steady"),
    }
    medians = {f"median_{k}": median(v) for k, v in out.items()}
    cpu = {f"median_cpu_s_per_message_{k}": median([r[k]["cpu_s_per_message"] for r in rounds if r.get(k)])
           for k in (APP, A2, RAW, BEFORE)}  # fmt: skip
    cpu["median_cpu_s_per_message_app_steady"] = median([r[APP].get("cpu_s_per_message_steady") for r in rounds])
    change = [r[APP]["cpu_s_per_message"] / r[BEFORE]["cpu_s_per_message"] for r in rounds if r.get(BEFORE)]
    return out | medians | cpu | {"cpu_after_over_before": change, "median_cpu_after_over_before": median(change)}


def history_row(
    commit: str | None, modified: bool, command: str, items: int, summary: dict[str, Any], load: dict[str, Any]
) -> dict[str, Any]:
    """One line of the CPU history: the commit, both sides' CPU seconds per message, and how it was measured."""
    return {
        "commit": (commit or "?")[:12] + ("+" if modified else ""),
        "command": command,
        "items": items,
        "app_cpu_s_per_message": summary.get("median_cpu_s_per_message_app"),
        "a2_cpu_s_per_message": summary.get("median_cpu_s_per_message_a2"),
        "load_mean": load.get("mean"),
    }
