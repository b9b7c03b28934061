"""A model of the Azure Functions platform draining one backlog: scale controller, instances, cold starts, CPU.

`bench.measures.platform.run` runs it (`python -m bench.platform`); this module is the model itself, its inputs
are in `params`.

A deterministic, seeded, time-stepped discrete simulation. It answers one question the local benchmarks cannot:
how long a backlog takes on Azure when the platform, not this machine, decides how many instances run. It drives
the app's own policy code, not a copy of it: `shared.engine.scaling.drainers_for_depth` with the defaults of
`shared.core.settings.Settings` decides how many drainers a depth deserves,
`shared.engine.drainer.SCALE_CHECK_S` how often the first drainer looks, `drain_budget_s` when a session ends
with `continue`, and host.json's
`extensions.serviceBus.maxConcurrentCalls` what the scale controller divides by. The peer is the built-in queue
trigger on the same chunk messages, scaled by queue length / (`batchSize` + `newBatchThreshold`).

What it models, with the source of every constant beside it (`PlatformParams`):
- Target-based scaling: desired instances = event source length / target executions per instance; at most +4
  instances per decision; one decision per `decision_interval_s` (30 s, published); scale-in of instances idle for
  `scale_in_delay_s`, and, when the count wants fewer instances than are busy, drain mode for busy ones (they take
  nothing new and go when their executions end). For Service Bus the event source length is the queue's active
  messages; whether that counts a message locked by a running execution (the app's trigger event stays locked for
  the whole drain session) is not published, so `locked_counts_as_active` runs both readings.
- Instances: `cold_start_s` (drawn from a range, seeded) before a new instance runs anything; one vCPU each, shared
  by its executions; at most `maxConcurrentCalls` Service Bus executions each (the built-in trigger: `batchSize`
  + `newBatchThreshold` messages).
- Storage: 2,000 messages/s per queue (its scalability target); the handler's CPU per item; a drainer's I/O ceiling.
- Service Bus delivery latency for every trigger event.

What it leaves out, plainly: network jitter beyond the delivery latency, storage throttling below the target,
the host's own storage traffic, failures and retries, memory limits, and instance placement (any ready instance
with a free slot takes the next event, as competing consumers do).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bench.measures.platform.params import AppPolicy, PlatformParams, Workload
from shared.engine.scaling import deserves_slot, drainers_for_depth


@dataclass
class Instance:
    ident: int
    ready_at: float
    executions: list[Execution] = field(default_factory=list)
    idle_since: float = 0.0
    # Chosen for removal while busy: the host's drain mode stops its listeners and lets the executions in flight
    # finish (DrainModeManager, azure-webjobs-sdk src/Microsoft.Azure.WebJobs.Host/Hosting/DrainModeManager.cs);
    # the instance goes when the last one ends.
    draining: bool = False

    def ready(self, t: float) -> bool:
        return t >= self.ready_at


@dataclass
class Execution:
    slot: int
    started: float
    last_check: float = -math.inf
    recruited: int = 1


@dataclass
class Outcome:
    name: str
    drained_s: float
    peak_instances: int
    instance_seconds: float
    first_item_s: float
    peak_items_per_s: float  # the best minute
    busy_drained: int  # busy instances the platform chose to remove (drain mode)
    timeline: list[tuple[float, int, int]]  # (t, instances, trigger events in flight)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("timeline")
        return d


class Simulation:
    """The shared machinery: time, instances, the scale controller, CPU; a subclass says what an execution does."""

    name = "model"

    def __init__(self, params: PlatformParams, work: Workload, chunk_items: int, seed: int) -> None:
        self.p, self.w, self.chunk_items = params, work, chunk_items
        self.rng = random.Random(seed)
        self.t = 0.0
        self.depth_items = work.items
        self.instances: list[Instance] = [Instance(i, 0.0) for i in range(params.always_ready)]
        self.next_id = params.always_ready
        self.instance_seconds = 0.0
        self.first_item_s = math.nan
        self.timeline: list[tuple[float, int, int]] = []
        self.depths: list[float] = []  # the backlog at every step
        self.busy_drained = 0  # busy instances the platform chose to remove (drain mode)

    # what a subclass provides
    def metric(self) -> int:
        raise NotImplementedError

    def target(self) -> int:
        raise NotImplementedError

    def deliver(self) -> None:
        raise NotImplementedError

    def after_work(self) -> None:
        raise NotImplementedError

    def executing(self, inst: Instance) -> int:
        return len(inst.executions)

    def in_flight(self) -> int:
        return sum(len(i.executions) for i in self.instances)

    # the platform
    def scale(self) -> None:
        desired = min(self.p.max_instances, math.ceil(self.metric() / self.target()))
        desired = max(desired, self.p.always_ready)
        staying = [i for i in self.instances if not i.draining]
        n = len(staying)
        if desired > n:
            for _ in range(min(self.p.max_add_per_decision, desired - n)):
                low, high = self.p.cold_start_s
                self.instances.append(Instance(self.next_id, self.t + self.rng.uniform(low, high), idle_since=self.t))
                self.next_id += 1
        elif desired < n:
            self.scale_in(staying, n - desired)

    def scale_in(self, staying: list[Instance], excess: int) -> None:
        """Idle instances go first, once idle for the delay. Only when the count wants fewer instances than are
        busy (assumed: the platform prefers idle ones; it does not publish its choice) is a busy one drained."""
        idle = [i for i in staying if not i.executions]
        expired = [i for i in idle if self.t - i.idle_since >= self.p.scale_in_delay_s and i.ready(self.t)]
        for inst in expired[:excess]:
            self.instances.remove(inst)
        busy_excess = excess - len(idle)
        for inst in [i for i in staying if i.executions][: max(0, busy_excess)]:
            inst.draining = True
            self.busy_drained += 1

    def retire(self) -> None:
        """A draining instance goes once its last execution has ended."""
        self.instances = [i for i in self.instances if not (i.draining and not i.executions)]

    def work(self) -> None:
        """CPU: each busy ready instance settles what its vCPUs allow; the queue's message rate caps the total."""
        busy = [i for i in self.instances if i.ready(self.t) and self.executing(i)]
        if not busy or self.depth_items <= 0:
            return
        per_instance = [
            min(self.p.vcpus_per_instance / self.w.cpu_s_per_item, self.executing(i) * self.w.drainer_items_per_s)
            for i in busy
        ]
        cap = self.p.queue_messages_per_s * self.chunk_items
        total = min(sum(per_instance), cap) * self.p.step_s
        done = min(self.depth_items, total)
        if done > 0 and math.isnan(self.first_item_s):
            self.first_item_s = self.t
        self.depth_items -= done

    def run(self, limit_s: float = 7 * 86_400.0) -> Outcome:
        next_decision = self.rng.uniform(0, self.p.decision_interval_s)  # the controller's clock is not ours
        while self.t < limit_s:
            if self.t >= next_decision:
                self.scale()
                next_decision = self.t + self.p.decision_interval_s
            self.deliver()
            self.work()
            self.after_work()
            self.retire()
            for inst in self.instances:
                if inst.executions:
                    inst.idle_since = self.t
            self.instance_seconds += len(self.instances) * self.p.step_s
            self.depths.append(self.depth_items)
            if not self.timeline or self.timeline[-1][1:] != (len(self.instances), self.in_flight()):
                self.timeline.append((round(self.t, 2), len(self.instances), self.in_flight()))
            if self.depth_items <= 0 and self.in_flight() == 0 and self.metric() == 0:
                break
            self.t += self.p.step_s
        return Outcome(
            self.name,
            round(self.t, 2),
            max(n for _, n, _ in self.timeline),
            round(self.instance_seconds, 1),
            round(self.first_item_s, 2),
            round(self.peak_rate(60.0), 1),
            self.busy_drained,
            self.timeline,
        )

    def peak_rate(self, window_s: float) -> float:
        n = max(1, round(window_s / self.p.step_s))
        d = self.depths
        if len(d) <= n:
            return (self.w.items - (d[-1] if d else self.w.items)) / max(self.t, self.p.step_s)
        return max(d[i - n] - d[i] for i in range(n, len(d))) / (n * self.p.step_s)


class AppModel(Simulation):
    """This app: Service Bus trigger events (submit, scale-out, continue) start drain sessions, one per slot."""

    name = "app"

    def __init__(self, params: PlatformParams, work: Workload, policy: AppPolicy, seed: int) -> None:
        super().__init__(params, work, policy.chunk_items, seed)
        self.policy = policy
        self.pending: list[tuple[float, int, int]] = []  # (deliverable at, sequence, slot): active, unlocked
        self.sequence = 0
        self.leased: set[int] = set()
        self.publish(0)  # the submit's doorbell

    def publish(self, slot: int) -> None:
        heapq.heappush(self.pending, (self.t + self.p.delivery_latency_s, self.sequence, slot))
        self.sequence += 1

    def metric(self) -> int:
        """The trigger queue's active messages: those ready for delivery, and (one reading) those locked by
        running executions."""
        ready = len(self.pending)
        return ready + self.in_flight() if self.p.locked_counts_as_active else ready

    def target(self) -> int:
        return self.policy.max_concurrent_calls

    def deliver(self) -> None:
        while self.pending and self.pending[0][0] <= self.t:
            free = [
                i
                for i in self.instances
                if i.ready(self.t) and not i.draining and len(i.executions) < self.policy.max_concurrent_calls
            ]
            if not free:
                return
            _, _, slot = heapq.heappop(self.pending)
            if slot in self.leased:
                continue  # the slot's lease is held: the session ends at once (the event is completed)
            self.leased.add(slot)
            min(free, key=lambda i: len(i.executions)).executions.append(Execution(slot, self.t))

    def executing(self, inst: Instance) -> int:
        return len(inst.executions) if self.depth_items > 0 else 0

    def after_work(self) -> None:
        depth_messages = math.ceil(self.depth_items / self.chunk_items)
        for inst in self.instances:
            for ex in list(inst.executions):
                if ex.slot == 0 and self.t - ex.last_check >= self.policy.scale_check_s:
                    ex.last_check = self.t
                    wanted = drainers_for_depth(
                        depth_messages,
                        per_drainer=self.policy.scale_out_depth,
                        maximum=self.policy.max_drainers_per_queue,
                    )
                    for slot in range(ex.recruited, wanted):
                        self.publish(slot)
                    ex.recruited = max(ex.recruited, wanted)
                ended = depth_messages == 0
                if not ended and self.t - ex.started >= self.policy.drain_budget_s:
                    ended = True
                    if deserves_slot(
                        ex.slot,
                        depth_messages,
                        per_drainer=self.policy.scale_out_depth,
                        maximum=self.policy.max_drainers_per_queue,
                    ):
                        self.publish(ex.slot)  # `continue` for the same slot; the others end here
                if ended:
                    inst.executions.remove(ex)
                    self.leased.discard(ex.slot)


class BuiltinQueueModel(Simulation):
    """The built-in queue trigger, one item per message as its users enqueue them (the README's per-item
    formula): the queue's length is the scale metric, and each message is one execution."""

    name = "built-in queue trigger"

    def __init__(self, params: PlatformParams, work: Workload, seed: int) -> None:
        super().__init__(params, work, 1, seed)
        io_per_message = 2 * params.queue_round_trip_s
        per_instance = params.queue_batch_size + params.queue_new_batch_threshold
        self.w = replace(work, drainer_items_per_s=1 / io_per_message)
        self.per_instance = per_instance
        # Always-ready instances have been idle: each looks next at some point of its longest polling interval.
        self.first_poll = {
            inst.ident: self.rng.uniform(0, params.queue_max_polling_interval_s) for inst in self.instances
        }

    def metric(self) -> int:
        return math.ceil(self.depth_items)

    def target(self) -> int:
        return self.p.queue_batch_size + self.p.queue_new_batch_threshold

    def deliver(self) -> None:
        """Every ready instance keeps batchSize + newBatchThreshold messages in hand while the queue has any."""
        left = self.metric()
        for inst in self.instances:
            polling = inst.ready(self.t) and not inst.draining and self.t >= self.first_poll.get(inst.ident, 0.0)
            take = min(self.per_instance, left) if polling else 0
            inst.executions = [Execution(0, self.t)] * take
            left -= take

    def after_work(self) -> None:
        pass
