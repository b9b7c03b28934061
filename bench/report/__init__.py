"""BENCHMARKS.md, written from a full run's document (`make bench` regenerates it; `python -m bench --report-only`
rewrites it from the committed results).

One renderer walks `SECTIONS`, in order; each section is owned by its benchmark (`bench.measures.<name>.section`)
or is the report's own frame (`front`, `claims`, `findings`). A section reads the run's document or, for a
benchmark with a command of its own, its own result file in bench/results/; each section names its command and
commit. The first screen is the targets (the main run's, then `TARGETS`: each other benchmark's rows) and the app
beside the peers; the history of how figures were reached is the last section (`claims`). Adding a benchmark is its
package under `bench.measures` and a line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import cost
from bench.measures.chunked import section as chunked
from bench.measures.curves import section as curves
from bench.measures.fairness import beside_section, flow, parts
from bench.measures.idle import section as idle
from bench.measures.idle_sources import section as idle_sources
from bench.measures.latency import section as latency
from bench.measures.platform import section as platform
from bench.measures.raw_limit import section as raw_limit
from bench.measures.rounds import section as rounds
from bench.measures.tenants import section as tenants
from bench.measures.throughput import section as throughput
from bench.measures.tracing_cost import section as tracing_cost
from bench.report import claims, findings, front

Section = Callable[[dict[str, Any]], str]


def own_file(section: Callable[[], str]) -> Section:
    """A section read from its benchmark's own result file, not from the run's document."""
    return lambda doc: section()


# The rows each benchmark with a command of its own adds to the first screen's targets table.
TARGETS: list[Callable[[], list[str]]] = [
    curves.headline_targets,
    tenants.headline_targets,
    tracing_cost.headline_targets,
    flow.headline_targets,
    rounds.headline_targets,
]


def targets(doc: dict[str, Any]) -> str:
    return front.targets(doc, [row for rows in TARGETS for row in rows()])


SECTIONS: list[Section] = [
    front.header,
    targets,
    front.side_by_side,
    throughput.transactions,
    throughput.throughput,
    latency.latency,
    idle.idle,
    own_file(idle_sources.section),
    raw_limit.raw_limit,
    throughput.memory,
    own_file(chunked.section),
    own_file(rounds.section),
    own_file(curves.section),
    own_file(tenants.section),
    own_file(tracing_cost.section),
    own_file(flow.section),
    own_file(parts.section),
    own_file(parts.section_spin),
    own_file(beside_section.section),
    own_file(platform.section),
    own_file(cost.section),
    findings.findings,
    front.method,
    claims.section,
]


def render(doc: dict[str, Any]) -> str:
    return "\n".join(section(doc) for section in SECTIONS).rstrip() + "\n"
