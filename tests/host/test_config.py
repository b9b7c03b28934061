"""host.json and local.settings.json handling (pure, on files in tmp_path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulators.functions import config
from emulators.functions.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"), [("00:05:00", 300), ("01:00:00", 3600), ("1.02:00:00", 93600), ("00:00:01.5", 1.5)]
)
def test_timespans_read_like_dotnet(text: str, seconds: float) -> None:
    assert config.parse_timespan(text) == seconds


@pytest.mark.parametrize("text", ["5", "5m", "00:05", ""])
def test_malformed_timespans_are_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        config.parse_timespan(text)


def test_setting_references_resolve_and_a_missing_one_is_named() -> None:
    assert config.resolve_setting_refs("%Q%-x", {"Q": "trigger"}) == "trigger-x"
    with pytest.raises(ConfigError, match="MISSING"):
        config.resolve_setting_refs("%MISSING%", {})


def test_host_json_defaults_and_values(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"version": "2.0"}))
    defaults = config.load_host_options(tmp_path, {})
    assert defaults.route_prefix == "api"
    assert defaults.function_timeout_s == config.DEFAULT_FUNCTION_TIMEOUT_S
    assert defaults.service_bus == config.ServiceBusOptions(0, True, 300.0, 16)

    doc = {
        "functionTimeout": "-1",
        "extensions": {
            "http": {"routePrefix": ""},
            "serviceBus": {"prefetchCount": 5, "maxConcurrentCalls": 2, "maxAutoLockRenewalDuration": "00:00:30"},
        },
    }
    (tmp_path / "host.json").write_text(json.dumps(doc))
    options = config.load_host_options(tmp_path, {})
    assert options.route_prefix == ""
    assert options.function_timeout_s is None
    assert options.service_bus == config.ServiceBusOptions(5, True, 30.0, 2)


def test_azure_functions_job_host_settings_override_host_json(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"functionTimeout": "00:05:00"}))
    environ = {
        "AzureFunctionsJobHost__functionTimeout": "00:00:03",
        "AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls": "4",
    }
    options = config.load_host_options(tmp_path, environ)
    assert options.function_timeout_s == 3
    assert options.service_bus.max_concurrent_calls == 4


def test_values_become_environment_variables_unless_already_set(tmp_path: Path) -> None:
    (tmp_path / "local.settings.json").write_text(json.dumps({"IsEncrypted": False, "Values": {"A": "1", "B": "2"}}))
    environ = {"B": "from-env"}
    skipped = config.apply_values(config.load_local_values(tmp_path), environ)
    assert environ == {"A": "1", "B": "from-env"}
    assert skipped == ["B"]


def test_a_broken_local_settings_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "local.settings.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"local\.settings\.json"):
        config.load_local_values(tmp_path)


def test_the_host_id_comes_from_the_folder_or_the_override(tmp_path: Path) -> None:
    app = tmp_path / "My_Function.App"
    app.mkdir()
    assert config.host_id(app, {}) == "my-function-app"
    assert config.host_id(app, {"AzureFunctionsWebHost__hostid": "Shared-Host"}) == "shared-host"
    assert len(config.host_id(app, {"AzureFunctionsWebHost__hostid": "x" * 50})) == 32
