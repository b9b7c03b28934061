"""The template puts App Service Authentication in front of the app by default (offline: tree-sitter-bicep), the
way the local host plays it (emulators/functions/easyauth.py), and refuses to provision `principal` without the
app registration it accepts tokens for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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
        ({"TENANT_FROM": "principal"}, "the app registration could not be made"),  # no azd here to make it
        ({"TENANT_FROM": "everyone"}, "TENANT_FROM must be principal or header"),
    ],
)
def test_principal_without_an_app_registration_that_cannot_be_made_is_refused_before_provisioning(
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


class Graph(ThreadingHTTPServer):
    """Microsoft Graph's applications and servicePrincipals, in memory, for one token (a stand-in: Graph cannot
    be reached here)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), GraphHandler)
        self.applications: list[dict[str, Any]] = []
        self.principals: list[str] = []


class GraphHandler(BaseHTTPRequestHandler):
    server: Graph

    def answer(self, status: int, body: object) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def body(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        return doc

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != "Bearer graph-token":
            return self.answer(401, {"error": {"code": "InvalidAuthenticationToken"}})
        path, _, query = self.path.partition("?")
        wanted = urllib.parse.unquote(query)
        if path == "/v1.0/applications":
            return self.answer(
                200, {"value": [a for a in self.server.applications if f"'{a['displayName']}'" in wanted]}
            )
        return self.answer(200, {"value": [{"id": p} for p in self.server.principals if f"'{p}'" in wanted]})

    def do_POST(self) -> None:
        doc = self.body()
        if self.path == "/v1.0/applications":
            app = {**doc, "id": f"obj-{len(self.server.applications)}", "appId": f"app-{len(self.server.applications)}"}
            self.server.applications.append(app)
            return self.answer(201, app)
        self.server.principals.append(doc["appId"])
        return self.answer(201, {"id": doc["appId"]})

    def do_PATCH(self) -> None:
        [app] = [a for a in self.server.applications if self.path == f"/v1.0/applications/{a['id']}"]
        app.update(self.body())
        self.answer(204, {})

    def log_message(self, format: str, *args: object) -> None:
        return


def test_a_first_azd_up_makes_the_app_registration_with_azds_sign_in_and_a_second_finds_it(tmp_path: Path) -> None:
    # azd stands in as a script: `auth token` prints Graph's token, `env set` records what it was given.
    bin_dir, recorded = tmp_path / "bin", tmp_path / "env-set"
    bin_dir.mkdir()
    (bin_dir / "azd").write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "auth token" ]; then echo \'{"token": "graph-token", "expiresOn": "2099-01-01"}\'; exit 0; fi\n'
        f'if [ "$1 $2" = "env set" ]; then echo "$3=$4" >> {recorded}; exit 0; fi\n'
        "exit 2\n"
    )
    (bin_dir / "azd").chmod(0o755)
    graph = Graph()
    thread = threading.Thread(target=graph.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "GRAPH_ENDPOINT": f"http://127.0.0.1:{graph.server_address[1]}",
            "AZURE_ENV_NAME": "qd-prod",
            "QUEUE_DRAIN_TENANTS": "acme",
        }
        hook = ROOT / "infra/hooks/preprovision.py"
        for _ in range(2):
            done = subprocess.run([sys.executable, str(hook)], env=env, capture_output=True, text=True, check=False)
            assert done.returncode == 0, done.stderr
    finally:
        graph.shutdown()
        graph.server_close()
    [app] = graph.applications
    assert app["displayName"] == "queue-drain-qd-prod"
    assert app["identifierUris"] == ["api://app-0"]
    assert {r["value"] for r in app["appRoles"]} == {"operator", "tenant.acme"}
    assert graph.principals == ["app-0"]
    assert recorded.read_text().split() == ["AUTH_CLIENT_ID=app-0", "AUTH_CLIENT_ID=app-0"]
