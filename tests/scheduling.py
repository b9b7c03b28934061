"""How `make test` spreads the suite over pytest-xdist workers: a file's tests go to one worker together (its
module- and class-scoped stacks start once), and a directory of ONE_WORKER_DIRS goes whole to one worker, in
order (tests/hostile's secret scan reads the replies every hostile test collected on the same stack).

pytest-xdist's own `--dist loadgroup` cannot do this on the pinned pytest: it groups by rewriting
`item._nodeid`, which pytest 9 no longer reads, so every test became its own unit and the groups were ignored.
This scheduler groups on the controller instead, from the node ids the workers report. It also gives node ids
that a plugin repeats (schemathesis's one id per API operation) a unique name, so each of them still runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from xdist.scheduler import LoadScopeScheduling

ONE_WORKER_DIRS = {"hostile"}
REPEAT = "\x00"  # joins a repeated node id to its ordinal; never part of a real node id


def group_of(nodeid: str) -> str:
    """The unit a test is scheduled in: its directory for ONE_WORKER_DIRS, otherwise its file."""
    file = nodeid.split(REPEAT, 1)[0].split("::", 1)[0]
    parts = file.split("/")
    if len(parts) >= 3 and parts[1] in ONE_WORKER_DIRS:
        return "/".join(parts[:2])
    return file


def unique(collection: Sequence[str]) -> list[str]:
    """The collection with each repeat of a node id told apart (the first keeps its own name)."""
    seen: Counter[str] = Counter()
    named = []
    for nodeid in collection:
        named.append(nodeid if not seen[nodeid] else f"{nodeid}{REPEAT}{seen[nodeid]}")
        seen[nodeid] += 1
    return named


class FileGroups(LoadScopeScheduling):
    """xdist's load-by-scope scheduler with our groups, the largest group first."""

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        super().add_node_collection(node, unique(collection))

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)
