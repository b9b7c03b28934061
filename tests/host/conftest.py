"""Fixtures for the local function host: start real host processes on free ports against test apps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.host import host
from devstack.procs import ManagedProcess, free_port

APPS = Path(__file__).resolve().parent / "apps"


@dataclass
class RunningHost:
    process: ManagedProcess
    port: int
    markers: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float = 15.0, count: int = 1) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            log = self.log()
            if log.count(text) >= count:
                return log
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear {count}x in the host log within {timeout_s} s:\n{self.log()}")


StartHost = Callable[..., RunningHost]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class HostLauncher:
    """Starts hosts with their logs and marker folders under one directory, and stops them all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[ManagedProcess] = []

    def start(self, app: str | Path, env: Mapping[str, str] | None = None, grace_s: float | None = None) -> RunningHost:
        """Start a host on `app`: a folder under tests/host/apps, or any app folder given as a Path."""
        index = len(self.started)
        port = free_port()
        markers = self.root / f"markers-{index}"
        markers.mkdir()
        full_env = {"TEST_MARKER_DIR": str(markers), **(env or {})}
        app_dir = app if isinstance(app, Path) else APPS / app
        process = host(app_dir, port, self.root / f"host-{index}.log", env=full_env, grace_s=grace_s)
        self.started.append(process)
        process.start(timeout_s=60)
        return RunningHost(process, port, markers)

    def stop_all(self) -> None:
        for process in reversed(self.started):
            process.stop(grace_s=30)


@pytest.fixture
def start_host(tmp_path: Path) -> Iterator[StartHost]:
    """Start the host on a test app (a folder under tests/host/apps); stopped at the end of the test."""
    launcher = HostLauncher(tmp_path)
    yield launcher.start
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLauncher]:
    """Hosts shared by the tests of one module (for tests that only read from them)."""
    launcher = HostLauncher(tmp_path_factory.mktemp("hosts"))
    yield launcher
    launcher.stop_all()
