"""The doorbell families reach what they aim at, and today's code keeps the promises there (`sim.doorbell_families`,
`sim.progress`, `sim.doorbells`; their mutants fail in tests/sim/test_mutants.py)."""

from __future__ import annotations

import pytest

from sim.world import World, run


@pytest.mark.slow
def test_a_floods_doorbells_come_after_the_drain_that_took_their_work_and_cost_nothing() -> None:
    """Flood seed 0: 113 one-item submits of as many tenants within a second on one process; the first doorbell's
    drain takes them all, the others come due after it and end with no storage call."""
    seen: list[World] = []
    outcome = run(0, family="flood", seen=seen)
    assert outcome.ok, outcome.report()
    world = seen[0]
    assert "late-doorbell" in outcome.features
    judged = world.doorbells.judged
    assert judged >= outcome.accepted // 2, f"{judged} of {outcome.accepted} doorbells came after their drain"
    late = [i for i in world.doorbells.ended if i.outcome == "covered"]
    assert len(late) >= judged
    assert all(i.calls == 0 for i in late)


@pytest.mark.slow
def test_scheduled_batches_whose_doorbells_were_deferred_or_rung_by_a_retry_start_within_the_bound() -> None:
    """Schedule seed 9: Service Bus away at two scheduled submits, whose instances die while their doorbells wait:
    the clients' keyed retries answer them, deferred while Service Bus is still away. The later one (b4), with no
    fault after its 202, has its first call within the progress bound of its start (b0's bound counts from i1's
    crash after its 202 plus the nets, since that crash might have taken its deferred doorbell)."""
    seen: list[World] = []
    outcome = run(9, family="schedule", seen=seen)
    assert outcome.ok, outcome.report()
    assert {"doorbell-deferred", "schedule-retried"} <= outcome.features
    progress = seen[0].progress
    met = {seen[0].labels[batch].label: (delay, bound) for batch, delay, bound in progress.met}
    delay, bound = met["b4"]
    assert 0 <= delay <= bound
