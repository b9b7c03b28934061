"""The notice drill: what the world does to completion notices beyond the lifecycle family's receiver faults (issue 36
items 10 and 14), drawn for some of that family's seeds from a `random.Random` of its own (`aim`), so that every
other draw of a seed stays as it was:

- a short window (CALLBACK_WINDOW_S) with the receiver at fault (slower than the timeout, failing or down) from
  the first notices to past some deadlines or every one, so that notices retry up to their deadline and are given
  up there (or delivered once it answers again);
- sometimes a retry base below the timeout (settings the app accepts: each attempt holds its notice past the POST's
  longest time, whatever the delay), so that a claim held for the delay only would let two attempts overlap;
- kills of the sending instance during attempts (`sim.receiver.Receiver.kill_maybe`), so that an attempt comes back
  (its event redelivered) past its deadline;
- submits naming a callback on the allowed host with another port or scheme (`stray`): refused with a 4xx naming
  `callback_url`, and nothing written by them;
- a client reading the status route, the batch list and an export page of batches with a callback while their
  notices retry (`inspect`): every answer the API gives is held to `sim.receiver.words_kept`.

The receiver judges every POST (its origin, no overlap, its deadline: `sim.receiver.Receiver.begin`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
from dataclasses import dataclass
from functools import partial
from typing import Any

from shared import api
from shared.ops.notices import notice_blob
from sim.doors import callers
from sim.doors.callers import CALLBACK_HOST
from sim.scenario import Scenario, Span

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

SHARE = 0.5  # of the lifecycle family's seeds
WINDOWS_S = (120, 180, 300)  # past the family's storage and Service Bus faults (they end by some 110 s)
KINDS = ("slow", "failing", "failing", "down")
# Another port or scheme of the allowed host (CALLBACK_ALLOWED_HOSTS names https://receiver.sim:443).
STRAYS = (
    f"https://{CALLBACK_HOST}:8443/hooks/{{label}}?t=1",
    f"https://{CALLBACK_HOST}:22/hooks/{{label}}",
    f"https://{CALLBACK_HOST}:10000/devstoreaccount1/{{label}}",
    f"http://{CALLBACK_HOST}/hooks/{{label}}",
    f"http://{CALLBACK_HOST}:443/hooks/{{label}}",
)
READS = ("Get", "List", "Peek")  # storage operations that write nothing
WRITER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_stray_submit", default=None)


@dataclass(frozen=True)
class Drill:
    window_s: int
    retry_base_s: int
    kill_share: float  # chance that an attempt's instance is killed during its POST
    strays: tuple[tuple[float, str], ...]  # (when, callback URL) of submits naming an origin not allowed
    inspect_s: float  # how often the inspecting client reads (0: it does not)
    until_s: float  # the receiver is at fault until then

    def describe(self) -> str:
        strays = ", ".join(f"{url} at {at:.1f} s" for at, url in self.strays) or "none"
        return (f"  notice drill: CALLBACK_WINDOW_S={self.window_s} CALLBACK_RETRY_BASE_S={self.retry_base_s}, "
                f"kills {self.kill_share:.0%} of attempts, status read every {self.inspect_s:.0f} s to "
                f"{self.until_s:.0f} s; submits naming {strays}")  # fmt: skip


def aim(scenario: Scenario) -> None:
    """Draw the drill for a lifecycle seed (none for most): its settings and its receiver span go in the scenario."""
    rng = random.Random(f"{scenario.seed}-notices")
    if not scenario.faults or rng.random() >= SHARE:
        return
    timeout = int(scenario.settings["CALLBACK_TIMEOUT_S"])
    window = rng.choice(WINDOWS_S)
    base = rng.choice([1, max(1, timeout // 2), timeout + 1])
    kind = rng.choice(KINDS)
    until = round(5.0 + window * rng.uniform(0.5, 2.5), 3)  # past some deadlines or every one
    strays = tuple(
        (round(rng.uniform(0.0, 60.0), 3), rng.choice(STRAYS).format(label=f"s{n}")) for n in range(rng.randint(1, 2))
    )
    scenario.drill = Drill(window, base, rng.choice([0.0, 0.3, 0.6, 0.6]), strays, rng.choice([3.0, 7.0]), until)
    scenario.settings |= {"CALLBACK_WINDOW_S": str(window), "CALLBACK_RETRY_BASE_S": str(base)}
    scenario.receiver.append(Span(5.0, until, kind))


def start(world: World) -> None:
    """The drill's clients (its strays and its inspector), and the watch on what strays write."""
    drill: Drill | None = getattr(world.scenario, "drill", None)
    if drill is None:
        return
    world.stray_writes = []
    served = world.storage_weather.served

    def watched(operation: str) -> None:
        who = WRITER.get()
        if who is not None and not operation.startswith(READS):
            world.stray_writes.append((who, operation))
        served(operation)

    world.storage_weather.served = watched
    for n, (at_s, url) in enumerate(drill.strays):
        world.spawn(stray(world, f"s{n}", at_s, url), f"stray submit s{n}")
    if drill.inspect_s:
        world.spawn(inspect(world, drill), "notice inspector")


async def stray(world: World, label: str, at_s: float, url: str) -> None:
    """A submit naming `url` (another port or scheme of the allowed host): a 4xx naming `callback_url`, and nothing
    written while it was answered."""
    await asyncio.sleep(at_s)
    body = json.dumps({"items": [{"b": label, "n": i, "m": "ok"} for i in range(3)]}).encode()
    headers = {"content-type": "application/json", "x-callback-url": url}

    async def call() -> Any:
        WRITER.set(label)
        return await api.submit_batch(body, headers, {})

    got = await callers.on_instance(world, f"POST /api/batches {label}", call)
    if got is None:
        return
    response = got[1]
    error = response.body.get("error", {})
    if not (400 <= response.status < 500 and error.get("field") == "callback_url"):
        world.violate(f"submit {label} naming callback {url} (an origin not allowed) answered {response.status} "
                      f"{dict(response.body)}, not a 4xx naming callback_url")  # fmt: skip
    else:
        world.features.add("callback-refused")
    writes = [op for who, op in world.stray_writes if who == label]
    if writes:
        world.violate(f"submit {label} naming callback {url} (an origin not allowed) wrote {writes[:5]}")


async def inspect(world: World, drill: Drill) -> None:
    """A client reading, while the receiver is at fault, the status route of each batch whose notice is still to be
    delivered, and now and then the batch list and an export page (`sim.doors.callers.on_instance` holds each answer to
    `sim.receiver.words_kept`)."""
    n = 0
    while world.now_s() < drill.until_s + 60.0:
        await asyncio.sleep(drill.inspect_s)
        n += 1
        state = world.account.containers.get(world.settings.state_container, {})
        for batch_id in sorted(world.labels):
            notice = state.get(notice_blob(batch_id))
            if notice is None or b'"pending"' not in notice.data:
                continue
            await callers.on_instance(world, f"GET /api/batches/{batch_id[:8]}", partial(api.batch_status, batch_id), n)
            if n % 4 == 0:
                await callers.on_instance(world, f"GET /api/batches/{batch_id[:8]}/results",
                                          partial(api.batch_results, batch_id, {"limit": "5"}), n)  # fmt: skip
        if n % 4 == 2:
            await callers.on_instance(world, "GET /api/batches", partial(api.batch_list, {"limit": "10"}), n)
