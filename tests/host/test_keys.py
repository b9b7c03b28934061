"""Function keys: with AzureWebJobsSecretStorageType=files the host checks keys as the real host does."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from emulators.functions.errors import ConfigError
from emulators.functions.keys import Keys, load_keys, presented_key
from tests.host.conftest import HostLauncher, RunningHost
from tests.host.test_http_triggers import fetch
from tests.host.test_startup import run_host

MASTER, HOST_KEY, ECHO_KEY = "master-key-value-0001", "host-key-value-0002", "echo-key-value-0003"


def write_secrets(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    host = {
        "masterKey": {"name": "master", "value": MASTER, "encrypted": False},
        "functionKeys": [{"name": "default", "value": HOST_KEY, "encrypted": False}],
        "systemKeys": [],
    }
    (folder / "host.json").write_text(json.dumps(host))
    (folder / "echo.json").write_text(json.dumps({"keys": [{"name": "default", "value": ECHO_KEY}]}))
    return folder


def files_env(folder: Path) -> dict[str, str]:
    return {"AzureWebJobsSecretStorageType": "files", "FUNCTIONS_SECRETS_PATH": str(folder)}


def test_each_auth_level_accepts_exactly_the_keys_the_real_host_accepts(tmp_path: Path) -> None:
    keys = load_keys(files_env(write_secrets(tmp_path)), ["echo", "item"])
    assert keys is not None
    assert keys.authorizes("anonymous", "echo", None)
    for level in ("function", "FUNCTION"):
        assert keys.authorizes(level, "echo", ECHO_KEY)
        assert keys.authorizes(level, "item", HOST_KEY)
        assert keys.authorizes(level, "item", MASTER)
        assert not keys.authorizes(level, "item", ECHO_KEY), "a function key opens its own function only"
        assert not keys.authorizes(level, "echo", None)
        assert not keys.authorizes(level, "echo", "")
        assert not keys.authorizes(level, "echo", HOST_KEY + "x")
    assert keys.authorizes("admin", "echo", MASTER)
    assert not keys.authorizes("admin", "echo", HOST_KEY)
    assert not keys.authorizes("admin", "echo", ECHO_KEY)


def test_without_the_setting_no_keys_are_loaded(tmp_path: Path) -> None:
    assert load_keys({"FUNCTIONS_SECRETS_PATH": str(write_secrets(tmp_path))}, ["echo"]) is None


def test_the_header_wins_over_the_query_string() -> None:
    assert presented_key({"X-Functions-Key": "h"}, {"code": "q"}) == "h"
    assert presented_key({}, {"code": "q"}) == "q"
    assert presented_key({}, {}) is None


def test_a_first_start_generates_private_keys_and_never_logs_them(tmp_path: Path, caplog) -> None:
    folder = tmp_path / "secrets"
    keys = load_keys(files_env(folder), ["echo"])
    assert isinstance(keys, Keys)
    written = folder / "host.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    doc = json.loads(written.read_text())
    assert doc["masterKey"]["value"] == keys.master
    assert keys.host == (doc["functionKeys"][0]["value"],)
    assert len(keys.master) >= 40
    assert keys.master not in caplog.text
    assert load_keys(files_env(folder), ["echo"]) == keys, "the second start reads the same keys"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"masterKey": {"name": "master", "value": "x", "encrypted": true}}', "encrypted"),
        ('{"masterKey": null}', "masterKey"),
        ('{"masterKey": {"value": "m"}, "functionKeys": {"a": 1}}', "functionKeys"),
        ("not json", "cannot be read"),
    ],
)
def test_a_bad_secrets_file_stops_the_start_naming_the_problem(tmp_path: Path, content: str, problem: str) -> None:
    (tmp_path / "host.json").write_text(content)
    with pytest.raises(ConfigError, match=problem):
        load_keys(files_env(tmp_path), [])


def test_another_secret_storage_type_is_refused() -> None:
    with pytest.raises(ConfigError, match="not supported by the local host"):
        load_keys({"AzureWebJobsSecretStorageType": "keyvault"}, [])


@pytest.fixture(scope="module")
def keyed_host(module_hosts: HostLauncher, tmp_path_factory: pytest.TempPathFactory) -> RunningHost:
    folder = write_secrets(tmp_path_factory.mktemp("secrets"))
    return module_hosts.start("http_app", env=files_env(folder))


async def test_a_function_route_refuses_requests_without_a_valid_key_with_401(keyed_host: RunningHost) -> None:
    url = f"{keyed_host.base_url}/api/echo/bob"
    assert (await fetch("POST", url, data=b"x")).status == 401
    assert (await fetch("POST", url + "?code=wrong", data=b"x")).status == 401
    assert (await fetch("POST", url, data=b"x", headers={"x-functions-key": "wrong"})).status == 401
    refused = await fetch("POST", url, data=b"x", headers={"x-functions-key": "wrong"})
    assert refused.body == b""
    assert "Executing 'Functions.echo'" not in keyed_host.log(), "a refused request never reaches the function"


async def test_function_host_and_master_keys_open_a_function_route(keyed_host: RunningHost) -> None:
    url = f"{keyed_host.base_url}/api/echo/bob"
    assert (await fetch("POST", f"{url}?code={ECHO_KEY}", data=b"x")).status == 201
    assert (await fetch("POST", url, data=b"x", headers={"x-functions-key": HOST_KEY})).status == 201
    assert (await fetch("POST", url, data=b"x", headers={"X-Functions-Key": MASTER})).status == 201
    other = f"{keyed_host.base_url}/api/items/3"
    assert (await fetch("GET", f"{other}?code={ECHO_KEY}")).status == 401
    assert (await fetch("GET", f"{other}?code={HOST_KEY}")).status == 200


async def test_the_admin_endpoint_needs_the_master_key(keyed_host: RunningHost) -> None:
    status_url = f"{keyed_host.base_url}/admin/host/status"
    assert (await fetch("GET", status_url)).status == 401
    assert (await fetch("GET", status_url, headers={"x-functions-key": HOST_KEY})).status == 401
    assert (await fetch("GET", status_url, headers={"x-functions-key": MASTER})).status == 200


async def test_unknown_routes_are_still_404_with_keys(keyed_host: RunningHost) -> None:
    assert (await fetch("GET", f"{keyed_host.base_url}/api/nothing-here")).status == 404


def test_the_start_says_keys_are_checked_and_where_without_printing_them(keyed_host: RunningHost) -> None:
    log = keyed_host.wait_for_log("Function keys are checked")
    assert "are not enforced" not in log
    for secret in (MASTER, HOST_KEY, ECHO_KEY):
        assert secret not in log


def test_an_encrypted_key_file_stops_the_host_with_exit_code_1(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text('{"masterKey": {"name": "master", "value": "x", "encrypted": true}}')
    code, output = run_host("http_app", 0, env=files_env(tmp_path))
    assert code == 1
    assert "The host could not start" in output
    assert "encrypted" in output
