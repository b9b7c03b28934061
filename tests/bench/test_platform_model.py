"""The platform model (`bench.platform`) against cases worked out by hand, and the drainer-count policy it drives.

No service is involved: the model is pure arithmetic over the app's own policy functions and defaults.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from bench.measures.platform.run import (
    BEFORE,
    ROOT,
    AppModel,
    AppPolicy,
    BuiltinQueueModel,
    Execution,
    Instance,
    PlatformParams,
    Workload,
)
from shared.engine.scaling import deserves_slot, drainers_for_depth

EXACT = PlatformParams(cold_start_s=(10.0, 10.0), decision_interval_s=10.0, step_s=0.05)


def test_desired_instances_are_active_messages_over_the_target_per_instance() -> None:
    sim = AppModel(EXACT, Workload(items=10**6), replace(AppPolicy(), max_concurrent_calls=16), seed=1)
    for slot in range(1, 33):  # 33 trigger events waiting: ceil(33 / 16) = 3 instances
        sim.publish(slot)
    sim.scale()
    assert len(sim.instances) == 3


def test_the_built_in_trigger_s_target_per_instance_is_batch_size_plus_new_batch_threshold() -> None:
    sim = BuiltinQueueModel(EXACT, Workload(items=49), seed=1)
    sim.scale()
    assert len(sim.instances) == 3  # ceil(49 / (16 + 8)); with batchSize alone it would be 4


def test_when_locked_events_do_not_count_only_the_ready_ones_ask_for_instances() -> None:
    ready_only = replace(EXACT, locked_counts_as_active=False, always_ready=2)
    for params, wanted in ((replace(EXACT, always_ready=2), 2 + 3), (ready_only, 3)):
        sim = AppModel(params, Workload(items=10**6), AppPolicy(), seed=1)
        sim.pending.clear()
        for inst in sim.instances:  # two drain executions in flight, their events locked
            inst.executions.append(Execution(inst.ident + 1, 0.0))
        for slot in range(10, 13):  # three events ready for delivery
            sim.publish(slot)
        assert sim.metric() == wanted


def test_a_busy_instance_is_drained_only_when_the_count_wants_fewer_than_are_busy_and_goes_when_its_run_ends() -> None:
    params = replace(EXACT, locked_counts_as_active=False, always_ready=0, scale_in_delay_s=0.0)
    sim = AppModel(params, Workload(items=10**6), AppPolicy(), seed=1)
    sim.pending.clear()
    sim.instances = [Instance(i, 0.0) for i in range(3)]
    sim.instances[0].executions.append(Execution(1, 0.0))
    sim.instances[1].executions.append(Execution(2, 0.0))
    sim.publish(3)  # one ready event: the count asks for 1 instance; 2 are busy, 1 idle
    sim.scale()
    assert [i.ident for i in sim.instances] == [0, 1]  # the idle one went first
    assert [i.draining for i in sim.instances] == [True, False]  # then one busy one, excess 2 - 1
    sim.instances[0].executions.clear()
    sim.retire()
    assert [i.ident for i in sim.instances] == [1]
    locked = AppModel(replace(params, locked_counts_as_active=True), Workload(items=10**6), AppPolicy(), seed=1)
    locked.pending.clear()
    locked.instances = [Instance(i, 0.0) for i in range(2)]
    for inst in locked.instances:
        inst.executions.append(Execution(inst.ident + 1, 0.0))
    locked.scale()
    assert not any(i.draining for i in locked.instances)  # counted locks keep busy instances wanted


def test_instances_come_at_most_four_per_thirty_second_decision_by_default() -> None:
    assert PlatformParams().decision_interval_s == 30.0
    run = AppModel(PlatformParams(), Workload(items=10**7), AppPolicy(), seed=2).run()
    # The first decision falls somewhere in the first 30 s, then one every 30 s: by time t at most
    # 4 x (floor(t / 30) + 1) instances, whatever the backlog asks for.
    assert all(n <= 4 * (math.floor(t / 30) + 1) for t, n, _ in run.timeline)
    assert run.peak_instances > 40


def test_the_controller_adds_at_most_four_instances_a_decision() -> None:
    sim = AppModel(EXACT, Workload(items=10**6), replace(AppPolicy(), max_concurrent_calls=1), seed=1)
    for slot in range(1, 30):
        sim.publish(slot)
    sim.scale()
    assert len(sim.instances) == 4
    sim.scale()
    assert len(sim.instances) == 8


def test_a_cold_start_delays_the_first_item_by_its_length_and_an_always_ready_instance_does_not() -> None:
    work = Workload(items=250)
    # The first decision comes at some point of the first interval; then 10 s of cold start; then delivery.
    cold = AppModel(replace(EXACT, decision_interval_s=0.05), work, AppPolicy(), seed=3).run()
    assert 10.0 <= cold.first_item_s <= 10.0 + 0.05 + EXACT.delivery_latency_s + EXACT.step_s
    warm = AppModel(replace(EXACT, always_ready=1), work, AppPolicy(), seed=3).run()
    assert warm.first_item_s <= EXACT.delivery_latency_s + EXACT.step_s


def test_one_instance_drains_at_one_item_per_cpu_millisecond() -> None:
    params = replace(EXACT, always_ready=1, max_instances=1)
    run = AppModel(params, Workload(items=100_000, cpu_s_per_item=0.001), AppPolicy(), seed=1).run()
    assert 100.0 <= run.drained_s <= 101.0  # 100,000 items x 1 ms on one vCPU
    assert run.peak_instances == 1


def test_the_built_in_trigger_stops_at_the_queue_s_message_rate_target() -> None:
    params = replace(EXACT, always_ready=100, max_instances=100, queue_max_polling_interval_s=0.0)
    run = BuiltinQueueModel(params, Workload(items=1_000_000, cpu_s_per_item=0.00001), seed=1).run()
    assert math.isclose(run.drained_s, 1_000_000 / 2_000, rel_tol=0.01)  # one item per message, 2,000 messages/s


def test_the_model_runs_the_app_as_it_ships() -> None:
    host = json.loads((ROOT / "host.json").read_text())
    policy = AppPolicy()
    assert policy.max_concurrent_calls == host["extensions"]["serviceBus"]["maxConcurrentCalls"]
    # One drain execution per instance, so the trigger events in flight are the instances the queue deserves.
    assert policy.max_concurrent_calls == 1
    assert policy.max_drainers_per_queue >= PlatformParams().max_instances


def test_the_new_policy_scales_out_where_the_old_one_stayed_on_one_instance() -> None:
    work = Workload(items=10**6, cpu_s_per_item=0.001)
    params = PlatformParams()
    before = AppModel(params, work, BEFORE, seed=1).run()
    after = AppModel(params, work, AppPolicy(), seed=1).run()
    builtin = BuiltinQueueModel(params, work, seed=1).run()
    assert before.peak_instances == 1  # 4 events in flight / 16 per instance
    assert after.peak_instances > 10
    assert after.drained_s * 5 < before.drained_s
    assert after.drained_s <= builtin.drained_s


def test_drainers_for_depth_by_hand() -> None:
    assert drainers_for_depth(0, per_drainer=50, maximum=100) == 1
    assert drainers_for_depth(50, per_drainer=50, maximum=100) == 1
    assert drainers_for_depth(51, per_drainer=50, maximum=100) == 2
    assert drainers_for_depth(10**6, per_drainer=50, maximum=100) == 100
    assert not deserves_slot(2, 100, per_drainer=50, maximum=100)  # 100 messages deserve slots 0 and 1
    assert deserves_slot(1, 100, per_drainer=50, maximum=100)


@given(
    slot=st.integers(0, 200),
    depth=st.integers(0, 10**6),
    more=st.integers(0, 10**6),
    per=st.integers(1, 500),
    maximum=st.integers(1, 1000),
)
def test_slots_shrink_with_the_backlog_and_slot_zero_always_goes_on(
    slot: int, depth: int, more: int, per: int, maximum: int
) -> None:
    assert deserves_slot(0, depth, per_drainer=per, maximum=maximum)
    if deserves_slot(slot, depth, per_drainer=per, maximum=maximum):
        assert slot < maximum
        assert deserves_slot(slot, depth + more, per_drainer=per, maximum=maximum)
