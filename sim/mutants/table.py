"""The revert table in RELIABILITY.md, written from the runner's results, never by hand: one row per mutant in
`MUTANTS` (defects put back from a fix apart from defects of our making), caught with its invariant and seed or
not caught with why, and the counts in its header computed from the rows. A row whose mutant was not run is shown
as not run, never as caught."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from sim.mutants.base import Mutant

BEGIN, END = "<!-- revert table: begin (python -m sim.mutants --table) -->", "<!-- revert table: end -->"


@dataclass(frozen=True)
class Result:
    """What the runner found for one mutant."""

    name: str
    family: str
    tried: int
    seed: int | None  # the catching seed, None if none within `tried`
    violation: str = ""
    others: int = 0  # other violations the mutant brought on the catching seed (0: its invariant alone caught it)
    commit: str = ""  # the code it was measured on (`git rev-parse --short HEAD` when the run began)

    def line(self) -> str:
        return json.dumps(asdict(self))


def load(paths: Iterable[Path]) -> dict[str, Result]:
    """Results from the runner's `--json` files; a mutant found in several, the last one read."""
    found: dict[str, Result] = {}
    for path in paths:
        for text in path.read_text().splitlines():
            if text.strip():
                result = Result(**json.loads(text))
                found[result.name] = result
    return found


def rows(mutants: Iterable[Mutant], found: dict[str, Result]) -> list[str]:
    out = ["| defect put back | fixed by | mutant | invariant that caught it | seeds it took | on |", "|---" * 6 + "|"]
    for m in mutants:
        result = found.get(m.name)
        fixed = f"{m.fixed_by}" if not m.invented else "none: a defect of our making"
        on = f"{result.commit}" if result is not None and result.commit else "-"
        if result is None:
            verdict, seeds = "not run", "-"
        elif result.seed is None:
            verdict = f"**not caught**: {m.why}" if m.why else "**not caught**"
            seeds = f"- ({result.tried} `{result.family}`)"
        else:
            alone = "" if result.others else " (alone)"
            verdict = f"{m.invariant or _quote(result.violation)}{alone}"
            seeds = f"{result.seed + 1} (`{result.family}` {result.seed})"
        out.append(f"| {m.defect} | {fixed} | `{m.name}` | {verdict} | {seeds} | {on} |")
    return out


def header(mutants: list[Mutant], found: dict[str, Result]) -> str:
    def caught(group: list[Mutant]) -> int:
        return sum(1 for m in group if (r := found.get(m.name)) is not None and r.seed is not None)

    fixes = [m for m in mutants if not m.invented]
    ours = [m for m in mutants if m.invented]
    ran = sum(1 for m in mutants if m.name in found)
    return (
        f"**{caught(mutants)} of {len(mutants)} defects caught**: {caught(fixes)} of {len(fixes)} fixes put back, "
        f"{caught(ours)} of {len(ours)} defects of our making ({ran} of {len(mutants)} run; "
        f"{len(mutants) - caught(mutants)} not caught or not run)."
    )


def render(mutants: list[Mutant], found: dict[str, Result]) -> str:
    return "\n".join([BEGIN, header(mutants, found), "", *rows(mutants, found), END])


def write_into(path: Path, table: str) -> None:
    """Replace the table between its markers in `path` (RELIABILITY.md)."""
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path} has no revert table markers ({BEGIN} ... {END})")
    path.write_text(pattern.sub(lambda _: table, text))


def _quote(violation: str) -> str:
    text = re.sub(r"^t=[0-9.]+: ", "", violation)
    return f'"{text[:90]}"'.replace("|", "/")
