"""`make reliability` rewrites RELIABILITY.md's drill table and keeps what other commands and people wrote below
its marker (the simulation's section, tenants at scale)."""

from __future__ import annotations

from pathlib import Path

from tests.faults import report

ROOT = Path(__file__).resolve().parents[2]


def test_a_regeneration_keeps_the_sections_below_the_marker_and_drops_the_old_table() -> None:
    previous = "# old\n| old row |\n\n" + report.KEPT + "\n\n## The simulation\nwritten elsewhere\n"
    rendered = report.render([], report.kept_part(previous))
    assert rendered.startswith(report.INTRO)
    assert "| old row |" not in rendered
    assert rendered.endswith(report.KEPT + "\n\n## The simulation\nwritten elsewhere\n")


def test_the_committed_file_has_the_marker_above_the_simulation_section() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    assert text.index(report.KEPT) < text.index("## The simulation")
