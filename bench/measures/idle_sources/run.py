"""Idle storage transactions per app per day, every source counted: the app and the platform around it.

Section 4 of BENCHMARKS.md counts what each polling policy spends per queue. An idle app on Azure also pays for
what the Functions host and the platform do while an instance is alive, and the instance's life depends on the
triggers: the built-in queue trigger's app scales to zero and the scale controller watches its queues from
outside; the app's fallback timer wakes an instance at every tick, and an instance lingers after its last
execution. This model adds those sources up for one simulated day:

- (a) the built-in queue trigger: its polls while an instance is alive (the peer loop section 4 runs,
  `bench.measures.idle.run.simulate_peer`, on a simulated day), the scale controller's queue probes, and the
  host's primary lock while an instance is alive;
- (c) this app: the fallback's looks (the real `shared.core.backoff.PollPolicy` at the app's default settings,
  ticked on the timer's schedule), what a fresh instance reads before its first look, the host's secrets read at
  its start, the host's primary lock and the timer's singleton listener lock while an instance is alive, and the
  look chain (`shared.watch.lookout`): it runs only while a queue holds messages, so an idle day costs it the one look
  that found the queue empty and ended it after the last work. Its Service Bus trigger costs Service Bus
  operations, not storage transactions (the scale controller reads the trigger queue's count from Service Bus).

Pure: no I/O, seeded. Every constant carries its source or says it is assumed.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.measures.idle.run import DAY_S, simulate_peer
from bench.measures.platform.params import ROOT, setting_default
from shared.core.backoff import PollPolicy


def http_functions() -> int:
    """How many HTTP-triggered functions the app declares (each has a key blob the host reads)."""
    return (ROOT / "function_app.py").read_text().count("@app.route(")


@dataclass(frozen=True)
class HostCosts:
    # The primary-host lock: a 15 s blob lease on locks/{hostId}/host renewed 3 s before it ends, every 12 s while
    # an instance runs (PrimaryHostCoordinator, azure-functions-host).
    host_lock_renew_s: float = 12.0
    # Taking it: get properties, acquire, get properties, set metadata (the owner) (BlobLeaseDistributedLockManager
    # TryLockAsync / WriteLeaseBlobMetadata, azure-webjobs-sdk); one release when the instance stops.
    host_lock_acquire_calls: int = 4
    host_lock_release_calls: int = 1
    # A timer trigger's singleton listener lock: a 60 s blob lease (SingletonOptions.ListenerLockPeriod) renewed at
    # half its period (SingletonManager.CreateLeaseRenewalTimer), every 30 s while an instance runs; taking it is
    # two calls (no owner metadata), releasing it one.
    listener_lock_renew_s: float = 30.0
    listener_lock_acquire_calls: int = 2
    listener_lock_release_calls: int = 1
    # The scale controller's look at an idle storage queue: one GetQueueProperties (a peek only when the queue holds
    # messages). Its cadence is not published for Consumption or Flex Consumption: 10 s in older reports and the
    # host's own ScaleOptions.ScaleMetricsSampleInterval; PROBE_RANGE_S runs 10 to 60 s.
    scale_probe_s: float = 10.0
    # How long an instance lives after its last execution before the platform removes it. Not published: a
    # Microsoft product manager speaks of about 30 s on Flex Consumption (github.com/Azure/azure-functions-host/
    # issues/10706); unofficial reports for the Consumption plan say up to 20 minutes. 5 minutes is the middle
    # case; LINGER_RANGE_S runs 30 s to 20 minutes.
    linger_s: float = 300.0
    # Secrets: the host reads a key blob with two calls, exists and download (BlobStorageSecretsRepository.ReadAsync,
    # azure-functions-host src/WebJobs.Script.WebHost/Security/KeyManagement); at start it reads the host keys.
    secret_read_calls: int = 2
    # On Flex Consumption a sync about 30 s after start clears the key cache and reads the host keys again, every
    # HTTP function's keys, and one hash blob: 2 + 2 x HTTP functions + 1 (25 with this app's 10; an app with fewer
    # HTTP functions pays fewer). Premium has no such sync.
    http_functions: int = field(default_factory=http_functions)
    # Each Flex Consumption start downloads the deployment package from its blob container: one GetBlob assumed (a
    # large package is read in more ranges).
    package_reads_per_start: int = 1

    def secrets_per_start(self, flex: bool) -> int:
        start = self.secret_read_calls  # the host keys
        if not flex:
            return start
        return start + self.secret_read_calls * (1 + self.http_functions) + 1

    def host_lock(self, starts: int, alive_s: float, stops: int) -> int:
        return (
            starts * self.host_lock_acquire_calls
            + math.floor(alive_s / self.host_lock_renew_s)
            + stops * self.host_lock_release_calls
        )

    def listener_lock(self, starts: int, alive_s: float, stops: int) -> int:
        return (
            starts * self.listener_lock_acquire_calls
            + math.floor(alive_s / self.listener_lock_renew_s)
            + stops * self.listener_lock_release_calls
        )


@dataclass(frozen=True)
class Plan:
    name: str
    # Instances kept alive whatever the load: Elastic Premium keeps at least one; Flex Consumption none unless
    # always-ready instances are configured (plan docs).
    min_instances: int


FLEX = Plan("Flex Consumption", 0)
PREMIUM = Plan("Premium", 1)


@dataclass(frozen=True)
class Day:
    """One app's idle day: storage transactions by source."""

    sources: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.sources.values())


def builtin_polls_per_day(seed: int) -> int:
    """An always-alive instance's polls of one empty queue over a day: the built-in trigger's loop as section 4
    runs it (`bench.peers`, on a simulated clock and an always-empty simulated queue)."""
    return sum(asyncio.run(simulate_peer("a", DAY_S, seed=seed)).values())


def builtin_day(plan: Plan, queues: int, costs: HostCosts, seed: int = 1) -> Day:
    """(a): an idle queue-triggered app. On Flex Consumption nothing keeps an instance, so it scales to zero."""
    alive = plan.min_instances > 0
    return Day(
        {
            "scale-controller probes": queues * math.floor(DAY_S / costs.scale_probe_s),
            "trigger polls": queues * builtin_polls_per_day(seed) if alive else 0,
            "host secrets at start": costs.secrets_per_start(flex=False) if alive else 0,
            "primary-host lock": costs.host_lock(1, DAY_S, 0) if alive else 0,
        }
    )


def shipped_policy() -> PollPolicy:
    """The fallback's back-off at the app's own defaults (BACKOFF_* settings)."""
    return PollPolicy(
        floor_ms=setting_default("backoff_floor_ms"),
        ceiling_ms=setting_default("backoff_ceiling_ms"),
        exponent=setting_default("backoff_exponent"),
        jitter=setting_default("backoff_jitter"),
        decrease=setting_default("backoff_decrease"),
    )


# A look at an idle partition (shared.watch.fallback.poll_queue): one listing of its lanes and one depth read per lane;
# an app that never names a tenant or a priority has one lane per partition.
LOOK_READS = 2
# The look that ends a queue's chain after its last work (shared.watch.lookout.look): the chain blob read, the partition
# looked at (LOOK_READS), the blob written unarmed, and the depth read again (LOOK_READS).
CHAIN_END = 1 + LOOK_READS + 1 + LOOK_READS
# What every tick lists besides the looks, each one ListBlobs while idle: the stored notices and the batch index
# (`shared.ops.notice_sweep`), and the replays' notes (`shared.ops.replay_takeover`).
TICK_LISTINGS = 3


def fallback_looks(policy: PollPolicy, tick_s: float, seed: int) -> tuple[int, int]:
    """(depth reads, state writes) of one idle queue over a day, the fallback's real policy ticked every `tick_s`.
    The state blob is written when a look changes the interval (fallback.poll_queue saves after every look; the
    store skips a write that would not change the interval: see BENCHMARKS.md section 4)."""
    rng = random.Random(seed)
    state = policy.initial(0)
    reads = writes = 0
    for k in range(1, math.floor(DAY_S / tick_s) + 1):
        now_ms = round(k * tick_s * 1000)
        if not state.is_due(now_ms):
            continue
        reads += 1
        after = policy.after_idle(state, now_ms=now_ms, u=rng.random())
        writes += after.interval_ms != state.interval_ms
        state = after
    return reads, writes


def app_day(plan: Plan, queues: int, tick_s: float, costs: HostCosts, policy: PollPolicy, seed: int = 1) -> Day:
    """(c): the idle app with its fallback timer firing every `tick_s`."""
    reads, writes = fallback_looks(policy, tick_s, seed)
    ticks = math.floor(DAY_S / tick_s)
    always_alive = plan.min_instances > 0 or tick_s <= costs.linger_s
    flex = plan.min_instances == 0
    if always_alive:
        starts, stops, alive_s = 1, 0, float(DAY_S)
    else:  # each tick starts an instance that lives `linger_s` after its (short) run, then stops
        starts, stops, alive_s = ticks, ticks, ticks * costs.linger_s
    return Day(
        {
            "fallback looks": queues * (reads * LOOK_READS + writes),
            "timer's listings": ticks * TICK_LISTINGS,
            # A fresh instance creates the state container if missing and reads each queue's back-off state once.
            "fresh-instance reads": starts * (1 + queues),
            "host secrets at start": starts * costs.secrets_per_start(flex),
            "package download": starts * costs.package_reads_per_start if flex else 0,
            "primary-host lock": costs.host_lock(starts, alive_s, stops),
            "timer listener lock": costs.listener_lock(starts, alive_s, stops),
            # Once per quiet spell, after the last work (counted as if every day began one); none while idle.
            "look chain": queues * CHAIN_END,
        }
    )


# FALLBACK_SCHEDULE's default, 0 0 */6 * * * (tests/bench/test_idle_sources.py derives it from the setting).
SHIPPED_SCHEDULE_S = 21_600.0
# Before issue 13 (every minute), the back-off ceiling, four hours, and the default since.
SCHEDULES_S = (60.0, 1_800.0, 14_400.0, SHIPPED_SCHEDULE_S)
TARGET = 0.1  # issue 13: an idle one-queue app at most 1/10 of the built-in trigger, all sources counted
QUEUES = (1, 20)
# What nobody publishes, from one end to the other: the idle instance's linger and the scale controller's probe.
LINGER_RANGE_S = (30.0, 300.0, 1_200.0)
PROBE_RANGE_S = (10.0, 30.0, 60.0)


def table(seed: int = 1) -> list[dict[str, Any]]:
    """Every plan x queues x fallback schedule x linger: (a) and (c) per day, and (c)'s share of (a)."""
    policy = shipped_policy()
    rows = []
    for plan in (FLEX, PREMIUM):
        for linger_s in LINGER_RANGE_S if plan.min_instances == 0 else (300.0,):  # Premium never lingers out
            costs = replace(HostCosts(), linger_s=linger_s)
            for queues in QUEUES:
                a = builtin_day(plan, queues, costs, seed)
                for tick_s in SCHEDULES_S:
                    c = app_day(plan, queues, tick_s, costs, policy, seed)
                    rows.append(
                        {
                            "plan": plan.name,
                            "linger_s": linger_s,
                            "queues": queues,
                            "schedule_s": tick_s,
                            "a": a.sources,
                            "a_total": a.total,
                            "c": c.sources,
                            "c_total": c.total,
                            "c_over_a": round(c.total / a.total, 3),
                            "shipped": tick_s == SHIPPED_SCHEDULE_S,
                        }
                    )
    return rows


def break_even_linger_s(target: float, queues: int = 1, seed: int = 1, probe_s: float = 10.0) -> float:
    """The longest idle-instance linger (whole minutes) at which the shipped schedule keeps a `queues`-queue app on
    Flex Consumption within `target` x the built-in trigger whose queues are probed every `probe_s`; 0 if none."""
    policy, linger_s = shipped_policy(), 0.0
    a = builtin_day(FLEX, queues, replace(HostCosts(), scale_probe_s=probe_s), seed).total
    while linger_s < DAY_S and (
        app_day(FLEX, queues, SHIPPED_SCHEDULE_S, replace(HostCosts(), linger_s=linger_s + 60), policy, seed).total
        <= target * a
    ):
        linger_s += 60
    return linger_s


def range_table(seed: int = 1) -> list[dict[str, Any]]:
    """The shipped schedule on Flex Consumption over every linger x probe cadence, one and 20 queues."""
    policy, rows = shipped_policy(), []
    for queues in QUEUES:
        for linger_s in LINGER_RANGE_S:
            for probe_s in PROBE_RANGE_S:
                costs = replace(HostCosts(), linger_s=linger_s, scale_probe_s=probe_s)
                a = builtin_day(FLEX, queues, costs, seed).total
                c = app_day(FLEX, queues, SHIPPED_SCHEDULE_S, costs, policy, seed).total
                rows.append(
                    {
                        "queues": queues,
                        "linger_s": linger_s,
                        "probe_s": probe_s,
                        "a_total": a,
                        "c_total": c,
                        "c_over_a": round(c / a, 3),
                    }
                )
    return rows


def main() -> int:
    """`python -m bench.idle_sources`: the table into bench/results/idle_sources.json, and a summary."""
    rows = table()
    out = Path(__file__).resolve().parents[2] / "results" / "idle_sources.json"
    costs = asdict(HostCosts())
    doc = {
        "costs": costs,
        "shipped_schedule_s": SHIPPED_SCHEDULE_S,
        "break_even_linger_s": break_even_linger_s(TARGET),
        "break_even_linger_s_by_probe": {str(p): break_even_linger_s(TARGET, probe_s=p) for p in PROBE_RANGE_S},
        "range": range_table(),
        "rows": rows,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        print(
            f"{r['plan']:<16} linger {r['linger_s'] / 60:>2.0f} min  {r['queues']:>2} queue(s)  "
            f"timer every {r['schedule_s'] / 60:>3.0f} min: (a) {r['a_total']:>7,}  (c) {r['c_total']:>6,}  "
            f"c/a {r['c_over_a']}"
        )
    for r in doc["range"]:
        print(
            f"range: {r['queues']:>2} queue(s) linger {r['linger_s']:>5.0f} s probe {r['probe_s']:>3.0f} s: "
            f"(a) {r['a_total']:>7,} (c) {r['c_total']:>5,} c/a {r['c_over_a']}"
        )
    print("break-even linger by probe:", doc["break_even_linger_s_by_probe"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
