"""The scenario families about doorbells (`sim.families.draw` dispatches to them), both with the look chain's
shipped back-off (a 1-minute floor growing to 30 minutes), so a doorbell that does not come is not made up for
by a look a few seconds later:

- `schedule`: batches with a `not_before` some minutes ahead, each keyed, and at some submits what keeps their
  doorbell from ringing at once: Service Bus refusing sends (the doorbell is deferred: `shared.bus.deferrals`
  rings it once Service Bus answers), or Service Bus away and the answering instance dying before its doorbell is
  sent (no 202: the client's keyed retry finds the batch committed and rings it, `shared.intake.submit`). Every
  doorbell of a scheduled batch must come at its start (issue 36 item 6), which `sim.checks.progress` holds.
- `flood`: many tenants' one-item submits within seconds while a drainer holds the partition's lease: their
  doorbells queue behind the drain that takes their work and come due after it (issue 36 item 16), which
  `sim.checks.doorbells` holds to no storage call.

Their draws come from generators of their own; no other family's draws change.
"""

from __future__ import annotations

import random

from sim.scenario import Crash, Scenario, Span, Submit

SCHEDULED_S = (150.0, 420.0)  # how far ahead a scheduled batch starts: past the chain's first looks (60 s, 180 s)
FLOOD = (30, 120)  # one-item submits in a flood
FLOOD_S = (3.0, 20.0)  # over how long


def shipped_backoff(scenario: Scenario) -> None:
    """The look chain's back-off as shipped (the settings' defaults), not the other families' 5-60 s."""
    for name in ("BACKOFF_FLOOR_MS", "BACKOFF_CEILING_MS"):
        scenario.settings.pop(name, None)


def schedule(scenario: Scenario, rng: random.Random, instances: int) -> None:
    shipped_backoff(scenario)
    out = []
    for k in range(rng.randint(2, 5)):
        size = rng.choice((1, 2, 5, 9))
        scheduled = k == 0 or rng.random() < 0.6
        options = (("not_before", str(round(rng.uniform(*SCHEDULED_S)))),) if scheduled else ()
        out.append(
            Submit(
                at_s=round(rng.uniform(0.0, 40.0), 3),
                instance=rng.randrange(instances),
                label=f"b{k}",
                items=size,
                tenant=rng.choice(["", "a", "b"]),
                priority="normal",
                key=f"key-{scenario.seed}-{k}",
                retries=4,  # after no answer, on the next live instance (or once the only one is back)
                modes=tuple(rng.choice(("ok", "ok", "ok", "t1")) for _ in range(size)),
                as_params=rng.random() < 0.3,
                options=options,
            )
        )
    scenario.submits = out
    if not scenario.faults:
        return
    for sub in out:
        if not sub.options:
            continue
        roll = rng.random()
        if roll < 0.4:  # its doorbell refused: deferred, rung again once Service Bus answers
            scenario.sends.append(
                Span(round(sub.at_s - 0.5, 3), round(sub.at_s + rng.uniform(2.0, 30.0), 3), "refused")
            )
        elif roll < 0.8:  # Service Bus away, and the answering instance dies while its doorbell waits: no 202
            scenario.bus_spans.append(Span(round(sub.at_s - 0.05, 3), round(sub.at_s + rng.uniform(2.0, 12.0), 3)))
            scenario.crashes.append(Crash(round(sub.at_s + rng.uniform(0.1, 1.5), 3), sub.instance, rng.uniform(1, 8)))
    scenario.crashes.sort(key=lambda c: c.at_s)
    scenario.sends.sort(key=lambda s: s.start_s)
    scenario.bus_spans.sort(key=lambda s: s.start_s)


def flood(scenario: Scenario, rng: random.Random, instances: int) -> None:
    shipped_backoff(scenario)
    scenario.settings |= {"DRAIN_BUDGET_S": "60", "HANDLER_MAX_IN_FLIGHT": "0"}
    if rng.random() < 0.6:  # one process, as the issue measured it: every doorbell queues behind its drain
        scenario.skews_s, instances = scenario.skews_s[:1], 1
    n, within = rng.randint(*FLOOD), rng.uniform(*FLOOD_S)
    scenario.submits = [
        Submit(
            at_s=round(rng.uniform(0.0, within), 3),
            instance=rng.randrange(instances),
            label=f"f{k}",
            items=1,
            tenant=f"t{k}",
            priority="normal",
            key=None,
            retries=0,
            modes=("ok",),
            ndjson=rng.random() < 0.3,
        )
        for k in range(n)
    ]
