"""The interleaved rounds (`bench.rounds`): their order, what they add up to, the CPU history's lines, and where a
profile's busy time goes (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.measures.rounds import plan
from bench.tools.profile_parts import cpu_entries


def test_the_app_and_a2_alternate_and_the_raw_loop_is_always_beside_the_app() -> None:
    orders = [plan.order(n) for n in range(4)]
    firsts = [next(s for s in o if s != plan.RAW) for o in orders]
    assert firsts == [plan.APP, plan.A2, plan.APP, plan.A2]  # app, (a'), (a'), app, app, (a'), ...
    for o in orders:
        assert sorted(o) == sorted((plan.APP, plan.A2, plan.RAW))
        assert abs(o.index(plan.RAW) - o.index(plan.APP)) == 1


def side(rate: float, cpu: float, steady: float | None = None) -> dict[str, Any]:
    out = {"messages_per_s": rate, "cpu_s_per_message": cpu}
    return out | ({"messages_per_s_steady": steady} if steady is not None else {})


def test_medians_of_the_ratios_and_of_cpu_per_message() -> None:
    rounds = [
        {"app": side(100, 0.002, 110), "a2": side(50, 0.001), "raw": side(200, 0.0005)},
        {"app": side(90, 0.003, 99), "a2": side(100, 0.002), "raw": side(100, 0.0007)},
        {"app": side(80, 0.004, 88), "a2": side(40, 0.003), "raw": side(160, 0.0006)},
    ]
    s = plan.summarize(rounds)
    assert s["app_over_a2"] == [2.0, 0.9, 2.0]
    assert s["median_app_over_a2"] == 2.0
    assert s["app_steady_over_raw"] == [0.55, 0.99, 0.55]
    assert s["median_app_over_raw"] == 0.5
    assert s["median_cpu_s_per_message_app"] == 0.003
    assert s["median_cpu_s_per_message_a2"] == 0.002
    assert s["median_cpu_s_per_message_raw"] == 0.0006


def test_a_history_line_names_the_commit_and_whether_the_tree_had_changes() -> None:
    s = {"median_cpu_s_per_message_app": 0.0015, "median_cpu_s_per_message_a2": 0.001}
    row = plan.history_row("0123456789abcdef", True, "python -m bench.rounds", 200_000, s, {"mean": 3.5})
    assert row == {
        "commit": "0123456789ab+",
        "command": "python -m bench.rounds",
        "items": 200_000,
        "app_cpu_s_per_message": 0.0015,
        "a2_cpu_s_per_message": 0.001,
        "load_mean": 3.5,
    }
    assert plan.per_message(None, 10) is None
    assert plan.per_message(1.0, 0) is None


@dataclass
class F:
    function: str
    file_path_short: str
    time: float
    total_self_time: float
    children: list[Any] = field(default_factory=list)
    is_synthetic: bool = False


def test_busy_time_leaves_out_the_selectors_wait_and_counts_a_function_once_per_stack() -> None:
    tree = F("run", "asyncio/runners.py", 10.0, 0.0, [
        F("select", "selectors.py", 6.0, 0.0, [F("epoll.poll", "<built-in>", 6.0, 6.0)]),
        F("_process", "shared/engine/held.py", 4.0, 0.5, [
            F("settle", "shared/engine/settling.py", 3.0, 1.0, [
                F("_process", "shared/engine/held.py", 2.0, 2.0),  # recursion: not counted twice inclusively
            ]),
            F("[self]", "shared/engine/held.py", 0.5, 0.5, is_synthetic=True),
        ]),
    ])  # fmt: skip
    found = cpu_entries(tree)
    assert found["idle_s"] == 6.0
    assert found["busy_s"] == pytest.approx(3.5)
    inclusive = dict(found["inclusive"])
    assert inclusive == {"_process (shared/engine/held.py)": 3.5, "settle (shared/engine/settling.py)": 3.0}
    self_time = dict(found["self"])
    assert self_time["_process (shared/engine/held.py)"] == 2.5
    assert self_time["settle (shared/engine/settling.py)"] == 1.0
    assert "epoll.poll (<built-in>)" not in self_time


def test_the_app_before_a_change_drains_right_beside_it_on_either_side() -> None:
    orders = [plan.order(n, before=True) for n in range(4)]
    for o in orders:
        assert abs(o.index(plan.BEFORE) - o.index(plan.APP)) == 1
        assert [s for s in o if s != plan.BEFORE] == list(plan.order(orders.index(o)))
    assert {o.index(plan.BEFORE) < o.index(plan.APP) for o in orders} == {True, False}
