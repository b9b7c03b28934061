"""How `make test` spreads the suite over pytest-xdist workers. Tests whose files start a stack once for the file
(a module- or class-scoped fixture) go to one worker together, so the stack starts once; a directory of WHOLE_DIRS
goes whole to one worker, in order (tests/hostile's secret scan reads the replies every hostile test collected on
the same stack); every other test is its own unit, so the two workers stay evenly loaded.
`tests/infra/test_scheduling.py` checks that every test using such a fixture is in a grouped file.

pytest-xdist's own `--dist loadgroup` cannot do this on the pinned pytest: it groups by rewriting
`item._nodeid`, which pytest 9 no longer reads, so every test became its own unit and the groups were ignored.
This scheduler groups on the controller instead, from the node ids the workers report. It also gives node ids
that a plugin repeats (schemathesis's one id per API operation) a unique name, so each of them still runs.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

WHOLE_DIRS = {"hostile"}
# Directories and files whose stacks are module- or class-scoped.
FILE_DIRS = {"client", "dashboard", "faults", "host", "servicebus"}
FILE_FILES = {"tests/sim/test_conformance_bus.py", "tests/infra/test_structure.py"}
REPEAT = "\x00"  # joins a repeated node id to its ordinal; never part of a real node id


def group_of(nodeid: str) -> str:
    """The unit a test is scheduled in: its directory, its file, or itself."""
    nodeid = nodeid.split(REPEAT, 1)[0]
    file = nodeid.split("::", 1)[0]
    parts = file.split("/")
    if len(parts) >= 3 and parts[1] in WHOLE_DIRS:
        return "/".join(parts[:2])
    if (len(parts) >= 3 and parts[1] in FILE_DIRS) or file in FILE_FILES:
        return file
    return nodeid


def unique(collection: Sequence[str]) -> list[str]:
    """The collection with each repeat of a node id told apart (the first keeps its own name)."""
    seen: Counter[str] = Counter()
    named = []
    for nodeid in collection:
        named.append(nodeid if not seen[nodeid] else f"{nodeid}{REPEAT}{seen[nodeid]}")
        seen[nodeid] += 1
    return named


class FileGroups(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types for it
    """xdist's load-by-scope scheduler with our units, the largest unit first."""

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        super().add_node_collection(node, unique(collection))

    def _split_scope(self, nodeid: str) -> str:
        unit = group_of(nodeid)
        return nodeid if unit == nodeid.split(REPEAT, 1)[0] else unit  # a repeat is its own unit too


def pytest_collection_finish(session: Any) -> None:
    """With `-p tests.scheduling` and SCOPE_PROBE set: write each test that uses a module-, class- or
    package-scoped fixture of the suite's own, one node id a line, to that file (tests/infra/test_scheduling.py)."""
    if not (probe := os.environ.get("SCOPE_PROBE")):
        return
    scoped = []
    for item in session.items:
        defs = getattr(item, "_fixtureinfo", None)
        for fixture in (d for ds in (defs.name2fixturedefs.values() if defs else ()) for d in ds):
            if fixture.scope in {"module", "class", "package"} and fixture.func.__module__.startswith("tests."):
                scoped.append(item.nodeid)
                break
    with open(probe, "w", encoding="utf-8") as out:
        out.write("".join(f"{nodeid}\n" for nodeid in scoped))
