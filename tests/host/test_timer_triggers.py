"""Timer triggers through real host processes against the real Azurite: schedule, startup, past-due, singleton."""

from __future__ import annotations

import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from emulators.functions import ncrontab
from tests.conftest import Azurite, Names
from tests.host.conftest import RunningHost, StartHost, wait_until

HOSTS_CONTAINER = "azure-webjobs-hosts"
EVERY_SECOND = "*/1 * * * * *"
HOURLY = "0 0 * * * *"


@pytest.fixture
def timer_env(azurite_service: Azurite, names: Names) -> dict[str, str]:
    return {
        "AzureWebJobsStorage": azurite_service.connection_string,
        "AzureFunctionsWebHost__hostid": f"t-{names.token}",
    }


def ticks(host: RunningHost) -> list[dict[str, Any]]:
    path = host.markers / "ticks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def status_blob(azurite: Azurite, host_id: str) -> Any:
    container = BlobServiceClient.from_connection_string(azurite.connection_string).get_container_client(
        HOSTS_CONTAINER
    )
    if not container.exists():
        container.create_container()
    return container.get_blob_client(f"timers/{host_id}/Host.Functions.tick/status")


def test_a_timer_fires_on_its_ncrontab_schedule_every_second(start_host: StartHost, timer_env: dict[str, str]) -> None:
    host = start_host("timer_app", env={**timer_env, "TICK_SCHEDULE": EVERY_SECOND})
    wait_until(lambda: len(ticks(host)) >= 3, 10, "three ticks")
    times = [datetime.fromisoformat(t["at"]) for t in ticks(host)[:3]]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert all(0.5 < gap < 1.6 for gap in gaps), gaps
    assert not any(t["past_due"] for t in ticks(host))
    log = host.wait_for_log("Executed 'Functions.tick' (Succeeded", count=3)
    assert "The next 5 occurrences of the 'Functions.tick' schedule (Cron: '*/1 * * * * *')" in log
    assert "Executing 'Functions.tick' (Reason='Timer fired at " in log


def test_run_on_startup_fires_once_at_start_without_past_due(start_host: StartHost, timer_env: dict[str, str]) -> None:
    host = start_host("timer_app", env={**timer_env, "TICK_SCHEDULE": HOURLY, "TICK_RUN_ON_STARTUP": "1"})
    wait_until(lambda: len(ticks(host)) >= 1, 10, "the startup run")
    time.sleep(1.0)
    assert [t["past_due"] for t in ticks(host)] == [False]


def test_a_first_start_records_the_schedule_status_and_is_not_past_due(
    start_host: StartHost, timer_env: dict[str, str], azurite_service: Azurite
) -> None:
    host = start_host("timer_app", env={**timer_env, "TICK_SCHEDULE": HOURLY})
    blob = status_blob(azurite_service, timer_env["AzureFunctionsWebHost__hostid"])
    wait_until(blob.exists, 10, "the status blob")
    status = json.loads(blob.download_blob().readall())
    assert datetime.fromisoformat(status["Next"]) == ncrontab.parse(HOURLY).next_occurrence(datetime.now(UTC))
    assert status["Last"].startswith("0001-01-01")
    time.sleep(1.0)
    assert ticks(host) == []


def test_a_missed_occurrence_runs_at_start_as_past_due_and_updates_the_status(
    start_host: StartHost, timer_env: dict[str, str], azurite_service: Azurite
) -> None:
    schedule = ncrontab.parse(HOURLY)
    last = schedule.next_occurrence(datetime.now(UTC) - timedelta(hours=3))
    missed = schedule.next_occurrence(last)
    blob = status_blob(azurite_service, timer_env["AzureFunctionsWebHost__hostid"])
    recorded = {"Last": last.isoformat(), "Next": missed.isoformat(), "LastUpdated": last.isoformat()}
    blob.upload_blob(json.dumps(recorded), overwrite=True)

    host = start_host(
        "timer_app", env={**timer_env, "TICK_SCHEDULE": HOURLY, "TICK_USE_MONITOR": "1", "TICK_RUN_ON_STARTUP": "1"}
    )
    wait_until(lambda: len(ticks(host)) >= 1, 10, "the past-due run")
    time.sleep(1.0)
    runs = ticks(host)
    assert [t["past_due"] for t in runs] == [True]  # past due takes precedence over runOnStartup
    assert datetime.fromisoformat(runs[0]["status"]["Next"]) == missed
    host.wait_for_log("is past due by")
    wait_until(lambda: json.loads(blob.download_blob().readall())["Next"] != recorded["Next"], 10, "a new status")
    status = json.loads(blob.download_blob().readall())
    assert datetime.fromisoformat(status["Next"]) == schedule.next_occurrence(datetime.now(UTC))
    assert datetime.fromisoformat(status["Last"]) > missed


def test_a_changed_schedule_is_not_past_due(
    start_host: StartHost, timer_env: dict[str, str], azurite_service: Azurite
) -> None:
    old = ncrontab.parse("0 30 * * * *")
    last = old.next_occurrence(datetime.now(UTC) - timedelta(hours=3))
    blob = status_blob(azurite_service, timer_env["AzureFunctionsWebHost__hostid"])
    recorded = {
        "Last": last.isoformat(),
        "Next": old.next_occurrence(last).isoformat(),
        "LastUpdated": last.isoformat(),
    }
    blob.upload_blob(json.dumps(recorded), overwrite=True)

    host = start_host("timer_app", env={**timer_env, "TICK_SCHEDULE": HOURLY, "TICK_USE_MONITOR": "1"})
    wait_until(lambda: json.loads(blob.download_blob().readall())["Next"] != recorded["Next"], 10, "a new status")
    time.sleep(1.0)
    assert ticks(host) == []


def pids(host: RunningHost) -> set[int]:
    return {t["pid"] for t in ticks(host)}


def test_two_hosts_share_one_timer_singleton_and_the_second_takes_over_when_the_first_stops(
    start_host: StartHost, timer_env: dict[str, str], azurite_service: Azurite, tmp_path: Path
) -> None:
    env = {**timer_env, "TICK_SCHEDULE": EVERY_SECOND}
    first = start_host("timer_app", env=env)
    wait_until(lambda: len(ticks(first)) >= 1, 10, "the first host's tick")
    second = start_host("timer_app", env=env)
    second.wait_for_log("another host holds locks/")
    time.sleep(3.0)
    assert ticks(second) == []
    assert pids(first) == {first.process.pid}

    first.process.stop(grace_s=30)
    stopped_at = len(ticks(first))
    wait_until(lambda: len(ticks(second)) >= 2, 10, "the second host to take over")
    assert pids(second) == {second.process.pid}
    assert len(ticks(first)) == stopped_at
    second.wait_for_log("singleton lease acquired (locks/")
