"""A synchronous replay is bounded by time (issue 26 item 2; docs/api.md, `POST /api/poison/replay`: "every call
stops taking chunks after 60 s", `more` then says to call again), checked as each replay of the `replay` family
answers, or gives up:

- **it takes no chunk after MAX_REPLAY_S**: every chunk a call took, replayed (a record's `replay_claimed_ms`,
  stamped as the replay marks a chunk's items retrying, `shared.ops.replay_marks`) or set aside (its
  `set_aside_at`), is stamped within MAX_REPLAY_S of the call's start, plus what the reads before one stamp can
  take at the slowest storage the world draws (CLAIM_READS_S) and the instances' clock skew;
- **it answers within Azure's front end's cut** (REPLAY_WAIT_S): the caller waits that long, no more;
- **a background job's progress counts every chunk it took** (issue 26 item 10: a step sized by its rate, not by
  time, outlives its claim, a status read starts a second step beside it, and the first one's progress is lost):
  once the job says done, every chunk parked when it began and gone since is counted in its `replayed`,
  `set_aside` or `skipped` (nothing else replays meanwhile: the family's replays are one at a time). (LOST)

The family reaches it in some seeds (`slow_backlog`): the operator's first replay of everything, unpaced and
unlimited, in the foreground or as a background job, while storage answers seconds late. (UNBOUNDED)
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared import api
from shared.ops.replay import MAX_REPLAY_S
from shared.ops.replay_marks import CLAIMED_MS
from sim.checks.promises import records_of
from sim.clock import EPOCH_S
from sim.doors.callers import as_caller, on_instance
from sim.scenario import Crash, ReplayCall, Scenario, Span, Submit

World = Any  # `sim.world.World` (it imports the modules that import this one)

UNBOUNDED = "a synchronous replay past its time bound"
LOST = "a replay job's progress lost"
REPLAY_WAIT_S = 230.0  # Azure's front end cuts an HTTP request after this long
SLOWEST_S = 8.0  # a slow storage request answers at most this late (`sim.storage.transport.SimTransport`)
CLAIM_READS_S = 5 * SLOWEST_S  # the requests between a call's last look at its clock and a claim's stamp
SKEW_S = 3.0  # the instances' clocks are at most this far apart (`sim.families.draw`)
SLOW_FOR_S = 240.0  # how long storage answers late from the slow replay's start
BACKLOG_ITEMS = 60  # at most, in the batch whose every chunk parks before the slow replay
JOB_READ_S = 10.0  # the operator reads a background job's status this often ...
JOB_WAIT_S = 1800.0  # ... for at most this long
SET_ASIDE = "poison-set-aside/"  # `shared.core.layout.set_aside_blob`
# What answers late: a replay's reads of poison index entries, its set-aside writes and its index deletes (the
# state container, `sim.host`): a replay slows down, drainers do not (they only write index entries).
SLOW_OPS = ("blob GET state/poison/", "blob PUT state/" + SET_ASIDE, "blob DELETE state/poison/")
STEP_KILL_S = (10.0, 50.0)  # the instances die this long after a background job's start: within its first step
JOB_RUN_S = 600.0  # a slow job's seed replays everything again this long after the job began


def slow_backlog(scenario: Scenario) -> None:
    """Drawn apart: in a third of the seeds `slow_replay` left as they were, a batch of 30-60 items whose every
    chunk parks, and the first replay of everything unpaced and unlimited (in the foreground or as a job) while
    what a replay reads, sets aside and deletes of the poison index answers 1-8 s late (SLOW_OPS), from just
    before it for SLOW_FOR_S: a replay of those parked chunks unbounded in time would take minutes."""
    rng = random.Random(f"{scenario.seed}-slow-backlog")
    first = next((n for n, r in enumerate(scenario.replay_calls) if (r.who, r.what) == ("operator", "all")), None)
    if first is None or rng.random() >= 1 / 3:
        return
    call = scenario.replay_calls[first]
    what = "all-job" if rng.random() < 0.5 else "all"  # half of them a background job (its steps bounded alike)
    scenario.replay_calls[first] = replace(call, what=what, limit=None, rate=None)
    for op in SLOW_OPS:
        scenario.storage_spans.append(Span(call.at_s - 1.0, call.at_s + SLOW_FOR_S, "slow", 1.0, op))
    if what == "all-job":  # the run lasts until the job is done: a replay of everything once more, later
        scenario.replay_calls.append(ReplayCall(round(call.at_s + JOB_RUN_S, 3), "operator", "all"))
        kill_steps(scenario, call.at_s)  # from a rng of its own
    items = rng.randint(BACKLOG_ITEMS // 2, BACKLOG_ITEMS)  # a backlog: each of its chunks fails past the limit
    at_s = round(rng.uniform(5.0, 30.0), 3)
    scenario.submits.append(Submit(at_s, 0, "backlog", items, "a", "normal", None, 0, ("t6",) * items))


def kill_steps(scenario: Scenario, began_s: float) -> None:
    """Drawn apart: in two thirds of the job seeds with faults, every instance is killed once while the job's first
    step runs (STEP_KILL_S after the job's start; whichever instance serves the step dies mid-step, having sent
    some chunks back), each down for a few seconds. The job goes on when the dead step's claim lapses."""
    rng = random.Random(f"{scenario.seed}-step-kill")
    if not scenario.faults or rng.random() >= 2 / 3:
        return
    for instance in range(len(scenario.skews_s)):
        at_s = began_s + rng.uniform(*STEP_KILL_S)
        scenario.crashes.append(Crash(round(at_s, 3), instance, rng.uniform(3.0, 20.0)))
    scenario.crashes.sort(key=lambda c: c.at_s)


def check(world: World, body: bytes, began: float, answered: bool) -> None:
    """After one synchronous replay call that began at `began` (virtual s) answered, or was given up on."""
    if not answered and world.now_s() - began >= REPLAY_WAIT_S - 1.0:
        world.violate(f"a replay of {body!r} gave no answer within {REPLAY_WAIT_S:.0f} s ({UNBOUNDED})")
    late = began + MAX_REPLAY_S + CLAIM_READS_S + SKEW_S
    claims = [at for at in claimed_at(world) if began - SKEW_S <= at]
    if claims and max(claims) > late:
        world.violate(
            f"a replay of {body!r} that began at {began:.0f} s took {sum(at > late for at in claims)} chunk(s) "
            f"after {late - began:.0f} s, the last at {max(claims) - began:.0f} s ({UNBOUNDED})"
        )


def slowed(world: World, began: float) -> bool:
    """Whether a replay that began at `began` met the slow backlog's late poison index (`slow_backlog`)."""
    spans = world.scenario.storage_spans
    return any(s.kind == "slow" and s.op in SLOW_OPS and s.start_s <= began <= s.end_s for s in spans)


def claimed_at(world: World) -> list[float]:
    """When each chunk was taken (virtual s): each record's last replay claim, each set-aside chunk."""
    out = []
    for batch_id, answers in world.answers.items():
        if 202 in answers:
            out += [int(r[CLAIMED_MS]) / 1000 - EPOCH_S for r in records_of(world, batch_id) if CLAIMED_MS in r]
    for name, blob in world.account.containers.get(world.settings.state_container, {}).items():
        if name.startswith(SET_ASIDE):
            out.append(datetime.fromisoformat(json.loads(blob.data)["set_aside_at"]).timestamp() - EPOCH_S)
    return out


async def job(world: World, parked: Any) -> None:
    """The operator's background replay of everything (`{"all": true, "background": true}`), its status read every
    JOB_READ_S until it is done; `parked(world)` answers what is parked (`sim.doors.replayers.parked`)."""
    operator = as_caller(world, None)
    before = set(parked(world))
    got = await on_instance(world, "POST /api/poison/replay (job)",
                            lambda: api.poison_replay(b'{"all": true, "background": true}', operator))  # fmt: skip
    if got is None or got[1].status != 202:
        world.note(f"replay job: {None if got is None else (got[1].status, dict(got[1].body))}")
        return
    world.features.add("replay-job")
    job_id, began = str(got[1].body.get("job_id")), world.now_s()
    while world.now_s() - began < JOB_WAIT_S:
        await asyncio.sleep(JOB_READ_S)
        read = await on_instance(world, "GET /api/poison/replay/job", lambda: api.replay_status(job_id, operator))
        view = dict(read[1].body) if read is not None and read[1].status == 200 else {}
        if view.get("state") not in (None, "pending", "running"):
            break
    else:
        world.note(f"replay job {job_id[:8]} not done in {JOB_WAIT_S:.0f} s")
        return
    if view.get("replayed"):
        world.features.add("replayed")
    gone = len(before - set(parked(world)))
    counted = int(view.get("replayed", 0)) + int(view.get("set_aside", 0)) + int(view.get("skipped", 0))
    if counted and slowed(world, began):
        world.features.add("slow-replay")
    world.note(f"replay job {job_id[:8]} done: {gone} parked chunk(s) gone, {view}"[:300])
    if gone > counted:
        world.violate(
            f"replay job {job_id[:8]} is done having counted {counted} chunk(s) (replayed, set aside, skipped), yet "
            f"{gone} of those parked when it began are gone ({LOST})"
        )
