"""The receiver of completion notices in the simulated world, and the seam the app's notice POST goes through.

`shared.ops.notices.deliver` POSTs with an `aiohttp.ClientSession`; for one run (`routed_notices`) that module's
`aiohttp` is a stand-in whose session hands the request to `Receiver.take` on the virtual clock, with the
session's own total timeout applied, and answers with the receiver's status and body. Everything else of the
notice (the claim, the next attempt's event, the back-off, the outcome written back) runs as in production.

The receiver verifies each notice's signature with the Standard Webhooks library (`standardwebhooks`, not the
app's own signing code) under its tenant's key as the client derives it (`queue_drain_client.notices`); a
notice that fails is a violation. It records every notice it processed in `Receiver.received` (`Received`). Its
behaviour over time comes from the scenario's `receiver` spans: `down` (the connection is refused), `slow`
(it answers after longer than CALLBACK_TIMEOUT_S), `failing` (503, with a body of its own words), `duplicating`
(it processes the notice, then the connection drops before the answer: the app sends it again).

Every POST is recorded from the sender's side (`Receiver.posts`: `Post`, when it started and ended, on the world's
clock and the sending instance's), and judged as it starts (issue 36 items 10 and 14): it goes to an origin
(scheme, host, port) CALLBACK_ALLOWED_HOSTS names; no other POST of the same notice is in flight; and none but a
notice's first starts past its deadline. The receiver's words (`MARKER`: its failing answers' body and the error
of a refused connection) never appear in an API answer (`words_kept`, for every answer `sim.doors.callers` gets). A
scenario's notice drill (`sim.doors.notice_drills`) may have the world kill the sending instance during an attempt.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import random
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from queue_drain_client.notices import SHARED_TENANT, notice_key
from standardwebhooks import Webhook

from shared.core.origins import origin, show
from shared.ops import notices
from sim.clock import EPOCH_S, SKEW_S
from sim.host import INSTANCE
from sim.scenario import Crash

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

SECRET = "whsec_" + "c2ltdWxhdGVkLXJlY2VpdmVyLXNlY3JldC0zMmJ5dGVz"  # base64 of 32 bytes, for the run's settings
TOLERANCE_S = 300  # Standard Webhooks' window for a notice's timestamp
SLOW_EXTRA_S = 5.0  # a slow receiver answers this long after the caller's timeout
AIOHTTP = "aiohttp"  # the notices module's HTTP client, replaced by name (mypy holds module attributes fixed)
# The receiver's own words: in the body of its failing answers and in the error of a refused connection. The status
# route shows a failed attempt's class and a fixed reason, never these (issue 36 item 14).
MARKER = "rcv-banner-7d1f"
# Between judging an attempt's deadline and its POST the app writes its claim and publishes the next event: a POST
# may start this long after the deadline by its instance's clock (Service Bus's publish timeout, and two seconds).
DEADLINE_SLACK_S = 2.0


@dataclass(frozen=True)
class Received:
    """One notice the receiver processed (whatever became of its answer)."""

    at_s: float  # virtual time
    batch_id: str
    msg_id: str
    status: str  # the batch status the notice states ("completed", ...)
    data: dict[str, Any]  # the batch's status as the notice gives it
    valid: bool  # the signature verified (Standard Webhooks, the run's secret)
    answered: int | None  # the HTTP status sent back, None if the answer was lost


@dataclass
class Post:
    """One notice POST as its sender made it (whatever the receiver did with it)."""

    batch_id: str
    url: str
    instance: str
    start_s: float  # virtual time
    clock_s: float  # the sending instance's clock (epoch s), as the app judges the notice's deadline
    end_s: float | None = None  # answered, timed out, refused or cut by a kill


class Receiver:
    def __init__(self, world: World) -> None:
        self.world = world
        self.received: list[Received] = []
        self.attempts = 0
        self.posts: list[Post] = []
        self.kills = random.Random(f"{world.seed}-notice-kills")  # apart from the world's rng

    def key_of(self, url: str) -> str:
        """The receiver's key: its tenant's, as the client derives it from the master (`notice_key`); the URL
        names the submit (`sim.doors.callers.submit_request`)."""
        label = urlsplit(url).path.rsplit("/", 1)[-1]
        tenant = next((s.tenant for s in self.world.scenario.submits if s.label == label), "")
        return notice_key(SECRET, tenant or SHARED_TENANT)

    def mode(self) -> str:
        now = self.world.now_s()
        for span in self.world.scenario.receiver:
            if span.start_s <= now < span.end_s:
                return str(span.kind)
        return "ok"

    async def take(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
        """One POST: (status, body) or raises as aiohttp's session would."""
        self.attempts += 1
        world = self.world
        await asyncio.sleep(world.rng.uniform(0.005, 0.05))
        mode = self.mode()
        if mode == "down":
            raise aiohttp.ClientConnectionError(f"simulated: connection refused ({MARKER})")
        if mode == "slow":
            await asyncio.sleep(timeout_s + SLOW_EXTRA_S)  # the caller's timeout ends it first
        if mode == "failing":
            return 503, f"receiver is failing (simulated): {MARKER}".encode()
        valid = verified(self.key_of(url), body, headers, world.world_time())
        doc = json.loads(body)
        data = doc.get("data", {})
        if not valid:
            world.violate(f"a notice for {str(data.get('batch_id'))[:8]} whose signature does not verify: {headers}")
        answered = None if mode == "duplicating" else 204
        self.received.append(Received(world.now_s(), str(data.get("batch_id")), headers.get("webhook-id", ""),
                                      str(data.get("status")), data, valid, answered))  # fmt: skip
        world.features.add("notice")
        world.note(f"receiver: notice for {str(data.get('batch_id'))[:8]} ({data.get('status')}), valid {valid}"
                   + (", answer lost" if answered is None else ""))  # fmt: skip
        if answered is None:
            raise aiohttp.ServerDisconnectedError("simulated: the connection dropped before the answer")
        return answered, b""

    def begin(self, url: str, body: bytes) -> Post:
        """A POST starts: recorded, and judged (its origin, no other of its notice in flight, its deadline)."""
        world = self.world
        instance = INSTANCE.get()
        batch_id = str(json.loads(body).get("data", {}).get("batch_id"))
        post = Post(batch_id, url, instance.name if instance else "?", world.now_s(), world.world_time() + SKEW_S.get())
        earlier = [p for p in self.posts if p.batch_id == batch_id]
        self.posts.append(post)
        allowed = world.settings.callback_origins()
        parts = urlsplit(url)
        to = origin(parts.scheme, parts.hostname or "", parts.port)
        if to not in allowed:
            world.violate(f"a notice for {batch_id[:8]} POSTed to {show(to)}, an origin not allowed "
                          f"(CALLBACK_ALLOWED_HOSTS: {', '.join(sorted(map(show, allowed)))})")  # fmt: skip
        for other in earlier:
            if other.end_s is None:
                world.violate(f"two notice attempts for {batch_id[:8]} in flight at once: one since "
                              f"{other.start_s:.1f} s on {other.instance}, another from {post.start_s:.1f} s on "
                              f"{post.instance}")  # fmt: skip
        deadline = self.deadline_s(batch_id)
        slack = world.settings.publish_timeout_s + DEADLINE_SLACK_S
        if earlier and deadline is not None and post.clock_s > deadline + slack:
            world.violate(f"a notice attempt for {batch_id[:8]} started {post.clock_s - deadline:.1f} s past its "
                          f"deadline ({deadline - EPOCH_S:.0f} s) by {post.instance}'s clock, after "
                          f"{len(earlier)} earlier attempt(s)")  # fmt: skip
        self.kill_maybe(instance)
        return post

    def deadline_s(self, batch_id: str) -> float | None:
        state = self.world.account.containers.get(self.world.settings.state_container, {})
        blob = state.get(notices.notice_blob(batch_id))
        return None if blob is None else float(json.loads(blob.data)["deadline_s"])

    def kill_maybe(self, instance: Any) -> None:
        """The scenario's notice drill (`sim.doors.notice_drills`) may kill the sending instance during its attempt."""
        world = self.world
        drill = getattr(world.scenario, "drill", None)
        if instance is None or drill is None or not drill.kill_share or self.kills.random() >= drill.kill_share:
            return
        down_s = round(self.kills.uniform(1.0, 20.0), 3)
        at_s = round(world.now_s() + self.kills.uniform(0.0, 0.05), 3)
        world.scenario.crashes.append(Crash(at_s, world.instances.index(instance), down_s))
        world.features.add("notice-killed")
        world.note(f"the notice drill kills {instance.name} during a notice attempt, down {down_s:.1f} s")

        async def kill() -> None:
            await asyncio.sleep(at_s - world.now_s())
            if instance.alive:
                await world.faults.restart(instance, down_s)

        world.spawn(kill(), "kill during a notice attempt")


def words_kept(world: World, name: str, response: Any) -> None:
    """An API answer never carries the notice receiver's words (`MARKER`): the status route shows a failed
    attempt's class and a fixed reason (issue 36 item 14); the batch list and the export name no answer at all."""
    text = response.encoded().decode("utf-8", "replace") + json.dumps(dict(response.headers))
    if MARKER in text:
        at = text.index(MARKER)
        world.violate(f"{name} answered the notice receiver's own words: ...{text[max(0, at - 80) : at + 20]}...")


def verified(key: str, body: bytes, headers: dict[str, str], now_s: float) -> bool:
    """The notice's signature under `key`, checked as a receiver does with the Standard Webhooks library (its
    `sign`, with the timestamp's tolerance against the virtual clock: the library's own check reads the real
    one)."""
    stamp, msg_id = headers.get("webhook-timestamp", ""), headers.get("webhook-id", "")
    if not (stamp.isascii() and stamp.isdigit() and msg_id) or abs(int(stamp) - now_s) > TOLERANCE_S:
        return False
    expected = Webhook(key).sign(msg_id, datetime.fromtimestamp(int(stamp), timezone.utc), body.decode())
    given = headers.get("webhook-signature", "").split(" ")
    return any(hmac.compare_digest(expected, signature) for signature in given)


class _Content:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self, n: int = -1) -> bytes:
        return self.data if n < 0 else self.data[:n]


class _Answer:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.content = status, _Content(data)


class _Post:
    def __init__(self, receiver: Receiver, url: str, data: bytes, headers: dict[str, str], timeout_s: float) -> None:
        self.args = (url, data, headers, timeout_s)
        self.receiver = receiver

    async def __aenter__(self) -> _Answer:
        url, data, headers, timeout_s = self.args
        post = self.receiver.begin(url, data)
        try:
            status, body = await asyncio.wait_for(self.receiver.take(url, data, headers, timeout_s), timeout_s)
        finally:
            post.end_s = self.receiver.world.now_s()
        return _Answer(status, body)

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _Session:
    """The part of `aiohttp.ClientSession` the notice POST uses."""

    receiver: Receiver

    def __init__(self, *, timeout: aiohttp.ClientTimeout, trust_env: bool = False) -> None:
        self.timeout_s = float(timeout.total or 300.0)

    async def __aenter__(self) -> _Session:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def post(self, url: Any, *, data: bytes, headers: dict[str, str], allow_redirects: bool = True) -> _Post:
        return _Post(self.receiver, str(url), data, dict(headers), self.timeout_s)  # a str or a yarl.URL


@contextmanager
def routed_notices(receiver: Receiver) -> Iterator[None]:
    """For one run: the notices module's HTTP client is the simulated one, every POST goes to `receiver`."""
    session = type("SimSession", (_Session,), {"receiver": receiver})
    stand_in = types.SimpleNamespace(ClientSession=session, ClientTimeout=aiohttp.ClientTimeout,
                                     ClientError=aiohttp.ClientError)  # fmt: skip
    saved = getattr(notices, AIOHTTP)
    setattr(notices, AIOHTTP, stand_in)
    try:
        yield
    finally:
        setattr(notices, AIOHTTP, saved)
