"""Runs the SDK's queue tests against one fresh stand-in: queues from the preparers, results per test.

Harness-only adjustments, each standing in for something Azure provides: the namespace is
`localhost:PORT`, and a client built from a namespace name plus credential is told `use_tls=False` (the
connection-string form already says so through `UseDevelopmentEmulator=true`). Tests listed in
`emulators.servicebus.conformance.scope.OUT_OF_SCOPE` are deselected and reported with their reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from servicebus_preparer import QUEUES, STAND_IN  # type: ignore[import-not-found]  # a sibling in the run

from devstack.broker import broker, connection_string, write_config
from devstack.procs import free_port
from emulators.servicebus.conformance.scope import OUT_OF_SCOPE

WORK_DIR = Path(__file__).resolve().parent
_results: dict[str, str] = {}
_out_of_scope: dict[str, str] = {}


def _plain_tcp(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("use_tls", False)
        init(self, *args, **kwargs)

    return run


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("liveTest", "live_test_only", "playback_test_only"):
        config.addinivalue_line("markers", f"{marker}: a marker of the SDK's tests")
    ServiceBusClient.__init__ = _plain_tcp(ServiceBusClient.__init__)  # type: ignore[method-assign]
    AsyncServiceBusClient.__init__ = _plain_tcp(AsyncServiceBusClient.__init__)  # type: ignore[method-assign]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        name = item.name.split("[")[0]
        if name in OUT_OF_SCOPE:
            _out_of_scope[f"{Path(item.path).name}::{name}"] = OUT_OF_SCOPE[name]
            dropped.append(item)
        else:
            kept.append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)


@pytest.fixture(scope="session", autouse=True)
def stand_in() -> Iterator[None]:
    port = free_port()
    config = write_config(WORK_DIR / "config.json", QUEUES)
    process = broker(config, port, WORK_DIR / "servicebus.log").start(timeout_s=30)
    STAND_IN.port, STAND_IN.connection_string = port, connection_string(port)
    try:
        yield
    finally:
        process.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    key = f"{Path(item.path).name}::{item.name}"
    if report.failed:
        _results[key] = "FAILED"
    elif report.skipped:  # Microsoft's own skip marks act at setup
        _results.setdefault(key, "SKIPPED")
    elif report.when == "call":
        _results.setdefault(key, "PASSED")
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    write = terminalreporter.write_line
    write("")
    write("=== azure-servicebus queue tests against the stand-in ===")
    for key in sorted(_results):
        write(f"{_results[key]:8} {key}")
    for key in sorted(_out_of_scope):
        write(f"{'OUT':8} {key}  ({_out_of_scope[key]})")
    counts = {state: sum(1 for v in _results.values() if v == state) for state in ("PASSED", "FAILED", "SKIPPED")}
    write(
        f"passed {counts['PASSED']}, failed {counts['FAILED']}, skipped {counts['SKIPPED']}, "
        f"out of scope {len(_out_of_scope)}"
    )
