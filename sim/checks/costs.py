"""What each caller's operation costs in storage, and a world whose storage holds history.

Attribution (`sim.storage.charges`): `sim.doors.callers.on_instance` charges an API call's storage requests to it, and
`looks_charged` each listing of the ended markers a drainer makes to that look.

History at scale (`start`): a scenario may name a blob listing's page (`Scenario.list_page`, for the 5,000 of
Azure: 20 make 1,100 markers cost what 275,000 cost) and `Scenario.history` ended markers already in storage,
as a week of cancels leaves them (one every `7 days / history`, the oldest past `shared.store.ended.KEEP_S`), so
that a cost which grows with history shows at the scale of a run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from shared.store import ended
from sim.clock import EPOCH_S
from sim.host import INSTANCE
from sim.storage.account import LIST_MAX, Blob
from sim.storage.charges import CALLER, Spent, charged

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any
LISTED = "listed"  # `shared.store.ended.listed`, patched by name: mypy holds module attributes as fixed


def pages(entries: int, page: int) -> int:
    """Listing requests for `entries` at `page` a request (an empty listing is one request)."""
    return max(1, math.ceil(entries / page))


# ---- the world's storage at scale ----------------------------------------------------------------------------
def start(world: World) -> None:
    """Before anything runs: the listing page the scenario names, and its history of ended markers."""
    scenario = world.scenario
    if scenario.list_page:
        world.server.list_max = scenario.list_page
    world.marker_history = {}  # bucket prefix -> markers written there before the run
    if not scenario.history:
        return
    rng = random.Random(f"history-{scenario.seed}")
    state = world.account.containers.setdefault(world.settings.state_container, {})
    every = (ended.KEEP_S + 6 * ended.BUCKET_S) / scenario.history
    for n in range(1, scenario.history + 1):
        at = EPOCH_S - n * every
        name = ended.marker(f"{rng.getrandbits(128):032x}", datetime.fromtimestamp(at, timezone.utc))
        state[name] = Blob(b"", world.server._new_etag(), at, at, {}, None, None)
        prefix = name.rpartition("/")[0] + "/"
        world.marker_history[prefix] = world.marker_history.get(prefix, 0) + 1


def page_size(world: World) -> int:
    return int(world.scenario.list_page or LIST_MAX)


def markers(world: World, prefix: str) -> int:
    """Ended markers in storage now whose names start with `prefix`."""
    state = world.account.containers.get(world.settings.state_container, {})
    return sum(1 for name in state if name.startswith(prefix))


@dataclass
class Look:
    """One listing of the ended markers by a process: when it began (virtual s), and what it cost."""

    instance: str
    began_s: float
    spent: Spent
    after_s: float | None  # when the process's previous answered listing began (None: it is the first)


@contextmanager
def looks_charged(world: World, checked: Any) -> Iterator[None]:
    """For one run: each listing of the ended markers (`shared.store.ended.listed`, a drainer's look) is an
    operation of its own; `checked(world, look)` judges it once it answered."""
    real = ended.listed
    last: dict[tuple[str, int], float] = {}  # (instance, incarnation) -> its previous answered listing's start

    async def charged_listing(state: Any, since: datetime | None = None, now: datetime | None = None) -> Any:
        instance = INSTANCE.get()
        if instance is None or CALLER.get() is not None:
            return await real(state, since=since, now=now)
        key = (instance.name, instance.incarnation)
        look = Look(instance.name, world.now_s(), Spent(f"look at the ended batches by {instance.name}"), last.get(key))
        with charged(look.spent):
            found = await real(state, since=since, now=now)
        last[key] = max(look.began_s, last.get(key, look.began_s))  # two sessions' looks: the later start counts
        checked(world, look)
        return found

    setattr(ended, LISTED, charged_listing)
    try:
        yield
    finally:
        setattr(ended, LISTED, real)
