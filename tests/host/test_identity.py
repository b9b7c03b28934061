"""Callers are tenants, on the whole local stack: the real app in the local host with `TENANT_FROM=principal`, the
host playing App Service Authentication, tokens made by `python -m devstack token`, the real broker and Azurite.

The matrix: every route, asked by the batch's own tenant, by another tenant, by the operator and by nobody, and
the hostile cases (a forged `X-MS-CLIENT-PRINCIPAL`, with and without another tenant's token, an expired token).
Another tenant's batch answers exactly what an unknown id answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from queue_drain_client.notices import InvalidNotice, notice_key, verify

from devstack.host import ROOT
from devstack.procs import free_port
from shared.batch.batches import new_batch_id
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost, wait_until
from tests.host.test_function_app import app_settings
from tests.receiver import new_secret, receiving

pytestmark = pytest.mark.slow

UNKNOWN = "0" * 32
MASTER, PREVIOUS = new_secret(), new_secret()
RECEIVER_PORT = free_port()  # the notices' receiver: the one origin allowed
SCHEDULED = "86400"  # a day ahead: nothing of these batches runs during the test (a cancel still has work)


def devstack_token(tenant: str, *options: str) -> str:
    """A bearer token as a developer gets one: `python -m devstack token TENANT [--role operator]`."""
    done = subprocess.run(
        [sys.executable, "-m", "devstack", "token", tenant, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def devstack_notice_key(tenant: str, master: str) -> str:
    """`python -m devstack notice-key TENANT`, as the operator runs it with the app's CALLBACK_SECRET."""
    done = subprocess.run(
        [sys.executable, "-m", "devstack", "notice-key", tenant],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"CALLBACK_SECRET": master, "PYTHONPATH": str(ROOT)},
    )
    return done.stdout.strip()


def forged_principal(tenant: str, *roles: str) -> str:
    claims = [{"typ": "roles", "val": f"tenant.{tenant}"}, *({"typ": "roles", "val": r} for r in roles)]
    doc = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def identity_stack(
    tmp_path: Path, azurite: Azurite, servicebus: ServiceBus, names: Names, **settings: str
) -> Iterator[RunningHost]:
    """The real app in the local host with TENANT_FROM=principal and `settings`, stopped after the test."""
    env = app_settings(azurite, servicebus, names, "identity") | {"TENANT_FROM": "principal", **settings}
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env)
    finally:
        launcher.stop_all()


@pytest.fixture
def identity_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    yield from identity_stack(
        tmp_path,
        azurite_service,
        servicebus_service,
        names,
        CALLBACK_ALLOWED_HOSTS=f"http://127.0.0.1:{RECEIVER_PORT}",
        CALLBACK_ALLOW_HTTP_LOOPBACK="true",
        CALLBACK_SECRET=MASTER,
        CALLBACK_SECRET_PREVIOUS=PREVIOUS,  # a rotation is under way
    )


class Callers:
    """The headers of each kind of caller."""

    def __init__(self) -> None:
        self.alpha = {"Authorization": f"Bearer {devstack_token('alpha')}"}
        self.beta = {"Authorization": f"Bearer {devstack_token('beta')}"}
        self.operator = {"Authorization": f"Bearer {devstack_token('ops', '--role', 'operator')}"}
        self.expired = {"Authorization": f"Bearer {devstack_token('alpha', '--expires-in-s', '-10')}"}
        self.none: dict[str, str] = {}
        # No token, the platform's header written by hand (it claims alpha's tenant and the operator role).
        self.forged = {"X-MS-CLIENT-PRINCIPAL": forged_principal("alpha", "operator")}
        # beta's own token, and a forged principal of alpha in a header of another case beside it.
        self.beta_forging = self.beta | {"x-ms-client-principal": forged_principal("alpha", "operator")}
        self.refused = (self.none, self.forged, self.expired)


async def call(
    session: aiohttp.ClientSession, method: str, path: str, headers: dict[str, str], **kwargs: Any
) -> tuple[int, bytes]:
    async with session.request(method, path, headers=headers, **kwargs) as response:
        return response.status, await response.read()


async def submit(session: aiohttp.ClientSession, headers: dict[str, str], tag: str) -> str:
    body = "\n".join(json.dumps({"t": tag, "i": i}) for i in range(3)).encode()
    params = {"not_before": SCHEDULED}
    status, raw = await call(
        session, "POST", "/api/batches", headers | {"Content-Type": "application/x-ndjson"}, data=body, params=params
    )
    assert status == 202, raw
    accepted = json.loads(raw)
    assert accepted["tenant"] == tag, accepted
    return str(accepted["batch_id"])


def error_code(raw: bytes) -> str:
    return str(json.loads(raw)["error"]["code"])


async def test_every_route_serves_its_own_tenant_only_and_answers_another_tenants_batch_as_unknown(
    identity_host: RunningHost,
) -> None:
    who = Callers()
    async with aiohttp.ClientSession(base_url=identity_host.base_url) as session:
        alpha_batch = await submit(session, who.alpha, "alpha")
        beta_batch = await submit(session, who.beta, "beta")

        # Status and results: own 200, other tenant's = unknown id (same status, same body), operator 200.
        for suffix in ("", "/results"):
            own = await call(session, "GET", f"/api/batches/{alpha_batch}{suffix}", who.alpha)
            assert own[0] == 200, own
            other = await call(session, "GET", f"/api/batches/{alpha_batch}{suffix}", who.beta)
            unknown = await call(session, "GET", f"/api/batches/{alpha_batch[:-1]}f{suffix}", who.beta)
            assert other[0] == unknown[0] == 404
            assert other[1].replace(alpha_batch.encode(), b"X") == unknown[1].replace(
                (alpha_batch[:-1] + "f").encode(), b"X"
            )
            # beta's token with alpha's principal forged beside it: still beta.
            assert (await call(session, "GET", f"/api/batches/{alpha_batch}{suffix}", who.beta_forging))[0] == 404
            assert (await call(session, "GET", f"/api/batches/{alpha_batch}{suffix}", who.operator))[0] == 200
            for refused in who.refused:
                status, raw = await call(session, "GET", f"/api/batches/{alpha_batch}{suffix}", refused)
                assert status == 401, (refused, raw)
                assert error_code(raw) == "unauthenticated"

        # The list: each tenant its own batches, the operator every tenant's.
        async def listed(headers: dict[str, str]) -> set[str]:
            status, raw = await call(session, "GET", "/api/batches", headers)
            assert status == 200, raw
            return {b["batch_id"] for b in json.loads(raw)["batches"]}

        assert await listed(who.alpha) == {alpha_batch}
        assert await listed(who.beta) == {beta_batch}
        assert await listed(who.beta_forging) == {beta_batch}
        assert await listed(who.operator) >= {alpha_batch, beta_batch}
        for refused in who.refused:
            assert (await call(session, "GET", "/api/batches", refused))[0] == 401

        # A submit names its own tenant or none; another tenant's is refused (the operator may name any).
        status, raw = await call(session, "POST", "/api/batches", who.beta | {"X-Tenant": "alpha"}, data=b'{"a":1}\n')
        assert status == 403, raw
        operator_as = who.operator | {"X-Tenant": "gamma", "Content-Type": "application/x-ndjson"}
        status, raw = await call(session, "POST", "/api/batches", operator_as, data=b'{"a":1}\n')
        assert status == 202, raw
        assert json.loads(raw)["tenant"] == "gamma", raw
        for refused in who.refused:
            assert (await call(session, "POST", "/api/batches", refused, data=b'{"a":1}\n'))[0] == 401

        # Replay: a tenant replays its own batch by id; another's is unknown; anything wider is the operator's.
        replay_own = await call(session, "POST", "/api/poison/replay", who.alpha, json={"batch_id": alpha_batch})
        assert replay_own[0] == 200, replay_own
        replay_other = await call(session, "POST", "/api/poison/replay", who.beta, json={"batch_id": alpha_batch})
        replay_unknown = await call(session, "POST", "/api/poison/replay", who.beta, json={"batch_id": UNKNOWN})
        assert replay_other[0] == replay_unknown[0] == 404
        assert replay_other[1].replace(alpha_batch.encode(), b"X") == replay_unknown[1].replace(UNKNOWN.encode(), b"X")
        for wide in ({"all": True}, {"message_ids": ["abc"]}, {"batch_id": beta_batch, "background": True}):
            status, raw = await call(session, "POST", "/api/poison/replay", who.beta_forging, json=wide)
            assert status == 403, (wide, raw)
        assert (await call(session, "POST", "/api/poison/replay", who.operator, json={"batch_id": UNKNOWN}))[0] == 200
        for refused in who.refused:
            assert (await call(session, "POST", "/api/poison/replay", refused, json={"all": True}))[0] == 401

        # Views across tenants: the operator's only.
        for path in (
            "/api/queues",
            "/api/poison",
            f"/api/poison/{UNKNOWN}",
            f"/api/poison/replay/{UNKNOWN}",
            "/api/dashboard",
        ):
            for tenant_caller in (who.alpha, who.beta_forging):
                status, raw = await call(session, "GET", path, tenant_caller)
                assert status == 403, (path, raw)
                assert error_code(raw) == "forbidden"
            status, raw = await call(session, "GET", path, who.operator)
            assert status == (404 if UNKNOWN in path else 200), (path, raw)
            for refused in who.refused:
                assert (await call(session, "GET", path, refused))[0] == 401, path
        status, raw = await call(session, "GET", "/api/queues", who.operator)
        assert {"alpha", "beta"} <= {t["tenant"] for t in json.loads(raw)["tenants"]}

        # Cancel last: another tenant's is unknown and changes nothing; the owner's and the operator's work.
        for refused in (*who.refused, who.beta, who.beta_forging):
            assert (await call(session, "POST", f"/api/batches/{alpha_batch}/cancel", refused))[0] in (401, 404)
        status, raw = await call(session, "GET", f"/api/batches/{alpha_batch}", who.alpha)
        assert json.loads(raw)["status"] == "scheduled", raw
        status, raw = await call(session, "POST", f"/api/batches/{alpha_batch}/cancel", who.alpha)
        assert status in (200, 202), raw
        status, raw = await call(session, "POST", f"/api/batches/{beta_batch}/cancel", who.operator)
        assert status in (200, 202), raw

        # The OpenAPI document stays open, as the template excludes it from authentication.
        assert (await call(session, "GET", "/api/openapi.json", who.none))[0] == 200


async def test_an_idempotency_key_is_each_tenants_own_and_bound_to_the_request_it_first_named(
    identity_host: RunningHost,
) -> None:
    who = Callers()
    body = b'{"a":1}\n{"a":2}\n'
    keyed = {"Content-Type": "application/x-ndjson", "Idempotency-Key": "order-17"}

    async def post(headers: dict[str, str], data: bytes = body, **params: str) -> tuple[int, dict[str, Any], str]:
        async with session.post("/api/batches", data=data, headers=headers | keyed, params=params) as response:
            return response.status, await response.json(), response.headers.get("Idempotent-Replayed", "")

    async with aiohttp.ClientSession(base_url=identity_host.base_url) as session:
        alpha = await post(who.alpha, expires_in_s="600")
        beta = await post(who.beta, expires_in_s="60")
        # Two tenants, one key, the same body: two batches, each its tenant's; nothing said "replayed".
        assert alpha[0] == beta[0] == 202, (alpha, beta)
        assert alpha[1]["batch_id"] != beta[1]["batch_id"]
        assert (alpha[1]["tenant"], beta[1]["tenant"]) == ("alpha", "beta")
        assert alpha[2] == beta[2] == ""
        assert (await call(session, "GET", f"/api/batches/{beta[1]['batch_id']}", who.beta))[0] == 200

        # The same tenant, the same key and request: the first batch again.
        again = await post(who.alpha, expires_in_s="600")
        assert (again[0], again[1]["batch_id"], again[2]) == (202, alpha[1]["batch_id"], "true")

        # The same key with an option changed, or the body: refused, naming what changed.
        for params, data, changed in (
            ({"expires_in_s": "60"}, body, ["expires_in_s"]),
            ({"expires_in_s": "600", "priority": "high"}, body, ["priority"]),
            ({"expires_in_s": "600", "max_failed_fraction": "0.5"}, body, ["max_failed_fraction"]),
            ({}, body, ["expires_in_s"]),
            ({"expires_in_s": "600", "not_before": "3600"}, b'{"a":3}\n', ["body", "not_before"]),
        ):
            status, answer, _ = await post(who.alpha, data, **params)
            assert status == 409, (params, answer)
            assert answer["error"]["code"] == "idempotency_conflict"
            assert answer["error"]["different"] == changed, answer


async def test_a_tenants_notice_is_signed_with_its_own_key_under_both_masters_while_one_is_rotated_out(
    identity_host: RunningHost,
) -> None:
    alpha_key = devstack_notice_key("alpha", MASTER)  # what the operator hands alpha's receiver
    who = Callers()
    with receiving(alpha_key, port=RECEIVER_PORT) as receiver:
        async with aiohttp.ClientSession(base_url=identity_host.base_url) as session:
            headers = who.alpha | {"Content-Type": "application/x-ndjson", "X-Callback-Url": receiver.url()}
            status, raw = await call(session, "POST", "/api/batches", headers, data=b'{"a":1}\n')
            assert status == 202, raw
        wait_until(lambda: receiver.count() > 0, 60, "alpha's completion notice")
        got = receiver.got[0]
    assert got.verified  # by the standardwebhooks package, with alpha's key
    assert len(got.headers["webhook-signature"].split()) == 2
    for master in (MASTER, PREVIOUS):
        verify(notice_key(master, "alpha"), got.body, got.headers)  # either key of alpha's verifies it
        for other in (notice_key(master, "beta"), master):
            with pytest.raises(InvalidNotice):
                verify(other, got.body, got.headers)


@pytest.fixture
def quota_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    yield from identity_stack(tmp_path, azurite_service, servicebus_service, names, TENANT_MAX_PENDING_ITEMS="5")


async def test_a_tenant_past_its_pending_quota_gets_a_429_naming_it_while_another_tenants_submit_is_accepted(
    quota_host: RunningHost,
) -> None:
    who = Callers()
    three = b'{"a":1}\n{"a":2}\n{"a":3}\n'
    scheduled = {"not_before": SCHEDULED}

    async def post(headers: dict[str, str], data: bytes, key: str, **params: str) -> tuple[int, Any, str]:
        headers = headers | {"Content-Type": "application/x-ndjson", "Idempotency-Key": key}
        async with session.post("/api/batches", data=data, headers=headers, params=params) as response:
            return response.status, await response.json(), response.headers.get("Retry-After", "")

    async def use_of(tenant: str) -> dict[str, Any]:
        status, raw = await call(session, "GET", "/api/queues", who.operator)
        assert status == 200, raw
        quotas = json.loads(raw)["quotas"]
        assert quotas["limits"] == {"max_pending_items": 5, "max_submits_per_min": 0}
        return next((u for u in quotas["tenants"] if u["tenant"] == tenant), {"pending_items": 0})

    async with aiohttp.ClientSession(base_url=quota_host.base_url) as session:
        assert (await post(who.alpha, three, "a-1", **scheduled))[0] == 202
        status, refusal, retry_after = await post(who.alpha, three, "a-2", **scheduled)
        assert status == 429, refusal
        assert refusal["error"]["code"] == "quota_exceeded"
        assert refusal["error"]["limit"] == "TENANT_MAX_PENDING_ITEMS"
        assert (refusal["error"]["maximum"], refusal["error"]["pending_items"]) == (5, 3)
        assert int(retry_after) > 0
        # Nothing of the refused submit was kept: its id (derived from tenant and key) is unknown.
        refused_id = new_batch_id("a-2", "alpha")
        assert (await call(session, "GET", f"/api/batches/{refused_id}", who.operator))[0] == 404

        # Another tenant is not held back by alpha's use.
        assert (await post(who.beta, three, "b-1", **scheduled))[0] == 202
        # A batch larger than the quota itself can never pass: a 413, not a 429 to retry.
        status, too_big, _ = await post(who.beta, b'{"a":1}\n' * 6, "b-2")
        assert status == 413, too_big
        assert too_big["error"]["limit"] == "TENANT_MAX_PENDING_ITEMS"

        # The operator's view shows each tenant's use; a batch that ends no longer counts.
        assert (await use_of("alpha"))["pending_items"] == 3
        assert (await use_of("beta"))["pending_items"] == 3
        status, two_more, _ = await post(who.beta, b'{"a":1}\n{"a":2}\n', "b-3")  # not scheduled: it drains
        assert status == 202, two_more
        assert (await use_of("beta"))["pending_items"] == 5
        deadline = asyncio.get_running_loop().time() + 60
        while (await use_of("beta"))["pending_items"] != 3:
            assert asyncio.get_running_loop().time() < deadline, "beta's finished batch still counts after 60 s"
            await asyncio.sleep(0.3)
        status, raw = await call(session, "GET", f"/api/batches/{two_more['batch_id']}", who.beta)
        assert json.loads(raw)["status"].startswith("completed"), raw
