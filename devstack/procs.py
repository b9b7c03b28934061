"""Start local services as child processes, wait until they listen, stop them by their own pid."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class ServiceStartError(RuntimeError):
    """Raised when a local service exits or does not listen before its start deadline."""


def free_port() -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def is_listening(port: int, host: str = LOOPBACK, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass
class ManagedProcess:
    """One child process with its log file; `stop()` signals only this pid."""

    name: str
    argv: Sequence[str]
    ports: Sequence[int]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    # Own session: a Ctrl-C in the terminal reaches only the parent, which then stops children in order.
    new_session: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            list(self.argv),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.cwd,
            start_new_session=self.new_session,
        )
        self.wait_listening(timeout_s)
        log.info("%s started: pid %d, ports %s, log %s", self.name, self.proc.pid, list(self.ports), self.log_path)
        return self

    def wait_listening(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServiceStartError(
                    f"{self.name} exited with code {self.proc.returncode} before listening; "
                    f"last log lines:\n{self.tail()}"
                )
            if all(is_listening(p) for p in self.ports):
                return
            time.sleep(0.05)
        self.stop()
        raise ServiceStartError(
            f"{self.name} did not listen on {list(self.ports)} in {timeout_s:.0f} s:\n{self.tail()}"
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace_s`; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing", self.name, self.proc.pid, grace_s)
                self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL this pid at once (a crash, for fault tests)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(10)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args` with the current interpreter."""
    return [sys.executable, "-m", module, *args]
