"""The deploy's smoke test (infra/hooks/smoke.py, issue 41) run as azd runs it, against the real app in the local
host with Azurite and the Service Bus stand-in.

What cannot be had here is stood in for, and only that: ARM's `listkeys` (a loopback server that reads the local
host's own key file, as ARM reads the real host's), azd (a script on PATH that prints a token as
`azd auth token --output json` does), and the platform's front end while the host starts (a loopback proxy that
answers 503 for its first 20 s, then passes every request through).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.host import ROOT
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost
from tests.host.test_function_app import app_settings

SMOKE = ROOT / "infra" / "hooks" / "smoke.py"
TOKEN = "token-of-azd"
SUBSCRIPTION, GROUP, SITE = "sub-1", "rg-qd", "func-qd"


class Front(ThreadingHTTPServer):
    """Answers 503 until `opens_at` (monotonic s), then forwards each request to `target` (the local host)."""

    def __init__(self, target: str, closed_s: float) -> None:
        super().__init__(("127.0.0.1", 0), FrontHandler)
        self.target, self.opens_at, self.refused = target, time.monotonic() + closed_s, 0


class FrontHandler(BaseHTTPRequestHandler):
    server: Front

    def _forward(self) -> None:
        if time.monotonic() < self.server.opens_at:
            self.server.refused += 1
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in {"host", "content-length"}}
        request = urllib.request.Request(  # noqa: S310 (loopback)
            self.server.target + self.path, data=body, headers=headers, method=self.command
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (loopback)
                status, payload = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _forward

    def log_message(self, format: str, *args: object) -> None:
        return


class Arm(ThreadingHTTPServer):
    """ARM's `listkeys` of one site's host, read from the local host's key file; the bearer token must be azd's."""

    def __init__(self, secrets: Path) -> None:
        super().__init__(("127.0.0.1", 0), ArmHandler)
        self.secrets, self.calls = secrets, 0


class ArmHandler(BaseHTTPRequestHandler):
    server: Arm

    def do_POST(self) -> None:
        self.server.calls += 1
        path = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Web/sites/{SITE}"
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            status, body = 401, {"error": {"code": "InvalidAuthenticationToken"}}
        elif not self.path.startswith(path + "/host/default/listkeys?api-version="):
            status, body = 404, {"error": {"code": "ResourceNotFound"}}
        else:
            host = json.loads((self.server.secrets / "host.json").read_text())
            keys = {k["name"]: k["value"] for k in host["functionKeys"]}
            status, body = 200, {"masterKey": host["masterKey"]["value"], "functionKeys": keys, "systemKeys": {}}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return


def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["header"])
def keyed_host(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    azurite_service: Azurite,
    servicebus_service: ServiceBus,
    names: Names,
) -> Iterator[tuple[RunningHost, Path]]:
    """The real app, its keys checked as on Azure, and a handler that would fail any batch it were given; with
    `principal`, the local host plays App Service Authentication (emulators/functions/easyauth.py)."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    env = app_settings(azurite_service, servicebus_service, names, "smoke") | {
        "AzureWebJobsSecretStorageType": "files",
        "FUNCTIONS_SECRETS_PATH": str(secrets),
        "HANDLER": "tests.host.lifecycle_handlers:sevens_fail",
        "TENANT_FROM": request.param,
    }
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env), secrets
    finally:
        launcher.stop_all()


def fake_azd(folder: Path) -> Path:
    folder.mkdir()
    azd = folder / "azd"
    answer = json.dumps({"token": TOKEN, "expiresOn": "2099-01-01T00:00:00Z"})
    azd.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'auth token' ] || exit 2\necho '{answer}'\n")
    azd.chmod(0o755)
    return folder


def run_smoke(
    app_url: str, arm_url: str, path: Path, timeout_s: float = 240, site: str = SITE, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
        "FUNCTION_APP_URL": app_url,
        "SMOKE_ARM_ENDPOINT": arm_url,
        "SMOKE_TIMEOUT_S": str(timeout_s - 30),
        "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
        "AZURE_RESOURCE_GROUP": GROUP,
        "AZURE_FUNCTION_APP_NAME": site,
        **extra,
    }
    env.pop("SMOKE_FUNCTION_KEY", None)
    return subprocess.run(
        [sys.executable, str(SMOKE)], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


@pytest.mark.slow
def test_the_smoke_hook_waits_out_a_starting_host_reads_the_key_with_azds_sign_in_and_never_calls_the_handler(
    keyed_host: tuple[RunningHost, Path], tmp_path: Path
) -> None:
    host, secrets = keyed_host
    front, arm = Front(host.base_url, closed_s=20), Arm(secrets)
    for app_url in serving(front):
        for arm_url in serving(arm):
            done = run_smoke(app_url, arm_url, fake_azd(tmp_path / "bin"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert front.refused >= 1, "the front answered 503 while the host 'started', and the hook waited it out"
    assert arm.calls == 1, "one listkeys, with azd's token"
    assert "went through Service Bus to the drain function and back" in done.stdout
    # The probe reached the drain function; the handler (which fails any item) was never called.
    log = host.log()
    assert "received by the drain function" in log
    assert not list(host.markers.iterdir()), "no handler call: the smoke test submits no batch"


def test_the_smoke_hook_fails_at_once_on_an_answer_that_waiting_cannot_mend(tmp_path: Path) -> None:
    # A site ARM does not know: a 404 from listkeys is final, not retried to the deadline.
    class Up(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = b'{"openapi": "3.1.0"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            return

    up, arm = ThreadingHTTPServer(("127.0.0.1", 0), Up), Arm(tmp_path)
    for app_url in serving(up):
        for arm_url in serving(arm):
            done = run_smoke(app_url, arm_url, fake_azd(tmp_path / "bin"), timeout_s=120, site="another-site")
    assert done.returncode != 0
    assert "answered 404" in done.stderr
    assert arm.calls == 1, "not retried: waiting cannot mend a site ARM does not know"


@pytest.mark.slow
@pytest.mark.parametrize(("keyed_host", "guarded"), [("principal", True), ("header", False)], indirect=["keyed_host"])
def test_with_tenant_from_principal_the_smoke_hook_fails_unless_a_forged_principal_is_refused(
    keyed_host: tuple[RunningHost, Path], guarded: bool, tmp_path: Path
) -> None:
    host, secrets = keyed_host
    front, arm = Front(host.base_url, closed_s=0), Arm(secrets)
    for app_url in serving(front):
        for arm_url in serving(arm):
            done = run_smoke(app_url, arm_url, fake_azd(tmp_path / "bin"), TENANT_FROM="principal")
    said = done.stdout + done.stderr
    if guarded:  # the local host's Easy Auth: the probe passes (excluded), the forged principal gets 401
        assert done.returncode == 0, said
        assert "a forged X-MS-CLIENT-PRINCIPAL without a token is refused (401)" in said
    else:  # an app nothing guards answers the forged operator: the deploy fails, saying why
        assert done.returncode != 0, said
        assert "hand-written X-MS-CLIENT-PRINCIPAL (operator) was answered" in said
