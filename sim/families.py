"""The scenario families that open the doors the first six leave shut (`sim.scenario` draws those):

- `lifecycle`: submits through the API with its options (`expires_in_s`, `not_before`, `max_failed_fraction`,
  as headers or query parameters, JSON or NDJSON, gzip or not), callbacks to a receiver that is down, slow,
  failing or duplicating for spans, clients polling, listing and exporting page by page, cancels and replays
  (synchronous and background) through the API, async or sync handlers (a sync one in the host's bounded
  thread pool, sometimes slow), the random family's faults, and storage faults aimed at its seams
  (`aim_at_lifecycle`);
- `idle`: many tenants' small batches, then hours with nothing to do, then another wave; storage calls that
  are slow (seconds) for spans;
- `schedule` and `flood` (`sim.doorbell_families`): scheduled batches whose doorbells are deferred or rung by a
  keyed retry, and floods of many tenants' one-item submits behind one drain;
- `platform`: the host's lock renewals failing while functions run, settlements failing, Service Bus refusing
  sends or dropping its link while deliveries go on, slow storage, sync handlers;
- `replay`: tenants as callers (`TENANT_FROM=principal`) whose batches end with chunks parked (items failing past
  MAX_DEQUEUE_COUNT, ended by a cancel, an expiry or their max_failed_fraction), then, once faults are over, one
  replay after another through the API (`sim.doors.replayers`): the operator's replay of everything page by page with a
  small `limit` (sometimes paced), tenants replaying their own batch or another tenant's, and bodies that name
  nothing (empty, `{}`, a null, options only), from the operator and from tenants.

Every draw of a family comes from its own seeded `random.Random`, so a seed is the same scenario everywhere.
"""

from __future__ import annotations

import random
from dataclasses import replace

from shared.ops.replay_marks import CLAIM_S
from sim import claim_churn, copies, history, stale_cancel, straddle, stuck
from sim.doorbell_families import flood, schedule
from sim.doors import malformed, notice_drills, replay_time, second_parks
from sim.host import RESULTS
from sim.receiver import SECRET
from sim.scenario import BASIC, FAMILIES, SIZES, Crash, ReplayCall, Scenario, Span, Submit, draw_settings

CALLBACK_SETTINGS = {
    "CALLBACK_ALLOWED_HOSTS": "receiver.sim",
    "CALLBACK_SECRET": SECRET,
    "CALLBACK_RETRY_MAX_S": "60",
    "CALLBACK_WINDOW_S": "3600",  # several timer periods: a notice whose attempt events are lost is swept again
}
LIFECYCLE_MODES = ("ok", "ok", "ok", "ok", "ok", "t1", "t2", "perm", "t6")  # t6: fails past MAX_DEQUEUE_COUNT
PARKING_MODES = ("ok", "ok", "ok", "t1", "perm", "t6", "t6")
# Replay bodies that name nothing (`sim.doors.replayers.NAMING_NOTHING` has each body): a 400 for every caller.
UNNAMED = ("empty", "blank", "{}", "batch_id-null", "message_ids-null", "all-null", "limit-only", "all-false",
           "background-false")  # fmt: skip
RECEIVER_KINDS = ("down", "slow", "failing", "duplicating")
IDLE_S = (3600.0, 2 * 3600.0)


def draw(seed: int, *, faults: bool = True, family: str = "random") -> Scenario:
    """The scenario of `seed` in `family`, whichever module draws it."""
    if family in BASIC:
        basic = Scenario.draw(seed, faults=faults, family=family)
        if basic.faults and family == "storage":
            aim_at_storage(basic)
        if basic.faults and family == "submit":  # drawn apart: a forged doorbell (`sim.bus.Broker._forge`)
            basic.forge_doorbells = random.Random(f"forged-doorbells-{seed}").random() < 1 / 3
        if basic.faults and family == "limits":  # drawn apart: drainers joining and leaving (`sim.claim_churn`)
            claim_churn.churn(basic, submits)
            stuck.aim(basic)  # drawn apart: a chunk whose handler hangs at every call
        return basic
    if family not in FAMILIES:
        raise ValueError(f"unknown scenario family {family!r}: one of {', '.join(FAMILIES)}")
    rng = random.Random(f"scenario-{family}-{seed}")
    instances = rng.randint(1, 3)
    settings = draw_settings(rng) | CALLBACK_SETTINGS
    timeout = rng.choice([2, 5])
    settings |= {"CALLBACK_TIMEOUT_S": str(timeout), "CALLBACK_RETRY_BASE_S": str(timeout + rng.choice([1, 5]))}
    skews = tuple(rng.uniform(-3.0, 3.0) if faults else 0.0 for _ in range(instances))
    scenario = Scenario(seed, faults, settings, skews, [], family=family)
    if family == "lifecycle":
        lifecycle(scenario, rng, instances)
    elif family == "idle":
        idle(scenario, rng, instances)
    elif family == "replay":
        replays(scenario, rng, instances)
    elif family == "history":
        history.history(scenario, rng, instances, submits)
    elif family in ("schedule", "flood"):
        (schedule if family == "schedule" else flood)(scenario, rng, instances)
    elif family == "stale-cancel":
        stale_cancel.stale_cancel(scenario, rng, instances, submits)
    elif family == "copies":
        copies.copies(scenario, rng, instances, submits)
    elif family == "straddle":
        straddle.straddle(scenario, rng, instances, submits)
    else:
        platform(scenario, rng, instances)
    scenario.submits.sort(key=lambda s: s.at_s)
    return scenario


def submits(rng: random.Random, seed: int, instances: int, n: int, *, at: tuple[float, float], tenants: list[str],
            modes: tuple[str, ...], lifecycle: bool, first: int = 0,
            sizes: tuple[int, ...] = SIZES) -> list[Submit]:  # fmt: skip
    out = []
    for k in range(first, first + n):
        size = rng.choice(sizes)
        keyed = rng.random() < 0.4
        options: list[tuple[str, str]] = []
        if lifecycle and rng.random() < 0.35:
            options.append(("expires_in_s", str(rng.choice([3, 10, 30, 120]))))
        if lifecycle and rng.random() < 0.35:
            options.append(("not_before", str(rng.choice([5, 20, 60]))))
        if lifecycle and rng.random() < 0.35:
            options.append(("max_failed_fraction", rng.choice(["0", "0.1", "0.5"])))
        out.append(
            Submit(
                at_s=round(rng.uniform(*at), 3),
                instance=rng.randrange(instances),
                label=f"b{k}",
                items=size,
                tenant=rng.choice(tenants),
                priority=rng.choice(["normal", "normal", "high"]),
                key=f"key-{seed}-{k}" if keyed else None,
                retries=2 if keyed else 0,
                modes=tuple(rng.choice(modes) for _ in range(size)),
                ndjson=rng.random() < 0.3,
                gzip=rng.random() < 0.3,
                as_params=rng.random() < 0.3,
                options=tuple(options),
                callback=lifecycle and rng.random() < 0.6,
            )
        )
    return out


def sync_handler(scenario: Scenario, rng: random.Random, share: float) -> None:
    if rng.random() < share:
        scenario.handler = "sync"
        scenario.threads = rng.choice([1, 2, 4])
        scenario.handler_s = rng.choice([(0.001, 0.2), (0.5, 2.0), (2.0, 6.0)])
        scenario.thread_start_s = rng.choice([(0.0, 0.002), (0.0, 0.5), (0.0, 3.0)])


def spans(rng: random.Random, kinds: tuple[str, ...], n: int, within_s: float, longest_s: float) -> list[Span]:
    out = []
    for _ in range(n):
        start = rng.uniform(0.0, within_s)
        out.append(Span(round(start, 3), round(start + rng.uniform(1.0, longest_s), 3), rng.choice(kinds)))
    return sorted(out, key=lambda s: s.start_s)


def lifecycle(scenario: Scenario, rng: random.Random, instances: int) -> None:
    scenario.submits = submits(rng, scenario.seed, instances, rng.randint(2, 6), at=(0.0, 40.0),
                               tenants=["", "", "a", "b"], modes=LIFECYCLE_MODES, lifecycle=True)  # fmt: skip
    sync_handler(scenario, rng, 0.5)
    # Receiver faults while the first notices go out (batches end some 5-60 s in).
    scenario.receiver = [Span(sp.start_s + 5.0, sp.end_s + 5.0, sp.kind)
                         for sp in spans(rng, RECEIVER_KINDS, rng.choice([1, 2, 2]), 55.0, 60.0)]  # fmt: skip
    labels = [s.label for s in scenario.submits]
    for _ in range(rng.choice([0, 1, 1, 2])):
        sub = rng.choice(scenario.submits)  # cancelled while it runs: soon after its submit
        scenario.api_cancels.append((round(sub.at_s + rng.uniform(0.3, 15.0), 3), sub.label))
    for label in labels:
        if rng.random() < 0.5:
            scenario.polls.append((label, float(rng.choice([2, 5, 10])), 40))
    for _ in range(rng.choice([1, 1, 2])):  # once chunks have had time to park
        scenario.replays.append((round(rng.uniform(60.0, 240.0), 3), rng.random() < 0.4, rng.random() < 0.5))
    if scenario.faults:
        scenario.add_faults(rng, instances)
        aim_at_lifecycle(scenario)
    notice_drills.aim(scenario)  # for some seeds, from a rng of its own


def aim_at_lifecycle(scenario: Scenario) -> None:
    """Storage faults aimed at the lifecycle's seams, drawn apart (the scenario's other draws stay as they were):
    - chunk deletes failing for tens of seconds up to a cancel or an expiry: a chunk recorded then keeps its message,
      which comes back after its batch ended, and its discard meets a recorded outcome (issue 36 item 2);
    - queue sends failing while a replay runs: a replay fails between its claim and its send (issue 36 item 1);
      sometimes its process dies then, and a replay of everything comes once its claim may be taken over.
    """
    rng = random.Random(f"aimed-{scenario.family}-{scenario.seed}")
    ends = [at for at, _ in scenario.api_cancels]
    ends += [s.at_s + float(v) for s in scenario.submits for k, v in s.options if k == "expires_in_s"]
    # The storage clients' retries sit out some 16 s of failures (`shared.store.storage.CLIENT_OPTIONS`): longer.
    for at in sorted(ends):
        if rng.random() < 0.5:
            start = max(0.0, at - rng.uniform(18.0, 40.0))
            scenario.storage_spans.append(Span(round(start, 3), round(at + rng.uniform(0.0, 1.0), 3), "5xx", 1.0,
                                               "queue DELETE"))  # fmt: skip
    for at, _, _ in list(scenario.replays):
        if rng.random() < 0.5:
            scenario.storage_spans.append(Span(at, round(at + rng.uniform(20.0, 40.0), 3), "5xx", 1.0, "queue POST"))
            if rng.random() < 0.5:  # the replay's process dies while its send waits out the failures
                scenario.crashes.append(Crash(round(at + rng.uniform(1.0, 10.0), 3), 0, rng.uniform(5.0, 30.0)))
                # and an operator replays everything once that dead replay's claim may be taken over
                scenario.replays.append((round(at + CLAIM_S + rng.uniform(30.0, 120.0), 3), False, True))
    scenario.crashes.sort(key=lambda c: c.at_s)
    past_last_attempt(scenario)


def past_last_attempt(scenario: Scenario) -> None:
    """In a third of the lifecycle seeds with faults (drawn apart): one item fails exactly MAX_DEQUEUE_COUNT calls
    (`t4`, `t5`), so its last attempt parks it, while queue deletes fail for a minute or two from soon after its submit:
    the chunk whose parking was recorded keeps its message, which comes back past its last attempt, and must be
    finished by its record, never worked again (c67e0de: the sixth call succeeded and replaced the parked failure)."""
    rng = random.Random(f"{scenario.seed}-past-last-attempt")
    if rng.random() >= 1 / 3 or not scenario.submits:
        return
    at = rng.randrange(len(scenario.submits))
    sub = scenario.submits[at]
    modes = list(sub.modes)
    modes[rng.randrange(len(modes))] = f"t{scenario.settings['MAX_DEQUEUE_COUNT']}"
    scenario.submits[at] = replace(sub, modes=tuple(modes))
    start = sub.at_s + rng.uniform(5.0, 30.0)
    scenario.storage_spans.append(Span(round(start, 3), round(start + rng.uniform(60.0, 120.0), 3), "5xx", 1.0,
                                       "queue DELETE"))  # fmt: skip


def aim_at_storage(scenario: Scenario) -> None:
    """A `storage` scenario's aimed faults, each drawn apart (its other draws stay as they were):
    - in half the seeds, every PutBlob to the results container answers 503 for 18-40 s while chunks are worked
      (longer than the storage clients' retries sit out): a chunk done then has its record write fail after its
      handler returned; settled in the order "record, then message", its message stays for redelivery, while a
      delete that came first would lose the chunk's outcomes for good;
    - in a third, Service Bus loses every doorbell it accepts: nothing wakes a drainer for new work but the look
      chain each submit arms (the timer ticks every 10 minutes, past the look bound).
    """
    seed = scenario.seed
    results = random.Random(f"aimed-results-{seed}")
    if results.random() < 0.5:
        start = results.uniform(2.0, 60.0)
        end = start + results.uniform(18.0, 40.0)
        scenario.storage_spans.append(Span(round(start, 3), round(end, 3), "5xx", 1.0, f"blob PUT {RESULTS}"))
    scenario.lose_doorbells = random.Random(f"doorbells-lost-{seed}").random() < 1 / 3


def idle(scenario: Scenario, rng: random.Random, instances: int) -> None:
    # The look chain's own back-off and an hourly timer, as a deployment runs idle (the defaults back off to 30
    # minutes; the timer's default is 6-hourly, longer than these stretches).
    for name in ("BACKOFF_FLOOR_MS", "BACKOFF_CEILING_MS"):
        del scenario.settings[name]
    scenario.timer_s = 3600.0
    tenants = [f"t{n}" for n in range(rng.randint(5, 40))]
    first = submits(rng, scenario.seed, instances, rng.randint(3, 12), at=(0.0, 20.0), tenants=tenants,
                    modes=("ok",), lifecycle=False)  # fmt: skip
    gap = rng.choice(IDLE_S)
    quiet_from = 300.0
    scenario.idle.append(Span(quiet_from, quiet_from + gap, "idle"))
    again = quiet_from + gap + rng.uniform(0.0, 60.0)
    second = submits(rng, scenario.seed, instances, rng.randint(1, 6), at=(again, again + 20.0), tenants=tenants,
                     modes=("ok",), lifecycle=False, first=len(first))  # fmt: skip
    scenario.submits = first + second
    sync_handler(scenario, rng, 0.3)
    if scenario.faults:
        for sp in spans(rng, ("slow",), rng.randint(1, 2), 60.0, 20.0):
            scenario.storage_spans.append(Span(sp.start_s, sp.end_s, "slow", rng.choice([0.2, 0.5, 1.0])))


def platform(scenario: Scenario, rng: random.Random, instances: int) -> None:
    modes, sizes = ("ok", "ok", "ok", "t1", "perm"), (*SIZES, 40, 80)
    scenario.submits = submits(rng, scenario.seed, instances, rng.randint(2, 6), at=(0.0, 40.0),
                               tenants=["", "a", "b"], modes=modes, lifecycle=False, sizes=sizes)  # fmt: skip
    # Short sessions and slower calls: sessions run out of budget and hand over mid-backlog.
    scenario.settings["DRAIN_BUDGET_S"] = "10"
    scenario.handler_s = rng.choice([(0.001, 0.2), (0.3, 1.5)])
    sync_handler(scenario, rng, 0.5)
    if not scenario.faults:
        return
    scenario.renewals = spans(rng, ("fail",), rng.choice([0, 1, 1]), 60.0, 40.0)
    scenario.settle_fail = rng.choice([0.0, 0.1, 0.3])
    scenario.sends = spans(rng, ("refused", "link", "link"), rng.choice([1, 1, 2]), 45.0, 30.0)
    for sp in spans(rng, ("slow",), rng.choice([0, 1, 1]), 60.0, 20.0):
        scenario.storage_spans.append(Span(sp.start_s, sp.end_s, "slow", rng.choice([0.2, 0.5, 1.0])))
    if rng.random() < 0.3:
        scenario.crashes.append(Crash(round(rng.uniform(1.0, 60.0), 3), rng.randrange(instances), rng.uniform(1, 30)))


def replays(scenario: Scenario, rng: random.Random, instances: int) -> None:
    scenario.settings["TENANT_FROM"] = "principal"
    tenants = ["a", "b", "c"]
    scenario.submits = submits(rng, scenario.seed, instances, rng.randint(3, 7), at=(0.0, 30.0), tenants=tenants,
                               modes=PARKING_MODES, lifecycle=True)  # fmt: skip
    sync_handler(scenario, rng, 0.3)
    for _ in range(rng.choice([1, 1, 2])):  # cancelled once some of its chunks may have parked
        sub = rng.choice(scenario.submits)
        scenario.api_cancels.append((round(sub.at_s + rng.uniform(5.0, 90.0), 3), sub.label))
    for sub in scenario.submits:
        if rng.random() < 0.3:
            scenario.polls.append((sub.label, float(rng.choice([5, 10])), 30))
    if scenario.faults:
        scenario.add_faults(rng, instances)  # within the first 80 s (crashes down for up to a minute)
    calls: list[tuple[str, str, str]] = [("operator", "all", "")] * rng.choice([1, 1, 2])
    calls += [(rng.choice(["operator", *tenants]), rng.choice(UNNAMED), "") for _ in range(rng.randint(2, 5))]
    for _ in range(rng.randint(1, 3)):  # a tenant's own batch, or another tenant's (a 404)
        sub = rng.choice(scenario.submits)
        calls.append((sub.tenant if rng.random() < 0.7 else rng.choice(tenants), "batch", sub.label))
    if rng.random() < 0.3:
        calls.append((rng.choice(tenants), "all", ""))  # a tenant's replay of everything: a 403
    rng.shuffle(calls)
    at = rng.uniform(150.0, 250.0)
    for who, what, label in calls:
        limit = rng.choice([1, 1, 2, 3]) if what == "all" else rng.choice([None, 2])
        rate = rng.choice([None, None, 0.2, 0.5]) if what == "all" else None
        scenario.replay_calls.append(ReplayCall(round(at, 3), who, what, label, limit, rate))
        at += rng.uniform(2.0, 15.0)
    if slow_replay(scenario):
        second_parks.aim(scenario)  # from a rng of its own
    else:
        replay_time.slow_backlog(scenario)  # from a rng of its own
    scenario.malformed = malformed.draw(scenario.seed)  # from a rng of its own


def slow_replay(scenario: Scenario) -> bool:
    """Drawn apart: in half the seeds, a batch still processing when the replays come (a handler call hanging until
    `functionTimeout` holds one of its chunks in one partition) while its parked chunks wait in the other, and the
    first replay of everything paced slowly, so the chunks it puts back first wait for a doorbell
    (`sim.doors.replay_rings`). Service Bus loses nothing there (a lost doorbell would excuse the wait)."""
    rng = random.Random(f"slow-replay-{scenario.seed}")
    if rng.random() < 0.5:
        return False
    scenario.settings["WORK_QUEUE_PARTITIONS"] = "2"
    scenario.handler_hang, scenario.bus_lose = rng.choice([0.03, 0.06]), 0.0
    first = next((n for n, r in enumerate(scenario.replay_calls) if (r.who, r.what) == ("operator", "all")), None)
    if first is not None:
        call = scenario.replay_calls[first]
        scenario.replay_calls[first] = replace(call, limit=3, rate=0.05)  # 20 s apart: within a client's minute
    return True
