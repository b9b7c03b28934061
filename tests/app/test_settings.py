"""Settings are built once from app settings and fail at start naming the bad variable."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from decimal import Decimal

import pytest

from shared import runtime
from shared.core.errors import HandlerError, SettingsError
from shared.core.settings import Decrease, Settings

BASE = {
    "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    "ServiceBusConnection": "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;",
    "TRIGGER_QUEUE": "queue-drain-trigger",
    "FALLBACK_SCHEDULE": "0 */1 * * * *",
}


def test_defaults_are_usable_and_typed():
    s = Settings.from_env(BASE)
    assert s.partition_queues() == ["work-items"]
    assert s.backoff_decrease is Decrease.RESET
    assert s.billing_author_share == Decimal("0.70")
    assert s.account_name == "devstoreaccount1"


def test_values_are_parsed_into_their_types():
    s = Settings.from_env(
        {
            **BASE,
            "WORK_QUEUE_PARTITIONS": "3",
            "BACKOFF_EXPONENT": "1.5",
            "RETRY_JITTER": "off",
            "BACKOFF_DECREASE": "halve",
        }
    )
    assert s.partition_queues() == ["work-items-0", "work-items-1", "work-items-2"]
    assert s.backoff_exponent == 1.5
    assert s.retry_jitter is False
    assert s.backoff_decrease is Decrease.HALVE


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"AzureWebJobsStorage": ""}, "AzureWebJobsStorage"),
        ({"AzureWebJobsStorage": "garbage"}, "AzureWebJobsStorage"),
        ({"ServiceBusConnection": ""}, "ServiceBusConnection"),
        ({"ServiceBusConnection": "SharedAccessKey=x"}, "ServiceBusConnection"),
        ({"TRIGGER_QUEUE": ""}, "TRIGGER_QUEUE"),
        ({"FALLBACK_SCHEDULE": ""}, "FALLBACK_SCHEDULE"),
        ({"FALLBACK_SCHEDULE": "* * * * *"}, "FALLBACK_SCHEDULE"),
        ({"CHUNK_MAX_ITEMS": "many"}, "CHUNK_MAX_ITEMS"),
        ({"RECEIVE_BATCH": "33"}, "RECEIVE_BATCH"),
        ({"LEASE_S": "5"}, "LEASE_S"),
        ({"WORK_QUEUE": "Bad_Name"}, "WORK_QUEUE"),
        ({"RESULTS_CONTAINER": "x"}, "RESULTS_CONTAINER"),
        ({"BACKOFF_FLOOR_MS": "5000", "BACKOFF_CEILING_MS": "1000"}, "BACKOFF_CEILING_MS"),
        ({"BACKOFF_DECREASE": "sometimes"}, "BACKOFF_DECREASE"),
        ({"RETRY_JITTER": "maybe"}, "RETRY_JITTER"),
        ({"BILLING_AUTHOR_SHARE": "0.9", "BILLING_DISTRIBUTOR_SHARE": "0.2"}, "BILLING_DISTRIBUTOR_SHARE"),
        ({"HANDLER": "not a reference"}, "HANDLER"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(changes, variable):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({**BASE, **changes})
    assert caught.value.variable == variable
    assert variable in str(caught.value)


def test_identity_based_connections_need_no_secret():
    env = {
        "TRIGGER_QUEUE": "t",
        "FALLBACK_SCHEDULE": "0 */5 * * * *",
        "AzureWebJobsStorage__accountName": "prodacct",
        "ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
    }
    s = Settings.from_env(env)
    assert s.storage.uses_identity
    assert s.storage.queue_url == "https://prodacct.queue.core.windows.net"
    assert s.account_name == "prodacct"
    assert s.servicebus.namespace == "ns.servicebus.windows.net"


def test_a_handler_that_cannot_be_imported_fails_at_start(monkeypatch):
    monkeypatch.setattr(runtime, "_settings", None)
    for k, v in {**BASE, "HANDLER": "no_such_module:handle"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(HandlerError, match="no_such_module"):
        runtime.load_settings()
    monkeypatch.setattr(runtime, "_settings", None)


@pytest.fixture
def saved_gc_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


async def test_the_services_raise_the_collectors_first_threshold_unless_told_not_to(configure, saved_gc_thresholds):
    gc.set_threshold(700, 10, 10)
    configure(GC_GEN0_THRESHOLD="0")
    assert gc.get_threshold() == (700, 10, 10)
    configure()
    assert gc.get_threshold() == (20_000, 10, 10), "the default"
    configure(GC_GEN0_THRESHOLD="5000")
    assert gc.get_threshold() == (5000, 10, 10)


@pytest.mark.parametrize(
    ("budget", "timeout", "refused"),
    [
        ("240", None, False),
        ("290", None, True),
        ("275", None, True),
        ("1700", "00:30:00", True),
        ("1600", "00:30:00", False),
        ("9999", "-1", False),
    ],
)
def test_a_drain_budget_without_a_margin_under_the_function_timeout_is_refused_at_start(
    monkeypatch, budget, timeout, refused
):
    """host.json says 5 minutes (an app setting may override it): the drain must stop taking messages at
    least 30 s (or a tenth of the timeout) before, or the host ends the worker with chunks in flight."""
    monkeypatch.setattr(runtime, "_settings", None)
    for k, v in {**BASE, "DRAIN_BUDGET_S": budget}.items():
        monkeypatch.setenv(k, v)
    if timeout is None:
        monkeypatch.delenv("AzureFunctionsJobHost__functionTimeout", raising=False)
    else:
        monkeypatch.setenv("AzureFunctionsJobHost__functionTimeout", timeout)
    try:
        if refused:
            with pytest.raises(SettingsError) as caught:
                runtime.load_settings()
            assert caught.value.variable == "DRAIN_BUDGET_S"
            assert "functionTimeout" in str(caught.value)
        else:
            assert runtime.load_settings().drain_budget_s == float(budget)
    finally:
        monkeypatch.setattr(runtime, "_settings", None)
