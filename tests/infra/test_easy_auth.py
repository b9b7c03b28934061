"""The template puts App Service Authentication in front of the app by default (offline: tree-sitter-bicep), the
way the local host plays it (emulators/functions/easyauth.py), and refuses to provision `principal` without the
app registration it accepts tokens for."""

from __future__ import annotations

import json
import sys

import pytest

from emulators.functions.easyauth import UNPROTECTED
from tests.infra.bicep import (
    INFRA,
    ROOT,
    find_property,
    parameter_defaults,
    parse,
    properties,
    resources,
    string_value,
    text,
)
from tests.infra.test_configuration import preprovision
from tests.infra.test_templates import template_settings

sys.path.insert(0, str(ROOT / "infra" / "hooks"))
import app_registration


def auth_config() -> dict[str, str]:
    """authsettingsV2's properties, flattened to `a.b.c` paths of their literal values."""
    [auth] = [r for r in resources(parse((INFRA / "modules/auth.bicep").read_bytes())) if "sites/config" in r.type]
    assert string_value(properties(auth.body)["name"]) == "authsettingsV2"
    out: dict[str, str] = {}

    def flatten(prefix: str, node: object) -> None:
        for key, value in properties(node).items():  # type: ignore[arg-type]
            if value.type == "object":
                flatten(f"{prefix}{key}.", value)
            else:
                out[prefix + key] = text(value)

    flatten("", properties(auth.body)["properties"])
    return out


def test_easy_auth_is_on_by_default_answering_401_to_callers_without_a_token() -> None:
    config = auth_config()
    assert config["platform.enabled"] == "true"
    assert config["globalValidation.requireAuthentication"] == "true"
    assert config["globalValidation.unauthenticatedClientAction"] == "'Return401'"
    assert config["identityProviders.azureActiveDirectory.enabled"] == "true"
    assert "clientId" in config["identityProviders.azureActiveDirectory.registration.clientId"]
    main = parse((INFRA / "main.bicep").read_bytes())
    assert string_value(parameter_defaults(main)["tenantFrom"]) == "principal"
    assert template_settings()["TENANT_FROM"] == "principal"
    [module] = [n for n in find_property(main, "clientId")]
    assert text(module).startswith("authClientId")
    assert "module auth 'modules/auth.bicep' = if (tenantFrom == 'principal')" in (INFRA / "main.bicep").read_text()


def test_the_paths_left_open_are_the_ones_the_local_host_leaves_open() -> None:
    [excluded] = find_property(parse((INFRA / "modules/auth.bicep").read_bytes()), "excludedPaths")
    paths = {string_value(n) for n in excluded.named_children if n.type == "string"}
    assert paths == {f"/api/{route}" for route in UNPROTECTED}


def test_azd_passes_the_identity_parameters() -> None:
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert parameters["tenantFrom"]["value"] == "${TENANT_FROM=principal}"
    assert parameters["authClientId"]["value"] == "${AUTH_CLIENT_ID=}"


@pytest.mark.parametrize(
    ("identity", "said"),
    [
        ({"TENANT_FROM": "principal"}, "AUTH_CLIENT_ID is not set"),
        ({"TENANT_FROM": "everyone"}, "TENANT_FROM must be principal or header"),
    ],
)
def test_principal_without_an_app_registration_is_refused_before_provisioning(
    identity: dict[str, str], said: str
) -> None:
    done = preprovision("", **identity)
    assert done.returncode == 1
    assert said in done.stderr


def test_header_needs_no_app_registration() -> None:
    assert preprovision("", TENANT_FROM="header").returncode == 0


def test_the_registration_holds_the_roles_the_app_reads_each_with_a_stable_id() -> None:
    roles = app_registration.app_roles(["acme", "Acme-Corp.eu"])
    assert [r["value"] for r in roles] == ["operator", "tenant.acme", "tenant.Acme-Corp.eu"]
    assert roles == app_registration.app_roles(["acme", "Acme-Corp.eu"])  # the same ids on every run
    again = app_registration.app_roles(["acme", "beta"], existing=roles)
    assert [r["value"] for r in again] == [*(r["value"] for r in roles), "tenant.beta"]  # only ever added
    with pytest.raises(ValueError, match="not a tenant id"):
        app_registration.app_roles(["no spaces"])
