"""A parked chunk's second copy, and what a replay of everything owes it (issue 26 item 15): **poison depth returns
to 0 once every parked chunk is replayed or discarded**, so a replay of everything that answers `more: false`
leaves parked no copy that was already stale when it began (its items carried by a record of its own lineage:
another copy of the chunk was replayed and handled), unless its batch was ended or final by then (set aside).

A second copy is what a drainer that dies between its poison send and its work delete leaves (the chunk is
redelivered past MAX_DEQUEUE_COUNT and parked again): the world makes one in some `replay` seeds (`aim`, drawn
apart), just before the first replay, of a parked chunk of a batch still processing (`sim.families.slow_replay`'s
hanging handler call), and, once the family's replays are over, the operator replays everything once more as soon
as that copy is stale. (STALE)
"""

from __future__ import annotations

import asyncio
import json
import random
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from shared.batch import envelope, poison
from shared.core import layout
from shared.core.errors import MalformedEnvelope
from shared.ops.replay_marks import carrier
from shared.store import poison_index
from shared.store.storage import NEVER_EXPIRES
from sim.checks.promises import records_of
from sim.scenario import ReplayCall, Scenario

World = Any  # `sim.world.World` (it imports the modules that import this one)

STALE = "a stale parked copy left parked"
STALE_LOOK_S = 5.0  # the operator looks at the parked listing this often for the copy


def aim(scenario: Scenario) -> None:
    """In half the seeds it is called for: a second copy 2 s before the first replay."""
    rng = random.Random(f"{scenario.seed}-second-park")
    if not scenario.replay_calls or rng.random() < 0.5:
        return
    scenario.second_park = round(min(r.at_s for r in scenario.replay_calls) - 2.0, 3)


COPIES: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()  # world: (copy, batch)


def start(world: World) -> None:
    if world.scenario.second_park is not None:
        world.spawn(park_again(world, world.scenario.second_park), "second park")


async def park_again(world: World, at_s: float) -> None:
    """The oldest parked chunk of a batch neither ended nor final is parked a second time, as its drainer's
    redelivery would: sent to its poison queue again and indexed."""
    await asyncio.sleep(at_s)
    live = [i for i in world.live() if i.services is not None]
    entries = [e for e in entries_of(world).values() if e.batch_id and open_batch(world, e.batch_id)]
    if not live or not entries:
        return
    entry = min(entries, key=lambda e: (e.inserted_on or "", e.message_id))
    services = live[0].services
    try:
        sent = await services.storage.queue(entry.poison_queue).send_message(entry.text, time_to_live=NEVER_EXPIRES)
        state = services.storage.container(services.settings.state_container)
        inserted = sent.inserted_on.isoformat() if sent.inserted_on else None
        copy = poison_index.Entry(entry.poison_queue, str(sent.id), str(sent.pop_receipt), inserted, entry.batch_id,
                                  entry.text)  # fmt: skip
        await poison_index.add(state, copy)
    except Exception as e:  # its instance died meanwhile: no second copy
        world.note(f"second park of a chunk of batch {str(entry.batch_id)[:8]} failed: {type(e).__name__}")
        return
    world.note(f"chunk of batch {str(entry.batch_id)[:8]} parked a second time: {sent.id}")
    world.features.add("second-park")
    COPIES[world] = str(sent.id), str(entry.batch_id)


async def once_stale(world: World, everything: Callable[[World, ReplayCall], Awaitable[None]]) -> None:
    """After the family's replays (one at a time, so after them): once the second copy is stale (its other copy
    replayed and handled) while its batch is still open, the operator replays everything (`everything`) once
    more."""
    copy, batch_id = COPIES.get(world, ("", ""))
    while copy and open_batch(world, batch_id) and copy in entries_of(world):
        if copy in stale(world):
            world.note(f"the second copy {copy} is stale: the operator replays everything")
            await everything(world, ReplayCall(world.now_s(), "operator", "all"))
            return
        await asyncio.sleep(STALE_LOOK_S)


def index_blobs(world: World) -> dict[str, dict[str, Any]]:
    """Message id -> poison index entry (as stored) of every parked chunk (read from the account: no request)."""
    state = world.account.containers.get(world.settings.state_container, {})
    out: dict[str, dict[str, Any]] = {}
    for partition in world.settings.partition_queues():
        prefix = layout.poison_index_prefix(world.settings.poison_queue(partition))
        for name, blob in state.items():
            if name.startswith(prefix):
                out[name.removeprefix(prefix).removesuffix(".json")] = json.loads(blob.data)
    return out


def entries_of(world: World) -> dict[str, poison_index.Entry]:
    """Message id -> index entry of every parked chunk."""
    return {m: poison_index.Entry.from_json(doc) for m, doc in index_blobs(world).items()}


def open_batch(world: World, batch_id: str) -> bool:
    manifest = world.manifest(batch_id) or {}
    return not (manifest.get("ended") or manifest.get("final_status"))


def stale(world: World) -> dict[str, str]:
    """Message id -> batch id of each parked copy whose items a record of its own lineage carries, of a batch
    neither ended nor final."""
    out: dict[str, str] = {}
    for message_id, entry in entries_of(world).items():
        if not entry.batch_id or not open_batch(world, entry.batch_id):
            continue
        try:
            text = poison.decode(entry.text).chunk_text
            header = envelope.decode(text).header if text is not None else None
        except (MalformedEnvelope, ValueError):
            continue
        if header is None or not header.positions:
            continue
        lineages = {(r.get("chunk"), r.get("gen"), r.get("first")) for r in records_of(world, entry.batch_id)}
        if carrier(header) in lineages:
            out[message_id] = entry.batch_id
    return out


def left(world: World, body: bytes, before: dict[str, str]) -> None:
    """After a replay of everything answered `more: false`: the copies stale when it began are gone."""
    if before:
        world.features.add("stale-copy")  # the promise had a stale copy to keep
    still = sorted({before[m][:8] for m in entries_of(world) if m in before and open_batch(world, before[m])})
    if still:
        world.violate(
            f"a replay of {body!r} answered more: false, yet stale parked copies of batch(es) {still}, whose items a "
            f"later attempt had settled before it began, are still parked ({STALE})"
        )
