"""A run's scenario and fault plan, drawn from its seed: what is submitted where and when, and what goes wrong.

Everything here is data; `Scenario.describe()` prints it with a failing seed, and `Scenario.draw(seed)` gives
the same scenario for the same seed on any machine.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

MODES = ("ok", "ok", "ok", "ok", "ok", "t1", "t2", "perm")
# Scenario families: `random` spreads faults over the run; `submit` aims crashes, storage faults and Service
# Bus outages at each submit's write path (chunks stored, commit, index, doorbell), every submit keyed and
# retried as a client would, and in a third of its seeds each doorbell follows a forged copy naming another
# attempt (`sim.bus.Broker._forge`); `limits` sets HANDLER_MAX_IN_FLIGHT=1 with handler calls that hang (in half its
# seeds, drainers joining and leaving while each runs several chunks at once: `sim.claim_churn`).
# `volume` is a run without faults at the default chunk size, a few thousand items: its storage transactions
# per 1,000 items are held to the documented figure (BENCHMARKS.md section 1).
# `priority` (no faults) has a drainer with several receivers work through high backlogs of three tenants while
# normal batches arrive mid-drain: high chunk starts are held to HIGH_BURST x RECEIVE_BATCH in a row while a normal
# chunk waits (`sim.checks.invariants.high_starts_watched`).
# `storage` has storage faults only (spans of 5xx, timeouts, requests applied with their answer lost; in half its
# seeds the result writes failing for a while) and nothing that can lose a look, so the look bound
# (`sim.checks.invariants.Looks`) holds without the fallback timer; in a third of its seeds Service Bus loses every
# doorbell, so the look chain is the only net (`sim.families.aim_at_storage`).
# `lifecycle`, `idle` and `platform` (`sim.families`) open the other doors: the API's options, callbacks to a
# receiver that misbehaves, polls and exports, cancels and replays through the API, sync handlers, idle hours and
# many tenants, slow storage, failed lock renewals and settlements, Service Bus refusing sends.
# `replay` (`sim.families`) has tenants as callers (TENANT_FROM=principal): their batches end with chunks parked,
# then the operator and the tenants replay through the API, page by page and with bodies that name nothing.
# `history` (`sim.history`) holds a week of ended markers in storage, cancels dozens of batches, reads results pages
# of big ones and answers the drainers' looks at the ended markers late around cancels.
# `stale-cancel` (`sim.stale_cancel`): a cancel whose read is stale when it ends its batch, under polling clients.
# `copies` (`sim.copies`): chunk messages put twice, both copies handled, retried and parked at once.
# `straddle` (`sim.straddle`): replays of everything, slowed by the poison index, straddling their batch's stamp.
# `schedule` and `flood` (`sim.doorbell_families`) aim at doorbells: scheduled batches whose doorbell is deferred or
# rung again by a keyed retry, and floods of many tenants' one-item submits behind one drain.
FAMILIES = ("random", "submit", "limits", "volume", "priority", "storage", "lifecycle", "idle", "platform", "replay",
            "history", "schedule", "flood", "stale-cancel", "copies", "straddle")  # fmt: skip
BASIC = FAMILIES[:6]
SIZES = (1, 2, 5, 9, 17)
VOLUME_SIZES = (5000, 10000, 20000)


@dataclass(frozen=True)
class Submit:
    at_s: float
    instance: int
    label: str
    items: int
    tenant: str
    priority: str
    key: str | None
    retries: int  # how often the client tries again after no answer or a 5xx (keyed submits only)
    modes: tuple[str, ...]
    # How the request is made (`sim.doors.callers.submit_request`): NDJSON, gzip, options as query parameters rather
    # than headers, lifecycle options (expires_in_s, not_before, max_failed_fraction), a callback_url.
    ndjson: bool = False
    gzip: bool = False
    as_params: bool = False
    options: tuple[tuple[str, str], ...] = ()
    callback: bool = False

    def body(self) -> bytes:
        items = [{"b": self.label, "n": i, "m": m} for i, m in enumerate(self.modes)]
        return json.dumps({"items": items}).encode()


@dataclass(frozen=True)
class Span:
    start_s: float
    end_s: float
    kind: str = "down"  # storage: "5xx", "timeout", "lost", "slow", "late" (`sim.storage.transport.SimTransport`)
    rate: float = 1.0  # share of requests hit while it lasts
    op: str = ""  # storage: only requests whose name starts so ("queue DELETE", "blob PUT results"...); "": all


@dataclass(frozen=True)
class ReplayCall:
    """One POST /api/poison/replay of the `replay` family (`sim.doors.replayers`), made in order, one at a time: by
    `who` (a tenant's principal, or "operator"), of `what`: "all" (`{"all": true}`), "batch" (the batch of submit
    `label`) or one of `sim.doors.replayers.NAMING_NOTHING` (a body that names nothing: a 400 for everyone), with
    `limit` and `rate` if given; "all" is called again while it answers `more: true`."""

    at_s: float
    who: str
    what: str
    label: str = ""
    limit: int | None = None
    rate: float | None = None


@dataclass(frozen=True)
class Crash:
    at_s: float
    instance: int
    down_s: float


@dataclass
class Scenario:
    seed: int
    faults: bool
    settings: dict[str, str]
    skews_s: tuple[float, ...]
    submits: list[Submit]
    crashes: list[Crash] = field(default_factory=list)
    storage_spans: list[Span] = field(default_factory=list)
    bus_spans: list[Span] = field(default_factory=list)
    bus_lose: float = 0.0
    bus_duplicate: float = 0.0
    bus_delay_s: float = 0.0
    lose_doorbells: bool = False  # Service Bus loses every doorbell it accepts (`sim.families.aim_at_storage`)
    forge_doorbells: bool = False  # each doorbell follows a copy naming another attempt (`sim.families.draw`)
    handler_hang: float = 0.0
    stuck: str | None = None  # the submit whose first chunk hangs at every handler call (`sim.stuck`)
    cancels: list[tuple[float, int]] = field(default_factory=list)  # (when, which submit) a client cancels
    timer_s: float = 600.0
    family: str = "random"
    # The doors of `sim.families` (new families only; the first six draw none of these).
    handler: str = "async"  # "sync": a plain function, run in the instance's bounded thread pool
    handler_s: tuple[float, float] = (0.001, 0.2)  # how long a handler call takes
    threads: int = 4  # the default executor's threads per instance (`asyncio.to_thread`)
    thread_start_s: tuple[float, float] = (0.0, 0.002)  # how late a thread of its own begins (a busy machine)
    receiver: list[Span] = field(default_factory=list)  # "down", "slow", "failing", "duplicating"
    api_cancels: list[tuple[float, str]] = field(default_factory=list)  # (when, which submit's label)
    polls: list[tuple[str, float, int]] = field(default_factory=list)  # (label, every s, how many times)
    replays: list[tuple[float, bool, bool]] = field(default_factory=list)  # (when, background, every batch)
    renewals: list[Span] = field(default_factory=list)  # the host's lock renewals fail while it lasts
    settle_fail: float = 0.0  # chance that completing a trigger message fails (its lock lost meanwhile)
    sends: list[Span] = field(default_factory=list)  # Service Bus sends "refused" or "link" errors; deliveries go on
    idle: list[Span] = field(default_factory=list)  # stretches with nothing to do (for the idle-cost check)
    replay_calls: list[ReplayCall] = field(default_factory=list)  # the `replay` family's, in order
    malformed: list[tuple[float, str]] = field(default_factory=list)  # (when, which) `sim.doors.malformed` sends
    second_park: float | None = None  # when a parked chunk is parked a second time (`sim.doors.second_parks`)
    drill: Any = None  # the notice drill of some lifecycle seeds (`sim.doors.notice_drills.Drill`)
    # History at scale (`sim.checks.costs`): ended markers of a week of cancels in storage before the run, a blob
    # listing's page (0: Azure's 5,000), and clients reading `pages` results pages of `limit` lines of a batch
    # from a position (`sim.doors.callers.read_pages`: (when, label, limit, from position, pages)).
    history: int = 0
    list_page: int = 0
    cancel_on: dict[str, int] = field(default_factory=dict)  # label -> which live instance answers its cancel (0)
    exports: list[tuple[float, str, int, int, int]] = field(default_factory=list)

    @property
    def fault_end_s(self) -> float:
        ends = [c.at_s + c.down_s for c in self.crashes]
        ends += [s.end_s for s in self.storage_spans] + [s.end_s for s in self.bus_spans]
        ends += [s.at_s for s in self.submits] + [at for at, _ in self.cancels]
        ends += [s.end_s for s in self.receiver + self.renewals + self.sends]
        ends += [at for at, _ in self.api_cancels] + [at for at, _, _ in self.replays]
        ends += [r.at_s for r in self.replay_calls]
        ends += [at for at, *_ in self.exports]
        return max(ends, default=0.0)

    @property
    def exact(self) -> bool:
        """No fault that may cost an item an attempt: every item's outcome is known in advance."""
        faults = self.crashes or self.storage_spans or self.handler_hang or self.bus_spans or self.bus_lose
        doors = self.renewals or self.settle_fail or self.sends or self.replays or self.api_cancels
        lifecycles = any(s.options or "t6" in s.modes for s in self.submits)
        return not (faults or doors or lifecycles)

    @classmethod
    def draw(cls, seed: int, *, faults: bool = True, family: str = "random") -> Scenario:
        if family not in BASIC:
            raise ValueError(f"scenario family {family!r} is not one of {', '.join(BASIC)} (see sim.families.draw)")
        rng = random.Random(f"scenario-{seed}" if family == "random" else f"scenario-{family}-{seed}")
        instances = rng.randint(1, 3)
        settings = draw_settings(rng)
        skews = tuple(rng.uniform(-3.0, 3.0) if faults else 0.0 for _ in range(instances))
        submits = []
        for n in range(rng.randint(2, 7)):
            size = rng.choice(VOLUME_SIZES if family == "volume" else SIZES)
            keyed = rng.random() < 0.4 or family == "submit"
            submits.append(
                Submit(
                    at_s=round(rng.uniform(0.0, 40.0), 3),
                    instance=rng.randrange(instances),
                    label=f"b{n}",
                    items=size,
                    tenant=rng.choice(["", "", "a", "b"]),
                    priority=rng.choice(["normal", "normal", "high"]),
                    key=f"key-{seed}-{n}" if keyed else None,
                    retries=2 if keyed else 0,
                    modes=tuple(rng.choice(MODES) for _ in range(size)),
                )
            )
        if family == "limits":
            settings["HANDLER_MAX_IN_FLIGHT"] = "1"
        if family == "volume":  # as the benchmark's backlog: the default chunk size, one lane, every item ok
            faults = False
            del settings["CHUNK_MAX_ITEMS"]
            submits = [replace(s, tenant="", priority="normal", modes=("ok",) * s.items) for s in submits]
        if family == "priority":
            faults = False
            settings |= {"WORK_QUEUE_PARTITIONS": "1", "MAX_DRAINERS_PER_QUEUE": "1", "HANDLER_MAX_IN_FLIGHT": "0",
                         "RECEIVERS": "4", "CHUNK_MAX_ITEMS": "2", "DRAIN_BUDGET_S": "60",
                         "RECEIVE_BATCH": str(rng.choice([2, 4])),
                         "CHUNK_CONCURRENCY": str(rng.choice([1, 2]))}  # fmt: skip
            submits = priority_submits(rng, instances)
        scenario = cls(seed, faults, settings, skews, sorted(submits, key=lambda s: s.at_s), family=family)
        if faults and family == "submit":
            scenario.aim_at_submits(rng, instances)
        elif faults and family == "storage":
            scenario.storage_faults_only(rng)
        elif faults:
            scenario.add_faults(rng, instances)
            if family == "limits":
                scenario.handler_hang = 0.1
        if family != "volume":
            # Drawn apart, so that the scenarios drawn before cancels existed stay as they were.
            cancels = random.Random(f"cancels-{family}-{seed}")
            if cancels.random() < 0.3:
                n = cancels.randrange(len(scenario.submits))
                scenario.cancels.append((round(scenario.submits[n].at_s + cancels.uniform(0.0, 10.0), 3), n))
        return scenario

    def aim_at_submits(self, rng: random.Random, instances: int) -> None:
        """Faults inside a submit's first second, where its writes are: a crash of the instance answering it,
        storage requests failing or applied with their answer lost, Service Bus away for its doorbell."""
        for sub in self.submits:
            at = sub.at_s + rng.uniform(0.0, 0.4)
            roll = rng.random()
            if roll < 0.35:
                self.crashes.append(Crash(round(at, 3), sub.instance, rng.uniform(1, 20)))
            elif roll < 0.8:
                kind = rng.choice(["5xx", "lost", "lost", "timeout"])
                self.storage_spans.append(Span(at, at + rng.uniform(0.05, 1.5), kind, rng.choice([0.5, 1.0])))
            else:
                self.bus_spans.append(Span(at, at + rng.uniform(1.0, 10.0)))
        self.crashes.sort(key=lambda c: c.at_s)

    def storage_faults_only(self, rng: random.Random) -> None:
        """Storage spans (5xx, timeouts, requests applied with their answer lost) and nothing that can lose a
        trigger event or a look: no crash, no Service Bus fault, no hanging handler."""
        for _ in range(rng.randint(1, 3)):
            start = rng.uniform(0.0, 80.0)
            kind = rng.choice(["5xx", "timeout", "lost", "lost"])
            self.storage_spans.append(Span(start, start + rng.uniform(0.5, 25.0), kind, rng.choice([0.2, 0.5, 1.0])))

    def add_faults(self, rng: random.Random, instances: int) -> None:
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            self.crashes.append(Crash(round(rng.uniform(0.5, 80.0), 3), rng.randrange(instances), rng.uniform(1, 60)))
        for _ in range(rng.choice([0, 0, 1, 2])):
            start = rng.uniform(0.0, 80.0)
            kind = rng.choice(["5xx", "5xx", "timeout", "lost"])
            self.storage_spans.append(Span(start, start + rng.uniform(0.5, 25.0), kind, rng.choice([0.2, 0.5, 1.0])))
        for _ in range(rng.choice([0, 0, 1])):
            start = rng.uniform(0.0, 80.0)
            self.bus_spans.append(Span(start, start + rng.uniform(1.0, 30.0)))
        self.bus_lose = rng.choice([0.0, 0.0, 0.05, 0.2])
        self.bus_duplicate = rng.choice([0.0, 0.1])
        self.bus_delay_s = rng.choice([0.0, 2.0])
        self.handler_hang = rng.choice([0.0, 0.0, 0.0, 0.01])
        self.crashes.sort(key=lambda c: c.at_s)

    def describe(self) -> str:
        out: list[Any] = [
            f"scenario {self.seed} ({self.family}): {len(self.skews_s)} instance(s), skews "
            + ", ".join(f"{s:+.2f} s" for s in self.skews_s)
        ]
        out.append("  settings: " + " ".join(f"{k}={v}" for k, v in sorted(self.settings.items())))
        for s in self.submits:
            out.append(
                f"  submit {s.label} at {s.at_s:.3f} s on i{s.instance}: {s.items} items "
                f"tenant={s.tenant or '-'} {s.priority} key={s.key} modes={','.join(s.modes)}"
            )
        for at, n in self.cancels:
            out.append(f"  cancel {self.submits[n].label} at {at:.3f} s")
        for c in self.crashes:
            out.append(f"  crash i{c.instance} at {c.at_s:.3f} s for {c.down_s:.1f} s")
        for sp in self.storage_spans:
            out.append(f"  storage {sp.kind} ({sp.rate:.0%}) {sp.op or 'any request'} from {sp.start_s:.3f} s "
                       f"to {sp.end_s:.3f} s")  # fmt: skip
        for sp in self.bus_spans:
            out.append(f"  Service Bus away from {sp.start_s:.3f} s to {sp.end_s:.3f} s")
        out.extend(self.describe_doors())
        if self.lose_doorbells:
            out.append("  Service Bus loses every doorbell (the look chain is the only net)")
        if self.forge_doorbells:
            out.append("  each doorbell follows a copy of it naming another attempt (a forged event)")
        if self.stuck is not None:
            out.append(f"  the handler hangs at every call of {self.stuck}'s first chunk")
        out.append(
            f"  bus: lose {self.bus_lose:.0%}, duplicate {self.bus_duplicate:.0%}, delay up to "
            f"{self.bus_delay_s:.0f} s; handler hangs {self.handler_hang:.0%}"
        )
        return "\n".join(out)

    def describe_doors(self) -> list[str]:
        out: list[str] = []
        if self.family in BASIC:
            return out
        low, high = self.handler_s
        out.append(f"  handler {self.handler} ({self.threads} shared threads a host, a thread starts within "
                   f"{self.thread_start_s[1]:.3f} s), {low:.3f}-{high:.3f} s a call; "
                   f"settlement fails {self.settle_fail:.0%}")  # fmt: skip
        for s in self.submits:
            extra = [f"{k}={v}" for k, v in s.options] + ["callback"] * s.callback
            extra += ["ndjson"] * s.ndjson + ["gzip"] * s.gzip + ["as query"] * s.as_params
            if extra:
                out.append(f"  submit {s.label}: {' '.join(extra)}")
        for at, label in self.api_cancels:
            out.append(f"  cancel {label} through the API at {at:.3f} s")
        for label, every, times in self.polls:
            out.append(f"  poll {label} every {every:.0f} s, {times} times, then export")
        for at, background, whole in self.replays:
            out.append(f"  replay {'every batch' if whole else 'one batch'} at {at:.3f} s"
                       + (" in the background" if background else ""))  # fmt: skip
        for r in self.replay_calls:
            out.append(f"  replay {r.what} {r.label} by {r.who} at {r.at_s:.3f} s, limit {r.limit}, rate {r.rate}")
        if self.second_park is not None:
            out.append(f"  a parked chunk parked a second time at {self.second_park:.3f} s")
        for at, name in self.malformed:
            out.append(f"  malformed request {name} at {at:.3f} s")
        if self.history or self.list_page:
            out.append(f"  {self.history} ended markers of a week in storage; listing pages of {self.list_page}")
        for at, label, limit, start, count in self.exports:
            out.append(f"  read {count} results pages of {label}, {limit} lines from position {start}, at {at:.3f} s")
        for name, spans in (("receiver", self.receiver), ("lock renewals fail", self.renewals),
                            ("Service Bus sends", self.sends), ("idle", self.idle)):  # fmt: skip
            for sp in spans:
                out.append(f"  {name} {sp.kind} from {sp.start_s:.3f} s to {sp.end_s:.3f} s")
        out.extend([self.drill.describe()] if self.drill is not None else [])
        return out


def draw_settings(rng: random.Random) -> dict[str, str]:
    """The engine's settings a scenario runs with (the same draws, in the same order, for every family)."""
    return {
        "WORK_QUEUE_PARTITIONS": str(rng.choice([1, 1, 2])),
        "CHUNK_MAX_ITEMS": str(rng.randint(2, 6)),
        "MAX_DRAINERS_PER_QUEUE": str(rng.randint(1, 3)),
        "CHUNK_CONCURRENCY": str(rng.randint(1, 4)),
        "RECEIVERS": str(rng.randint(1, 2)),
        "RECEIVE_BATCH": str(rng.choice([1, 4, 32])),
        "VISIBILITY_TIMEOUT_S": str(rng.choice([5, 10, 30])),
        "DRAIN_BUDGET_S": str(rng.choice([10, 30, 60])),
        "LEASE_S": "15",
        "SCALE_OUT_DEPTH": str(rng.choice([2, 50])),
        "MAX_DEQUEUE_COUNT": str(rng.choice([4, 5])),
        "RETRY_BASE_DELAY_MS": "500",
        "RETRY_MAX_DELAY_MS": "4000",
        "BACKOFF_FLOOR_MS": "5000",
        "BACKOFF_CEILING_MS": "60000",
        "PUBLISH_TIMEOUT_S": "3",
        "HANDLER_MAX_IN_FLIGHT": str(rng.choice([0, 0, 1, 2])),
    }


def priority_submits(rng: random.Random, instances: int) -> list[Submit]:
    """High batches of three tenants at once, then normal batches of other tenants while those drain."""
    out = []
    for n, tenant in enumerate(("", "a", "b")):
        size = rng.randint(40, 80)
        out.append(Submit(round(rng.uniform(0.0, 1.0), 3), rng.randrange(instances), f"h{n}", size, tenant, "high",
                          None, 0, ("ok",) * size))  # fmt: skip
    for n in range(rng.randint(2, 4)):
        size = rng.randint(4, 16)
        out.append(Submit(round(rng.uniform(2.0, 10.0), 3), rng.randrange(instances), f"n{n}", size,
                          rng.choice(["c", "d", ""]), "normal", None, 0, ("ok",) * size))  # fmt: skip
    return out
