"""Where the benchmarks' results live and how a section reads and shows them: the result files, a section's
heading (saying so when its run is missing), and the number formats every section uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
SYSTEMS = ("app", "a", "b", "c", "d")
PEERS = ("a", "b", "c", "d")


def load(name: str) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads((RESULTS / name).read_text())
    except (OSError, ValueError):
        return None
    return loaded


def section_start(name: str, title: str, command: str) -> tuple[dict[str, Any] | None, list[str]]:
    """A section's result file (None if missing) and its heading; for a missing file the heading says so."""
    doc = load(name)
    head = [f"## {title}", ""]
    return doc, head if doc is not None else [*head, f"No run recorded (`{command}`).", ""]


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7_200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3_600:.1f} h"


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"
