"""The notice drill of the simulated world (`sim.doors.notice_drills`, issue 36 items 10 and 14): what it draws stays
apart from a seed's other draws, and what the receiver records of each POST is what its judgements read."""

from __future__ import annotations

import dataclasses

import pytest

from sim import families
from sim.doors import notice_drills
from sim.world import World, run


def test_the_drill_leaves_every_other_draw_of_a_seed_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    drilled = {seed: families.draw(seed, family="lifecycle") for seed in range(40)}
    monkeypatch.setattr(notice_drills, "SHARE", 0.0)
    for seed, scenario in drilled.items():
        plain = families.draw(seed, family="lifecycle")
        assert plain.drill is None
        if scenario.drill is None:
            assert scenario == plain
            continue
        assert scenario.receiver[:-1] == plain.receiver  # the drill's span comes after the family's own
        changed = {k for k in scenario.settings if scenario.settings[k] != plain.settings[k]}
        assert changed <= {"CALLBACK_WINDOW_S", "CALLBACK_RETRY_BASE_S"}
        assert dataclasses.replace(scenario, drill=None, receiver=plain.receiver, settings=plain.settings) == plain
    assert 10 <= sum(s.drill is not None for s in drilled.values()) <= 30


@pytest.mark.slow
def test_a_drilled_seed_records_every_post_from_start_to_end_and_refuses_its_stray_submits() -> None:
    """Lifecycle seed 1: a receiver failing through the notices' 180 s window, a third of the attempts' instances
    killed during the POST, two submits naming another port of the allowed host."""
    seen: list[World] = []
    outcome = run(1, family="lifecycle", seen=seen)
    assert outcome.ok, outcome.report()
    world = seen[0]
    posts = world.receiver.posts
    assert posts
    assert all(p.end_s is not None and p.end_s >= p.start_s for p in posts)
    assert {"callback-refused", "notice-killed"} <= outcome.features, outcome.report()
    assert world.stray_writes == []
    killed = [line for line in outcome.trace if "kills" in line and "notice attempt" in line]
    assert len(killed) == len(outcome.scenario.crashes) - len(families.draw(1, family="lifecycle").crashes)
