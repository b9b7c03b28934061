"""The callers of the HTTP API in the simulated world: clients submitting, polling, exporting, cancelling and
replaying, each request answered by the API's own functions (`shared.api`: request parsing, options, headers,
encodings, the error mapping) on one live instance, as `function_app.py` hands them a request's body, its
lower-cased headers and its query string.

`routed()` makes `shared.api`'s `services()` answer the services of the instance the call runs on (on the host
there is one set per process; here one per simulated instance).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from shared import api, runtime
from shared.api import ApiResponse
from shared.core.identity import OPERATOR_ROLE, PRINCIPAL_HEADER, TENANT_ROLE_PREFIX, TenantFrom
from shared.core.settings import Settings
from shared.ops.status import FINAL
from shared.services import Services
from sim.checks import cost_promises
from sim.host import INSTANCE, Instance
from sim.receiver import words_kept
from sim.scenario import Submit
from sim.storage.charges import Spent, charged

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

log = logging.getLogger(__name__)

CONFLICT = "with no other request of its key in flight"
ANSWER_WAIT_S = 60.0  # a client gives up on a request after this long and may try again
CALLBACK_HOST = "receiver.sim"  # CALLBACK_ALLOWED_HOSTS names it (`sim.families`)
SERVICES, LOAD_SETTINGS = "services", "load_settings"  # patched by name: mypy holds module attributes as fixed


def instance_services() -> Services:
    instance = INSTANCE.get()
    if instance is None or instance.services is None:
        raise RuntimeError("an API call outside a live simulated instance")
    return instance.services


def instance_settings() -> Settings:
    return instance_services().settings


@contextmanager
def routed() -> Iterator[None]:
    """For one run: `shared.api.services()` is the calling instance's, and so are the settings a request reads
    (`shared.runtime.load_settings`: who the caller is, `shared.access`)."""
    saved = getattr(api, SERVICES), getattr(runtime, LOAD_SETTINGS)
    setattr(api, SERVICES, instance_services)
    setattr(runtime, LOAD_SETTINGS, instance_settings)
    try:
        yield
    finally:
        setattr(api, SERVICES, saved[0])
        setattr(runtime, LOAD_SETTINGS, saved[1])


async def on_instance(world: World, name: str, call: Callable[[], Awaitable[ApiResponse]], pick: int = 0,
                      spent: Spent | None = None,
                      wait_s: float = ANSWER_WAIT_S) -> tuple[Instance, ApiResponse] | None:  # fmt: skip
    """One request on a live instance (the `pick`th, wrapping): its answer, or None if none came (no instance
    alive, the instance crashed, or no answer within `wait_s`). Its storage requests go to `spent`."""
    candidates = world.live()
    if not candidates:
        return None
    instance = candidates[pick % len(candidates)]
    done: asyncio.Future[ApiResponse] = world.loop.create_future()

    async def run() -> None:
        try:
            with charged(spent):
                response = await call()
        except BaseException as e:
            if not done.done():
                done.set_exception(asyncio.CancelledError() if isinstance(e, asyncio.CancelledError) else e)
            raise
        if not done.done():
            done.set_result(response)

    task = instance.spawn(run(), name)
    try:
        response = await asyncio.wait_for(asyncio.shield(done), wait_s)
    except (TimeoutError, asyncio.CancelledError):
        done.cancel()  # what the call ends with now is nobody's (not "a Future exception never retrieved")
        task.cancel()
        world.note(f"{name} on {instance.name}: no answer")
        return None
    if response.status == 500:  # an exception the API's error mapping did not expect
        world.violate(f"{name} on {instance.name} answered 500: {dict(response.body)}")
    words_kept(world, name, response)  # never the notice receiver's words (issue 36 item 14)
    return instance, response


def as_caller(world: World, tenant: str | None) -> dict[str, str]:
    """The headers that make a request the tenant's (None: the operator's): with TENANT_FROM=principal, the
    principal App Service Authentication sets (`shared.core.identity`); none for the one trusted caller."""
    if world.settings.tenant_from is not TenantFrom.PRINCIPAL:
        return {}
    role = OPERATOR_ROLE if tenant is None else TENANT_ROLE_PREFIX + tenant
    principal = {"auth_typ": "aad", "claims": [{"typ": "roles", "val": role}], "role_typ": "roles"}
    return {PRINCIPAL_HEADER: base64.b64encode(json.dumps(principal).encode()).decode()}


def owner(world: World, batch_id: str) -> dict[str, str]:
    """The headers of the tenant whose submit made the batch."""
    sub = world.labels.get(batch_id)
    return as_caller(world, sub.tenant if sub is not None and sub.tenant else None)


def submit_request(sub: Submit) -> tuple[bytes, dict[str, str], dict[str, str]]:
    """The body, lower-cased headers and query string a client sends for `sub`: JSON or NDJSON, gzip or not,
    each option as a header or a query parameter."""
    items = [{"b": sub.label, "n": i, "m": m} for i, m in enumerate(sub.modes)]
    headers: dict[str, str] = {}
    params: dict[str, str] = {}
    if sub.ndjson:
        body = "".join(json.dumps(item) + "\n" for item in items).encode()
        headers["content-type"] = "application/x-ndjson"
    else:
        body = sub.body()
        headers["content-type"] = "application/json"
    if sub.gzip:
        body = gzip.compress(body, 6, mtime=0)
        headers["content-encoding"] = "gzip"
    if sub.key is not None:
        headers["idempotency-key"] = sub.key
    options = dict(sub.options)
    if sub.tenant:
        options["tenant"] = sub.tenant
    if sub.priority != "normal":
        options["priority"] = sub.priority
    if sub.callback:
        options["callback_url"] = f"https://{CALLBACK_HOST}/hooks/{sub.label}?t=1"
    for name, value in sorted(options.items()):
        if sub.as_params:
            params[name] = value
        else:
            headers["x-" + name.replace("_", "-")] = value
    return body, headers, params


async def submit(world: World, sub: Submit) -> None:
    """A client's POST /api/batches, tried again (keyed) after no answer or a 5xx, on any live instance."""
    body, headers, params = submit_request(sub)
    headers |= as_caller(world, sub.tenant or None)
    unanswered = 0  # tries that got no answer: each may still be in flight
    for attempt in range(1 + sub.retries):
        if not world.live():
            await asyncio.sleep(5.0)
            continue
        answered = await on_instance(
            world,
            f"POST /api/batches {sub.label}",
            lambda: api.submit_batch(body, headers, params),
            sub.instance + attempt,
        )
        if answered is None:
            unanswered += 1
            await asyncio.sleep(2.0)
            continue
        instance, response = answered
        status = response.status
        if status == 409 and not unanswered:  # docs/api.md: a key reused with other options, or still in flight
            world.violate(f"submit {sub.label} answered 409 {CONFLICT} ({attempt} tries before it, each answered)")
        batch_id = response.body.get("batch_id") or response.body.get("error", {}).get("batch_id")
        world.note(f"submit {sub.label} on {instance.name}: {status} batch {str(batch_id)[:8]}")
        if status == 400:
            world.violate(f"submit {sub.label} refused as malformed: {response.body}")
        if batch_id is not None:
            world.answers.setdefault(batch_id, []).append(status)
            world.labels[batch_id] = sub
        if status == 202 or sub.key is None or status < 500:
            return
        await asyncio.sleep(2.0)


def batch_of(world: World, label: str) -> str | None:
    return next((b for b, sub in world.labels.items() if sub.label == label and 202 in world.answers.get(b, [])), None)


async def poll(world: World, label: str, every_s: float, times: int) -> None:
    """A client polling its batch's status, now and then the batch list, and reading its results page by page
    (`X-Continuation`) once the status says final."""
    for n in range(times):
        await asyncio.sleep(every_s)
        batch_id = batch_of(world, label)
        if batch_id is None:
            continue
        got = await on_instance(
            world, f"GET /api/batches/{batch_id[:8]}", partial(api.batch_status, batch_id, owner(world, batch_id)), n
        )
        if got is None:
            continue
        _, response = got
        world.features.add("status")
        world.answered_final.saw(batch_id, response.status, response.body, "a poll")
        if n % 3 == 2:
            listing = partial(api.batch_list, {"limit": "5"}, owner(world, batch_id))
            await on_instance(world, "GET /api/batches", listing, n)
        if response.status == 200 and response.body.get("status") in FINAL:
            await export(world, batch_id, page=1 + n % 4)
            return


async def export(world: World, batch_id: str, page: int) -> None:
    """GET /api/batches/{id}/results `page` lines at a time, following X-Continuation to the end."""
    await results_pages(world, batch_id, {"limit": str(page)}, 10_000)


async def results_pages(world: World, batch_id: str, params: dict[str, str], pages: int, held: bool = False) -> None:
    """Up to `pages` pages of the batch's results (`params`: the limit and where to start), each from the last
    one's X-Continuation, to the end; `held`: each page held to its stated cost (`params` names a position)."""
    for _ in range(pages):
        spent, began = Spent("results page") if held else None, world.now_s()
        got = await on_instance(world, f"GET /api/batches/{batch_id[:8]}/results",
                                lambda: api.batch_results(batch_id, dict(params), owner(world, batch_id)),
                                spent=spent)  # fmt: skip
        if got is None or got[1].status != 200:
            return
        if spent is not None:
            start, limit = int(params["continuation"]), int(params["limit"])
            cost_promises.page_cost(world, spent, batch_id, start, limit, got[1], began)
        world.features.add("export")
        token = got[1].headers.get("X-Continuation")
        if token is None:
            return
        world.features.add("export-continued")
        params["continuation"] = token


async def read_pages(world: World, at_s: float, label: str, limit: int, start: int, count: int) -> None:
    """A client reading `count` pages of `limit` result lines of its batch from position `start` on (the
    continuation is the next position) once the batch is final, each page held to its stated cost."""
    await asyncio.sleep(at_s)
    for _ in range(600):
        batch_id = batch_of(world, label)
        asked = batch_id and partial(api.batch_status, batch_id, owner(world, batch_id))
        status = asked and await on_instance(world, "GET status", asked)
        if status and batch_id:
            world.answered_final.saw(batch_id, status[1].status, status[1].body, "a page reader's status read")
        if status and status[1].status == 200 and status[1].body.get("status") in FINAL:
            break
        await asyncio.sleep(5.0)
    else:
        return
    assert batch_id is not None
    params = {"limit": str(limit), "continuation": str(min(start, (world.manifest(batch_id) or {}).get("items", 0)))}
    await results_pages(world, batch_id, params, count, held=True)


async def cancel(world: World, at_s: float, label: str, pick: int = 0) -> None:
    """POST /api/batches/{id}/cancel once the batch's submit answered, on the `pick`th live instance; the answer's
    time starts the cancel bound (`sim.checks.invariants.Cancels.answered`)."""
    await asyncio.sleep(at_s)
    batch_id = batch_of(world, label)
    if batch_id is None:
        world.note(f"cancel {label}: no batch id yet")
        return
    spent, began = Spent("cancel"), world.now_s()
    got = await on_instance(world, f"POST /api/batches/{batch_id[:8]}/cancel",
                            lambda: api.cancel_batch(batch_id, owner(world, batch_id)), pick, spent)  # fmt: skip
    if got is not None and got[1].status in (200, 202):
        cost_promises.cancel_cost(world, spent, batch_id, began)
    if got is not None:
        world.answered_final.saw(batch_id, got[1].status, got[1].body, "a cancel's answer")
    if got is None or got[1].status not in (200, 202):
        world.note(f"cancel {label}: {None if got is None else got[1].status}")
        return
    if got[1].body.get("status") in ("cancelling", "cancelled"):  # a batch final before it is not cancelled
        world.cancels.answered.setdefault(batch_id, world.now_s())
    world.features.add("cancel")
    world.note(f"cancel {label} ({batch_id[:8]}) on {got[0].name}: {got[1].body.get('status')}")


async def replay(world: World, at_s: float, background: bool, whole: bool) -> None:
    """POST /api/poison/replay, of one batch's parked chunks or of all of them, synchronous or as a background
    job (followed through GET /api/poison/replay/{job})."""
    await asyncio.sleep(at_s)
    request: dict[str, Any] = {"background": background}
    if whole:
        request["all"] = True  # a replay of everything is named (issue 36 item 15: {} is a 400)
    else:
        ids = [b for b, a in world.answers.items() if 202 in a]
        if not ids:
            return
        request["batch_id"] = ids[int(at_s) % len(ids)]
    body = json.dumps(request).encode()
    got = await on_instance(world, "POST /api/poison/replay", lambda: api.poison_replay(body))
    if got is None:
        return
    _, response = got
    world.note(f"replay ({'background' if background else 'now'}): {response.status} {dict(response.body)}")
    if response.status == 409 and not whole:  # the batch is final or ended: the operator replays everything then
        await replay(world, 0.0, background, whole=True)
        return
    if response.status not in (200, 202):
        return
    world.features.add("replay-job" if background else "replay")
    if response.body.get("replayed"):
        world.features.add("replayed")
    job_id = response.body.get("job_id")
    for _ in range(20 if job_id else 0):
        await asyncio.sleep(5.0)
        state = await on_instance(world, "GET /api/poison/replay/job", lambda: api.replay_status(str(job_id)))
        if state is not None and state[1].body.get("replayed"):
            world.features.add("replayed")
        if state is not None and state[1].body.get("state") not in ("pending", "running"):
            return
