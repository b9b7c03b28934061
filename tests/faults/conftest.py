"""Fixtures of the fault suite: a whole stack per test (its own Azurite, broker and hosts), and the
recorder whose rows become RELIABILITY.md (`make reliability`).

Each scenario calls `reliability.record(...)` with what it measured; when the environment names
`RELIABILITY_JSON`, the rows are written there at the end of the session and `python -m
tests.faults.report` turns them into the table.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from devstack.procs import ServiceStartError
from tests.conftest import unavailable
from tests.faults.audit import Audit
from tests.faults.stack import Stack

REPORT_ENV = "RELIABILITY_JSON"


@dataclass(frozen=True)
class Row:
    scenario: str
    tries: int
    items: int
    lost: int
    duplicated: int
    reexecutions: int
    recover_s: str
    proves: str


@dataclass
class Recorder:
    rows: list[Row] = field(default_factory=list)

    def record(self, scenario: str, found: Audit, *, tries: int, recover_s: str, proves: str) -> None:
        """One row: what the audit of the scenario's batches found, how often the fault was tried, and
        how long recovery took."""
        row = Row(scenario, tries, found.items, found.lost, found.duplicated, found.reexecutions, recover_s, proves)
        self.rows.append(row)


@pytest.fixture(scope="session")
def reliability() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    target = os.environ.get(REPORT_ENV)
    if target:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([asdict(r) for r in recorder.rows], indent=2) + "\n")


StartStack = Callable[..., Stack]


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[StartStack]:
    """`start_stack(settings, hosts=1, lock_s=5)`: a fresh stack for this test, stopped at its end."""
    stacks: list[Stack] = []

    def start(settings: Mapping[str, str] | None = None, *, hosts: int = 1, lock_s: int = 5) -> Stack:
        stack = Stack(tmp_path / f"stack-{len(stacks)}", uuid.uuid4().hex[:10], settings, lock_s=lock_s)
        stacks.append(stack)
        try:
            return stack.start(hosts=hosts)
        except ServiceStartError as e:
            unavailable("the local stack", e)
            raise

    yield start
    for stack in stacks:
        stack.close()
