"""Malformed requests, through the HTTP functions' own parsing, and what docs/api.md promises of them: **a malformed
request gets a 4xx with a JSON body naming the problem, and writes nothing** (no storage write is made while it runs).

The `replay` family's seeds send some of them (drawn apart, `draw`): an integer query parameter or option of
thousands of digits (Python refuses `int()` of more than 4,300 digits: a ValueError, not a 400; issue 26 item 3),
a replay naming a batch or message id that is no id (`"../../x"`, once stored in a job: item 4), and a replay
whose `"background"` is null (once read as "in the foreground": item 2). (MALFORMED)
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

from shared import api
from shared.api import ApiResponse
from sim.doors.callers import as_caller, on_instance
from sim.storage.charges import Spent

World = Any  # `sim.world.World` (it imports the modules that import this one)

MALFORMED = "a malformed request not refused"
DIGITS = "1" + "0" * 4300  # 4,301 digits
WRITES = frozenset(
    {"PutBlob", "PutMessage", "DeleteBlob", "DeleteMessage", "SetBlobMetadata", "UpdateMessage", "ClearMessages",
     "DeleteQueue", "SetQueueMetadata", "CreateContainer", "CreateQueue"}
)  # fmt: skip
REPLAY = {  # request name: its body, and the field its 400 names
    "replay-batch-path": (b'{"batch_id": "../../x"}', "batch_id"),
    "replay-batch-path-job": (b'{"batch_id": "../../x", "background": true}', "batch_id"),
    "replay-message-path": (b'{"message_ids": ["../../x"]}', "message_ids"),
    "replay-background-null": (b'{"all": true, "background": null}', "background"),
}
QUERY = ("list-limit", "poison-limit", "results-limit", "expires-digits")
REQUESTS = (*QUERY, *REPLAY)


def draw(seed: int) -> list[tuple[float, str]]:
    """(when, which request): from an rng of its own, so the family's other draws stay as they were."""
    rng = random.Random(f"{seed}-malformed")
    return sorted((round(rng.uniform(20.0, 250.0), 3), rng.choice(REQUESTS)) for _ in range(rng.randint(2, 5)))


def start(world: World) -> None:
    for at_s, name in world.scenario.malformed:
        world.spawn(send(world, at_s, name), f"malformed {name}")


def request(world: World, name: str) -> tuple[Callable[[], Awaitable[ApiResponse]], str] | None:
    """The call `name` makes (as the operator, who may make every one but a submit) and the field its 400 must
    name; None when it needs an accepted batch and there is none yet."""
    operator = as_caller(world, None)
    if name in REPLAY:
        body, field = REPLAY[name]
        return (lambda: api.poison_replay(body, operator)), field
    if name == "list-limit":
        return (lambda: api.batch_list({"limit": DIGITS}, operator)), "limit"
    if name == "poison-limit":
        return (lambda: api.poison_list({"limit": DIGITS}, operator)), "limit"
    if name == "expires-digits":  # a tenant's submit (the operator submits nothing)
        tenant = world.scenario.submits[0].tenant if world.scenario.submits else ""
        headers = {"content-type": "application/json", "x-expires-in-s": DIGITS} | as_caller(world, tenant or None)
        return (lambda: api.submit_batch(b'[{"n": 0}]', headers, {})), "expires_in_s"
    accepted = sorted(b for b, answers in world.answers.items() if 202 in answers)
    if not accepted:
        return None
    batch_id = accepted[0]
    return (lambda: api.batch_results(batch_id, {"limit": DIGITS}, operator)), "limit"


async def send(world: World, at_s: float, name: str) -> None:
    await asyncio.sleep(at_s)
    made = request(world, name)
    if made is None:
        return
    call, field = made
    spent = Spent(f"malformed {name}")
    got = await on_instance(world, f"malformed {name}", call, spent=spent)
    if got is None:
        return
    status, body = got[1].status, dict(got[1].body)
    world.note(f"malformed {name}: {status} {json.dumps(body)[:200]}")
    message = str((body.get("error") or {}).get("message", "")) if isinstance(body.get("error"), dict) else ""
    if not 400 <= status < 500 or field not in message:
        world.violate(f"malformed request {name} answered {status} {json.dumps(body)[:160]}, not a 4xx naming "
                      f"{field!r} ({MALFORMED})")  # fmt: skip
    writes = sorted({r.operation for r in spent.requests if r.operation in WRITES})
    if writes:
        world.violate(f"malformed request {name} wrote to storage: {writes} ({MALFORMED})")
    world.features.add("malformed")
