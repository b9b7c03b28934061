"""What the platform does in the simulated world besides delivering trigger events (`sim.host`): the timer
function (everything `function_app.fallback_poll` runs: the fallback poll, the dead replays' takeover
`shared.ops.replay_takeover`, then `shared.ops.notice_sweep`),
the host's lock renewals failing for spans, the clients of `sim.doors.callers` the scenario asks for, and,
after a run, which features (doors) it reached.

Records the world keeps for the invariants (`sim.world.World`): `calls` (`sim.host.Call`, every handler call,
sync and async, with its start, end and outcomes), `receiver.received` (`sim.receiver.Received`, every notice
the receiver processed, its signature checked), `features` (a set of the names in FEATURES), `storage_log`
((virtual s, operation) per storage request served), `scenario.idle` (the idle stretches), `broker.sends`
((virtual s, body) per trigger message accepted).
"""

from __future__ import annotations

import asyncio
from typing import Any

from shared.batch.settlement import NO_OUTCOME
from shared.ops import lifecycle, notice_sweep, replay_takeover, reports
from shared.services import Services
from shared.watch import fallback
from sim.checks import costs, doorbells, progress
from sim.checks.promises import records_of
from sim.doors import callers, notice_drills, replayers
from sim.host import FUNCTION_TIMEOUT_S, Instance

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

# Every door a seed can open; `python -m sim` prints how many seeds of each family reached each, and fails a run
# of every family in which one of them was reached by no seed (RELIABILITY.md lists them).
FEATURES = (
    "cancel",  # a cancel answered (through the API, or the random families' direct one)
    "budget",  # a drain session ran out of its budget and handed over
    "replay",  # a synchronous replay answered
    "replay-job",  # a background replay started
    "replayed",  # a replay put parked chunks back
    "replay-past-limit",  # a synchronous replay met more parked chunks than its limit (set aside, left parked)
    "replay-unnamed",  # a replay whose body names nothing (empty, {}, a null, options only) answered 400
    "second-park",  # a parked chunk was parked a second time, as a redelivery past the limit would (`second_parks`)
    # a replay of everything answered `more: false` having begun with a stale second copy parked (`second_parks`)
    "stale-copy",
    # a replay took parked chunks while the poison index answered seconds late (`sim.doors.replay_time`)
    "slow-replay",
    # a malformed request (an integer of 4,301 digits, a replay naming no id) answered (`sim.doors.malformed`)
    "malformed",
    "notice",  # the receiver processed a completion notice
    "notice-retried",  # a notice attempt failed (receiver down, slow, failing or answer lost) and was retried
    "notice-killed",  # the notice drill killed an instance during a notice attempt (`sim.doors.notice_drills`)
    "callback-refused",  # a submit naming another port or scheme of the allowed callback host was refused
    "tolerance",  # a batch ended failed by its max_failed_fraction
    "schedule",  # a batch with a not_before in the future was accepted
    "expiry",  # items of a batch ended expired
    "sync",  # a sync handler ran in the thread pool
    "idle",  # an idle stretch of an hour or more passed
    "tenants",  # ten or more tenants' batches in one run
    "slow-storage",  # a storage request answered seconds late
    "export-continued",  # a results export followed X-Continuation
    "renewal-lost",  # a lock renewal failed while a function ran
    "settle-failed",  # completing a trigger message failed
    "send-refused",  # Service Bus refused a send while delivering
    "link-error",  # the publisher's link dropped during a send
    "history",  # a cancel answered over a week of ended markers in storage (`sim.checks.costs`)
    # a scheduled batch answered 202 while Service Bus refused its doorbell (`sim.checks.progress`)
    "doorbell-deferred",
    "schedule-retried",  # a scheduled batch answered 202 by a retry after the instance of its submit died
    "late-doorbell",  # a doorbell came after its process's closing look saw its work taken (`sim.checks.doorbells`)
    "no-outcome",  # a chunk delivered past MAX_DEQUEUE_COUNT with no outcome was parked unrun (`sim.stuck`)
    "fenced",  # a replay's claim met a final stamp written since its call judged the batch (`sim.straddle`)
    "apart",  # two copies of a chunk message recorded one generation apart, counted by position (`sim.copies`)
)


def start(world: World) -> None:
    """The timer, the renewal failures and the scenario's clients."""
    scenario = world.scenario
    costs.start(world)  # the listing page and the history in storage, before anything runs
    world.spawn(timer(world), "timer")
    progress.start(world)  # a batch with visible work is handled within a bound (`sim.checks.progress`)
    doorbells.start(world)  # a doorbell delivered after its work was taken costs nothing (`sim.checks.doorbells`)
    for span in scenario.renewals:
        world.spawn(renewals_fail(world, span.start_s), "renewals fail")
    for at_s, label in scenario.api_cancels:
        world.spawn(callers.cancel(world, at_s, label, scenario.cancel_on.get(label, 0)), f"cancel {label}")
    for label, every_s, times in scenario.polls:
        world.spawn(callers.poll(world, label, every_s, times), f"poll {label}")
    for at_s, background, whole in scenario.replays:
        world.spawn(callers.replay(world, at_s, background, whole), "replay")
    replayers.start(world)
    notice_drills.start(world)
    for at_s, label, limit, first, count in scenario.exports:
        world.spawn(callers.read_pages(world, at_s, label, limit, first, count), f"results of {label}")


async def timer(world: World) -> None:
    """The timer function, on one live instance per tick (the host's singleton lock)."""
    while True:
        await asyncio.sleep(world.scenario.timer_s)
        live = world.live()
        if not live:
            continue
        instance = live[0]
        services = instance.services
        assert services is not None
        instance.spawn(tick(world, instance, services), "fallback_poll")


async def tick(world: World, instance: Instance, services: Services) -> None:
    """`function_app.fallback_poll`: the poll, the dead replays' takeover, then the notices' sweep, under the
    function timeout."""

    async def body() -> None:
        outcomes = await fallback.poll(services)
        world.note(f"{instance.name} timer: {[o.action for o in outcomes]}")
        began = world.now_s()
        taken = await replay_takeover.take_over(services)
        world.takeovers.append((began, world.now_s()))
        if taken:
            world.note(f"{instance.name} timer: finished {taken} replay(s) that died after their claim")
            world.features.add("replay-taken-over")
        swept = await notice_sweep.sweep(services)
        if swept:
            world.note(f"{instance.name} timer: {swept} overdue notice(s) published again")

    try:
        await asyncio.wait_for(body(), FUNCTION_TIMEOUT_S)
    except TimeoutError:
        world.note(f"function timeout at {instance.name} (timer)")
        world.spawn(world.faults.restart(instance, 5.0), "restart after timeout")
    except Exception as e:
        world.note(f"timer at {instance.name} failed: {type(e).__name__}: {str(e)[:120]}")


async def renewals_fail(world: World, at_s: float) -> None:
    """From `at_s`, the host renews no lock (`sim.bus.Broker.renewals`): each message held now keeps its lock
    only until the lock duration after its last renewal, while its function still runs."""
    await asyncio.sleep(at_s)
    if world.broker.renewals_fail():
        world.features.add("renewal-lost")


async def reached(world: World) -> None:
    """After the final checks: the features read from what the run stored (statuses through the status route)."""
    if world.cancels.answered:
        world.features.add("cancel")
    if world.receiver.attempts > len(world.receiver.received) or any(
        r.answered is None for r in world.receiver.received
    ):
        world.features.add("notice-retried")
    if len({s.tenant for s in world.scenario.submits}) >= 10:
        world.features.add("tenants")
    if any(s.end_s - s.start_s >= 3600 and world.now_s() >= s.end_s for s in world.scenario.idle):
        world.features.add("idle")
    live = world.live()
    if not live or live[0].services is None:
        return
    services = live[0].services
    for batch_id, answered in world.answers.items():
        if 202 not in answered:
            continue
        manifest, _, _ = await lifecycle.read(services, batch_id)
        if manifest.not_before is not None:
            world.features.add("schedule")
        status = await reports.read_batch_status(services, batch_id)
        if status["items"].get("expired"):
            world.features.add("expiry")
        if manifest.max_failed_fraction is not None and status["status"] == "failed":
            world.features.add("tolerance")
        failed = [f for r in records_of(world, batch_id) for f in r.get("failed") or []]
        if any(str(f.get("reason")).startswith(NO_OUTCOME) for f in failed):
            world.features.add("no-outcome")
