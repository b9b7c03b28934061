"""Where the benchmarks' results live and how a section reads and shows them: the result files, a section's
heading (saying so when its run is missing), and the number formats every section uses."""

from __future__ import annotations

import json
import subprocess
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


def recorded_at(name: str, doc: dict[str, Any] | None = None) -> str:
    """The commit a result file was measured on: the one its run recorded, or else the commit that added the file
    (a file changed since its last commit says so)."""
    machine = (doc or {}).get("machine") or {}
    if machine.get("commit"):
        dirty = " with uncommitted changes" if machine.get("tree_modified") else ""
        return f"`{str(machine['commit'])[:12]}`{dirty}"
    path = RESULTS / name

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=RESULTS, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    if git("status", "--porcelain", "--", str(path)):
        return "not yet committed"
    commit = git("log", "-1", "--format=%h", "--abbrev=12", "--", str(path))
    return f"`{commit}` (the result's commit)" if commit else "unknown (no git history here)"


def source(command: str, name: str, doc: dict[str, Any] | None = None) -> str:
    """The line under a section's heading: the command that measures its figures, their file and commit."""
    return f"Command: `{command}` -> [`bench/results/{name}`](bench/results/{name}); commit {recorded_at(name, doc)}."


def target_row(target: str, figure: str, met: bool, command: str, name: str, doc: dict[str, Any] | None) -> str:
    """One row of the targets table on BENCHMARKS.md's first screen."""
    return f"| {target} | {figure} | {'yes' if met else '**no**'} | `{command}` | {recorded_at(name, doc)} |"


def run_source(doc: dict[str, Any]) -> str:
    """The source line of a section measured by the full run (`make bench`, bench/results/latest.json)."""
    return source(doc["command"], "latest.json", doc)


def section_start(name: str, title: str, command: str) -> tuple[dict[str, Any] | None, list[str]]:
    """A section's result file (None if missing) and its heading with the command and commit; for a missing file
    the heading says so."""
    doc = load(name)
    head = [f"## {title}", ""]
    if doc is None:
        return None, [*head, f"No run recorded (`{command}`).", ""]
    return doc, [*head, source(command, name, doc), ""]


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
