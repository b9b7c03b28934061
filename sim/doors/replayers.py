"""The `replay` family's replays (`sim.scenario.ReplayCall`), made through the API one after another, and what a
replay promises its caller (docs/api.md, `POST /api/poison/replay`), checked as each one answers:

- **A replay takes only what it was asked for** (issue 36 item 15). The parked chunks a call took (the poison
  index entries gone by its answer, put back or set aside: the calls are made one at a time, and nothing else
  removes an entry) all belong to what it named (`{"all": true}`: any batch; `{"batch_id"}`: that batch) and,
  unless the caller is the operator, to the caller's own tenant; a body that names nothing (empty, `{}`, a null,
  options only) is a 400 for everyone, never a replay of everything. (WIDER)
- **A synchronous replay makes progress** (issue 36 item 5). `limit` counts chunks replayed, not those left parked
  or set aside, so an answer `more: true` has replayed or set aside a chunk (unless its 60 s window ran out); a
  caller calling again while `more` is true gets `more: false` within MAX_PAGES calls; and once a replay of
  everything answers `more: false`, no chunk of a batch that was final or ended before it began is still parked
  (its chunks are set aside: poison depth returns to 0). (STARVED)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shared import api
from shared.ops.replay import MAX_REPLAY_S
from sim.doors import malformed, replay_rings, replay_time, second_parks
from sim.doors.callers import as_caller, batch_of, on_instance
from sim.scenario import ReplayCall

World = Any  # `sim.world.World` (it imports the modules that import this one)

WIDER = "a replay wider than asked"
STARVED = "a replay starved by what it cannot replay"
MAX_PAGES = 100  # calls of one replay of everything while it answers `more: true`
PAGE_GAP_S = 1.0  # a caller calls again this long after a `more: true`
NAMING_NOTHING = {
    "empty": b"",
    "blank": b" \n",
    "{}": b"{}",
    "batch_id-null": b'{"batch_id": null}',
    "message_ids-null": b'{"message_ids": null}',
    "all-null": b'{"all": null}',
    "limit-only": b'{"limit": 2}',
    "all-false": b'{"all": false}',
    "background-false": b'{"background": false}',
}


def start(world: World) -> None:
    if world.scenario.replay_calls:
        world.spawn(session(world, world.scenario.replay_calls), "replays")
    malformed.start(world)  # the malformed requests among them
    second_parks.start(world)  # a parked chunk's second copy, in some seeds


async def session(world: World, calls: list[ReplayCall]) -> None:
    for call in calls:
        await asyncio.sleep(max(0.0, call.at_s - world.now_s()))
        if call.what == "all":
            await everything(world, call)
        elif call.what == "all-job":
            await replay_time.job(world, parked)
        else:
            await once(world, call, request(world, call))
    await second_parks.once_stale(world, everything)


def request(world: World, call: ReplayCall) -> bytes | None:
    """The body `call` sends (None: its batch was never accepted, so there is nothing to name)."""
    if call.what in NAMING_NOTHING:
        return NAMING_NOTHING[call.what]
    doc: dict[str, Any] = {"all": True} if call.what == "all" else {"batch_id": batch_of(world, call.label)}
    if doc.get("batch_id", True) is None:
        return None
    doc |= {"limit": call.limit} if call.limit is not None else {}
    return json.dumps(doc | ({"rate": call.rate} if call.rate is not None else {})).encode()


async def once(world: World, call: ReplayCall, body: bytes | None) -> dict[str, Any] | None:
    """One POST /api/poison/replay; its answer's body when it answered 200 (with `took_s`, how long it took).
    Checks what it took."""
    if body is None:
        return None
    headers = as_caller(world, None if call.who == "operator" else call.who)
    before = parked(world)
    began = world.now_s()
    got = await on_instance(world, "POST /api/poison/replay", lambda: api.poison_replay(body, headers),
                            wait_s=replay_time.REPLAY_WAIT_S)  # fmt: skip
    replay_time.check(world, body, began, got is not None)
    if got is None:
        return None
    status, answer = got[1].status, dict(got[1].body)
    took = {m: b for m, b in before.items() if m not in parked(world)}
    world.note(f"replay {body.decode()[:80]!r} by {call.who}: {status} {answer}"[:300])
    if call.what in NAMING_NOTHING:
        if status == 400:
            world.features.add("replay-unnamed")
        elif status == 200:
            world.violate(f"a replay of {body!r} by {call.who}, which names nothing, answered 200 ({WIDER})")
    asked = None if call.what == "all" else batch_of(world, call.label)
    mine = None if call.who == "operator" else call.who
    wide = sorted({str(b)[:8] for b in took.values() if not allowed(world, b, asked, mine, call.what)})
    if wide:
        world.violate(f"a replay of {body!r} by {call.who} took parked chunks of batch(es) {wide} ({WIDER})")
    if status != 200:
        return None
    world.features.add("replay")
    replay_rings.watch(world, began, answer)
    if answer.get("replayed"):
        world.features.add("replayed")
    if (answer.get("replayed") or answer.get("set_aside")) and replay_time.slowed(world, began):
        world.features.add("slow-replay")  # it took parked chunks while the poison index answered late
    if answer.get("set_aside", 0) + len(answer.get("skipped", [])) + answer.get("replayed", 0) > answer["limit"]:
        world.features.add("replay-past-limit")  # it met more parked chunks than its limit (issue 36 item 5)
    return answer | {"took_s": world.now_s() - began}


def allowed(world: World, batch_id: str | None, asked: str | None, tenant: str | None, what: str) -> bool:
    if what in NAMING_NOTHING or batch_id is None:
        return False
    sub = world.labels.get(batch_id)
    if tenant is not None and (sub is None or sub.tenant != tenant):
        return False
    return what == "all" or batch_id == asked


async def everything(world: World, call: ReplayCall) -> None:
    """The operator's replay of everything, called again while it answers `more: true` (a tenant's is a 403)."""
    body = request(world, call)
    closed = {m: b for m, b in parked(world).items() if b is not None and ended_or_final(world, b)}
    stale = second_parks.stale(world)
    starved = False
    for _ in range(MAX_PAGES):
        answer = await once(world, call, body)
        if answer is None:
            return
        nothing = not answer.get("replayed") and not answer.get("set_aside")
        if answer.get("more") and nothing and answer["took_s"] < MAX_REPLAY_S and not starved:
            starved = True  # said once: the caller goes on calling, as one would
            world.violate(
                f"a replay of {body!r} answered more: true having replayed and set aside nothing in "
                f"{answer['took_s']:.0f} s, {len(answer.get('skipped', []))} left parked ({STARVED})"
            )
        if not answer.get("more"):
            left = sorted({str(b)[:8] for m, b in parked(world).items() if m in closed})
            if left:
                world.violate(
                    f"a replay of everything answered more: false, yet parked chunks of batch(es) {left}, final or "
                    f"ended before it began, are still parked ({STARVED})"
                )
            if body is not None:
                second_parks.left(world, body, stale)
            return
        await asyncio.sleep(PAGE_GAP_S)
    world.violate(f"a replay of everything answered more: true {MAX_PAGES} times in a row ({STARVED})")


def ended_or_final(world: World, batch_id: str) -> bool:
    manifest = world.manifest(batch_id) or {}
    return bool(manifest.get("ended") or manifest.get("final_status"))


def parked(world: World) -> dict[str, str | None]:
    """Message id -> batch id of every parked chunk in the poison index (read from the account: no request)."""
    return {m: doc.get("batch_id") for m, doc in second_parks.index_blobs(world).items()}
