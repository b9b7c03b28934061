"""Each tenant's notices are signed with its own key, derived from the master secret; during a rotation a notice
carries a signature under each master's key. Checked with the `standardwebhooks` package, as a user's receiver
would, and with the client library's helper (pure: the end-to-end case is tests/host/test_identity.py)."""

from __future__ import annotations

import time

import pytest
from queue_drain_client.notices import InvalidNotice, notice_key, verify
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from shared.core import webhooks
from tests.receiver import new_secret

MASTER, PREVIOUS = new_secret(), new_secret()
BODY = b'{"type":"batch.completed","timestamp":"2026-11-27T10:00:00+00:00","data":{"status":"completed"}}'


def signed(tenant: str, previous: str = "") -> dict[str, str]:
    keys = webhooks.keys(tenant, MASTER, previous)
    return webhooks.headers(keys, webhooks.message_id("a" * 32), int(time.time()), BODY)


def verifies(secret: str, headers: dict[str, str]) -> bool:
    """Both verifiers agree, or the test fails."""
    try:
        Webhook(secret).verify(BODY, headers)
        by_package = True
    except WebhookVerificationError:
        by_package = False
    try:
        verify(secret, BODY, headers)
        by_client = True
    except InvalidNotice:
        by_client = False
    assert by_package == by_client, (by_package, by_client)
    return by_package


def test_a_tenants_notice_verifies_with_its_own_key_only() -> None:
    headers = signed("acme")
    assert verifies(notice_key(MASTER, "acme"), headers)
    assert not verifies(notice_key(MASTER, "beta"), headers)
    assert not verifies(MASTER, headers)  # the master is no tenant's key: a receiver never needs it
    assert len(headers["webhook-signature"].split()) == 1


def test_during_a_rotation_a_notice_verifies_with_the_tenants_old_key_and_with_its_new_one() -> None:
    headers = signed("acme", PREVIOUS)
    assert len(headers["webhook-signature"].split()) == 2
    assert verifies(notice_key(MASTER, "acme"), headers)
    assert verifies(notice_key(PREVIOUS, "acme"), headers)
    assert not verifies(notice_key(MASTER, "beta"), headers)
    assert not verifies(notice_key(PREVIOUS, "beta"), headers)


def test_the_shared_tenant_signs_with_the_master_as_before_tenants_had_keys() -> None:
    assert verifies(MASTER, signed("default"))
    assert webhooks.tenant_key(MASTER, "default") == MASTER


@pytest.mark.parametrize("tenant", ["acme", "Acme-Corp.eu", "7c9e6679-7425-40de-944b-e07fc1f90ae7", "a:b_c"])
def test_the_client_derives_the_key_the_app_signs_with(tenant: str) -> None:
    assert notice_key(MASTER, tenant) == webhooks.tenant_key(MASTER, tenant)
    assert notice_key(MASTER, tenant) != notice_key(PREVIOUS, tenant)


def test_the_clients_verify_refuses_a_stale_timestamp() -> None:
    headers = signed("acme")
    with pytest.raises(InvalidNotice, match="tolerance"):
        verify(notice_key(MASTER, "acme"), BODY, headers, now_s=time.time() + 3600)
