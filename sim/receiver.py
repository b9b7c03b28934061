"""The receiver of completion notices in the simulated world, and the seam the app's notice POST goes through.

`shared.ops.notices.deliver` POSTs with an `aiohttp.ClientSession`; for one run (`routed_notices`) that module's
`aiohttp` is a stand-in whose session hands the request to `Receiver.take` on the virtual clock, with the
session's own total timeout applied, and answers with the receiver's status and body. Everything else of the
notice (the claim, the next attempt's event, the back-off, the outcome written back) runs as in production.

The receiver verifies each notice's signature with the Standard Webhooks library (`standardwebhooks`, not the
app's own signing code) under its tenant's key as the client derives it (`queue_drain_client.notices`); a
notice that fails is a violation. It records every notice it processed in `Receiver.received` (`Received`). Its
behaviour over time comes from the scenario's `receiver` spans: `down` (the connection is refused), `slow`
(it answers after longer than CALLBACK_TIMEOUT_S), `failing` (503), `duplicating` (it processes the notice,
then the connection drops before the answer: the app sends it again).
"""

from __future__ import annotations

import asyncio
import hmac
import json
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

from shared.ops import notices

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

SECRET = "whsec_" + "c2ltdWxhdGVkLXJlY2VpdmVyLXNlY3JldC0zMmJ5dGVz"  # base64 of 32 bytes, for the run's settings
TOLERANCE_S = 300  # Standard Webhooks' window for a notice's timestamp
SLOW_EXTRA_S = 5.0  # a slow receiver answers this long after the caller's timeout
AIOHTTP = "aiohttp"  # the notices module's HTTP client, replaced by name (mypy holds module attributes fixed)


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


class Receiver:
    def __init__(self, world: World) -> None:
        self.world = world
        self.received: list[Received] = []
        self.attempts = 0

    def key_of(self, url: str) -> str:
        """The receiver's key: its tenant's, as the client derives it from the master (`notice_key`); the URL
        names the submit (`sim.callers.submit_request`)."""
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
            raise aiohttp.ClientConnectionError("simulated: connection refused")
        if mode == "slow":
            await asyncio.sleep(timeout_s + SLOW_EXTRA_S)  # the caller's timeout ends it first
        if mode == "failing":
            return 503, b"receiver is failing (simulated)"
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
        status, body = await asyncio.wait_for(self.receiver.take(url, data, headers, timeout_s), timeout_s)
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
