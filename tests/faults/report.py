"""Write RELIABILITY.md from the rows the fault suite recorded (`make reliability`).

    RELIABILITY_JSON=.devstack/reliability.json pytest -m faults
    python -m tests.faults.report [.devstack/reliability.json] [RELIABILITY.md]

A scenario without a row (its test failed or did not run) is listed as such, never left out.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_JSON = Path(".devstack/reliability.json")
DEFAULT_OUT = Path("RELIABILITY.md")

# The scenarios, by the number each row's name starts with (8 and 9: issue 18; 10: issue 12).
SCENARIOS = {
    "1": "`kill -9` of the host mid-drain, restarted each time",
    "2": "Azurite restarted mid-drain (same data folder)",
    "3": "Service Bus stand-in stopped during submits, then restarted",
    "4": "handler fails some items always, some transiently",
    "5": "four hosts draining one queue at once",
    "6": "trigger storm: 1,000 trigger events for one queue",
    "7": "drainer killed holding its lease",
    "8": "storage and Service Bus failing under a drainer, then `kill -9`, fallback 10 minutes away",
    "9": "replay races: concurrent replays of a batch with duplicate parked copies",
    "10": "large hostile bodies during a drain",
}

INTRO = """# Reliability drills

Each row is one fault-injection scenario run against the whole local stack as separate processes:
a real Azurite, the Service Bus stand-in driven by the unmodified `azure-servicebus` SDK, and one or
more local function hosts running the unchanged `function_app.py`. Faults are real: `kill -9` of a
host by its pid, Azurite and the broker stopped and started again on the same ports and data.

**Tries** is how often the fault was injected (kills, outages, submits deferred, failing items,
trigger events). Every item's result is counted in the result blobs: **lost** (items with no
result) and **duplicated** (items with more than one result) must both be 0, and the tests fail
otherwise. **Handler re-executions** are the handler's runs on an item beyond its first (work
redone after a crash, or a failed item retried): processing is at least once, and results are
written idempotently. The figures are those of the last run; they vary from run to run.

Regenerate with `make reliability` (runs `pytest -m faults` with `RELIABILITY_JSON` set, then
`python -m tests.faults.report`). The scenarios also run in `make test`.
"""

COLUMNS = ("scenario", "tries", "items", "lost", "duplicated results", "handler re-executions", "time to recover")


def number(row: Mapping[str, Any]) -> str:
    return str(row["scenario"]).split(".", 1)[0]


def table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    by_number = {number(r): r for r in rows}
    for key, title in SCENARIOS.items():
        r = by_number.get(key)
        if r is None:
            lines.append(f"| {key}. {title} | no result: the test failed or did not run | | | | | |")
            continue
        cells = (r["scenario"], f"{r['tries']:,}", f"{r['items']:,}", r["lost"], r["duplicated"])
        lines.append("| " + " | ".join(str(c) for c in (*cells, f"{r['reexecutions']:,}", r["recover_s"])) + " |")
    return lines


def proofs(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [f"- **{r['scenario']}**: {r['proves']}." for r in sorted(rows, key=number)]


# What follows this line in RELIABILITY.md (the simulation, tenants at scale) is written by other commands and by
# hand: a regeneration keeps it as it is.
KEPT = "<!-- kept: the sections below are not written by make reliability, which keeps them -->"


def render(rows: Sequence[Mapping[str, Any]], kept: str = "") -> str:
    parts = [INTRO, *table(rows), "", "## What each scenario proves", "", *proofs(rows)]
    return "\n".join(parts) + "\n" + (f"\n{kept}" if kept else "")


def kept_part(previous: str) -> str:
    """The part of the previous file from the KEPT marker on ("" if it has none)."""
    at = previous.find(KEPT)
    return previous[at:] if at >= 0 else ""


def main(argv: Sequence[str]) -> int:
    source = Path(argv[0]) if argv else DEFAULT_JSON
    target = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    if not source.exists():
        print(f"{source} not found: run the fault suite with RELIABILITY_JSON={source} first", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = json.loads(source.read_text())
    target.write_text(render(rows, kept_part(target.read_text()) if target.exists() else ""))
    print(f"wrote {target} ({len(rows)} of {len(SCENARIOS)} scenarios)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
