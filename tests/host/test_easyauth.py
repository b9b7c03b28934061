"""The local host's Easy Auth gate on its own (pure): what it admits, what it strips, what it refuses."""

from __future__ import annotations

import base64
import json

import pytest

from emulators.functions.easyauth import DEV_KEY, EasyAuth, InvalidToken, b64url, sign, token_for

NOW = 1_800_000_000.0


def principal_of(headers: dict[str, str]) -> dict[str, object]:
    doc: dict[str, object] = json.loads(base64.b64decode(headers["X-MS-CLIENT-PRINCIPAL"]))
    return doc


def test_a_valid_token_becomes_the_principal_and_every_client_sent_principal_header_is_dropped() -> None:
    gate = EasyAuth(DEV_KEY)
    token = token_for("acme", ["operator"], DEV_KEY, now_s=NOW)
    forged = {
        "x-ms-client-principal-idp": "forged",
        "X-Ms-Client-Principal-Roles": "operator",
        "X-MS-CLIENT-PRINCIPAL": "e30=",
    }
    admitted = gate.admit({"Authorization": f"Bearer {token}", "Accept": "*/*", **forged}, now_s=NOW)
    assert not set(forged) & set(admitted) - {"X-MS-CLIENT-PRINCIPAL"}
    assert admitted["X-MS-CLIENT-PRINCIPAL-IDP"] == "aad"
    doc = principal_of(admitted)
    assert doc["role_typ"] == "roles"
    assert {"typ": "roles", "val": "tenant.acme"} in doc["claims"]  # type: ignore[operator]
    assert {"typ": "roles", "val": "operator"} in doc["claims"]  # type: ignore[operator]
    assert admitted["Accept"] == "*/*"


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "Bearer ",
        "Basic abc",
        f"Bearer {token_for('acme', [], DEV_KEY, now_s=NOW - 7200)}",  # expired an hour ago
        f"Bearer {token_for('acme', [], 'another-key', now_s=NOW)}",
        "Bearer " + b64url(b'{"alg":"none"}') + "." + b64url(b'{"exp":9999999999}') + ".",
        f"Bearer {sign({'roles': ['operator']}, DEV_KEY)}",  # no exp
        "Bearer not.a.jwt",
    ],
)
def test_no_valid_bearer_token_is_refused(authorization: str) -> None:
    with pytest.raises(InvalidToken):
        EasyAuth(DEV_KEY).admit({"Authorization": authorization}, now_s=NOW)


def test_the_gate_is_on_only_when_the_app_reads_its_tenant_from_the_principal() -> None:
    assert EasyAuth.from_environ({}) is None
    assert EasyAuth.from_environ({"TENANT_FROM": "header"}) is None
    assert EasyAuth.from_environ({"TENANT_FROM": "principal"}) == EasyAuth(DEV_KEY)
    assert EasyAuth.from_environ({"TENANT_FROM": "principal", "EASY_AUTH_DEV_KEY": "k"}) == EasyAuth("k")
