"""The doors of the simulated world (`sim.families`): a few seeds of each family that opens them, each run
with every invariant; the timer runs what `function_app`'s timer runs; RELIABILITY.md names every feature whose
reach `python -m sim` prints. `make simulate` runs many more (RELIABILITY.md, "The simulation")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sim.platform import FEATURES
from sim.world import World, run

ROOT = Path(__file__).resolve().parents[2]
DOOR_SEEDS = [("lifecycle", 1), ("lifecycle", 3), ("idle", 1), ("platform", 0), ("platform", 2), ("replay", 1)]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "seed"), DOOR_SEEDS)
def test_every_invariant_holds_through_the_other_doors(family: str, seed: int) -> None:
    outcome = run(seed, family=family)
    assert outcome.ok, outcome.report()
    assert outcome.accepted > 0, outcome.report()
    assert outcome.features, outcome.report()


@pytest.mark.slow
def test_a_sync_handlers_calls_wait_for_their_threads_and_end_where_they_began() -> None:
    """Platform seed 35: a sync handler of 2-6 s a call whose threads start up to 3 s late (a busy machine)."""
    seen: list[World] = []
    outcome = run(35, family="platform", seen=seen)
    assert outcome.ok, outcome.report()
    world = seen[0]
    assert (world.scenario.handler, world.scenario.thread_start_s) == ("sync", (0.0, 3.0))
    calls = [c for c in world.calls if c.kind == "sync"]
    assert calls
    assert max(c.started_s - c.asked_s for c in calls) > 0.5  # a thread began late
    for call in calls:
        low, high = world.scenario.handler_s
        assert call.ended_s is None or low <= call.ended_s - call.started_s <= high + 1e-6, call
    assert world.in_flight == 0


def awaited_calls(source: str, function: str) -> list[str]:
    """The functions `function` awaits, each by its module's full name (`shared.ops.notice_sweep.sweep`)."""
    tree = ast.parse(source)
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == function)
    calls = [
        ast.unparse(n.value.func) for n in ast.walk(body) if isinstance(n, ast.Await) and isinstance(n.value, ast.Call)
    ]
    full = []
    for call in calls:
        head, _, rest = call.partition(".")
        full.append(names.get(head, head) + (f".{rest}" if rest else ""))
    return full


def test_the_simulated_timer_runs_what_the_timer_function_runs() -> None:
    app = awaited_calls((ROOT / "function_app.py").read_text(), "fallback_poll")
    sim = awaited_calls((ROOT / "sim" / "platform.py").read_text(), "body")
    assert app == sim, (app, sim)
    assert len(app) >= 2, app


def test_reliability_names_every_feature_the_reach_table_counts() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    missing = [f for f in FEATURES if f"`{f}`" not in text]
    assert not missing, missing
