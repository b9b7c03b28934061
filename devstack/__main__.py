"""`python -m devstack run`: Azurite, the Service Bus stand-in and the local function host, for `make run`.

Each runs in its own session, so Ctrl-C (or SIGTERM) reaches only this process, which then stops the host
first (it finishes in-flight work), then the broker, then Azurite, each by its own pid.
"""

from __future__ import annotations

import argparse
import io
import logging
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from devstack.azurite import AzuritePorts, azurite
from devstack.host import host
from devstack.identity import dev_token, tenant_notice_key
from devstack.procs import LOOPBACK, ManagedProcess, ServiceStartError, is_listening

log = logging.getLogger("devstack")

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".devstack"
TRACES_FILE = STATE / "traces.jsonl"
BROKER_CONFIG = ROOT / "emulators" / "servicebus" / "config.json"
BROKER_PORT = 5672
HOST_PORT = 7071
HOST_GRACE_S = 20.0
POLL_S = 0.2
TRY_IT = (
    "curl -X POST localhost:7071/api/batches -H 'Content-Type: application/x-ndjson' "
    "--data-binary @examples/transactions.ndjson"
)


@dataclass(frozen=True)
class PortNeed:
    port: int
    who: str


class Stop:
    """Set by SIGINT/SIGTERM; the main loop notices it between polls."""

    def __init__(self) -> None:
        self.requested: str | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = signal.Signals(signum).name


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="Azurite + Service Bus stand-in + local function host; Ctrl-C stops all")
    run.add_argument("--no-host", action="store_true", help="start Azurite and the broker only (for `func start`)")
    token = sub.add_parser("token", help="a bearer token for the local host's Easy Auth (TENANT_FROM=principal)")
    token.add_argument("tenant", help="the caller's tenant (its app role tenant.<TENANT>)")
    token.add_argument("--role", action="append", default=[], help="another app role, e.g. operator (repeatable)")
    token.add_argument("--expires-in-s", type=int, default=3600, help="lifetime in seconds (default 3600)")
    notice_key = sub.add_parser("notice-key", help="the key a tenant's completion notices are signed with")
    notice_key.add_argument("tenant")
    return parser.parse_args(argv)


def busy_ports(needs: Sequence[PortNeed]) -> list[PortNeed]:
    return [need for need in needs if is_listening(need.port, LOOPBACK)]


def port_needs(with_host: bool) -> list[PortNeed]:
    ports = AzuritePorts.default()
    needs = [
        PortNeed(ports.blob, "Azurite blob"),
        PortNeed(ports.queue, "Azurite queue"),
        PortNeed(ports.table, "Azurite table"),
        PortNeed(BROKER_PORT, "the Service Bus stand-in"),
    ]
    return [*needs, PortNeed(HOST_PORT, "the function host")] if with_host else needs


def ensure_local_settings() -> None:
    settings, sample = ROOT / "local.settings.json", ROOT / "local.settings.json.sample"
    if not settings.exists():
        shutil.copyfile(sample, settings)
        log.info("created local.settings.json from local.settings.json.sample")


def processes(with_host: bool) -> list[ManagedProcess]:
    from devstack.broker import broker

    stack = [
        azurite(STATE / "azurite", AzuritePorts.default(), STATE / "azurite.log"),
        broker(BROKER_CONFIG, BROKER_PORT, STATE / "servicebus.log", data_dir=STATE / "servicebus"),
    ]
    if with_host:
        # Spans of recent batches, for `python -m shared.cli trace BATCH_ID` (unless the environment exports
        # them to Application Insights or OTLP instead).
        traces = {"TRACES_FILE": str(TRACES_FILE)}
        stack.append(host(ROOT, HOST_PORT, STATE / "host.log", env=traces, grace_s=HOST_GRACE_S))
    for process in stack:
        process.new_session = True
    return stack


def start_all(stack: Sequence[ManagedProcess]) -> list[ManagedProcess]:
    started: list[ManagedProcess] = []
    for process in stack:
        try:
            process.start(timeout_s=60)
        except ServiceStartError:
            stop_all(started)
            raise
        started.append(process)
    return started


def stop_all(started: Sequence[ManagedProcess]) -> None:
    for process in reversed(started):
        log.info("stopping %s (pid %d)", process.name, process.pid)
        process.stop(grace_s=HOST_GRACE_S + 10 if process.name == "function host" else 10)


def follow(log_file: IO[str]) -> None:
    """Copy what the host wrote since last time to the terminal."""
    chunk = log_file.read()
    if chunk:
        sys.stdout.write(chunk)
        sys.stdout.flush()


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def open_at(path: Path, offset: int) -> IO[str]:
    log_file = path.open("rb")
    log_file.seek(offset)
    return io.TextIOWrapper(log_file, errors="replace")


def supervise(started: Sequence[ManagedProcess], stop: Stop, host_output: IO[str] | None) -> int:
    """Show the host's output until a signal (exit 0) or a child exits on its own (exit 1)."""
    while stop.requested is None:
        if host_output:
            follow(host_output)
        dead = next((p for p in started if not p.running()), None)
        if dead is not None:
            log.error("%s exited unexpectedly; last log lines:\n%s", dead.name, dead.tail())
            return 1
        time.sleep(POLL_S)
    log.info("%s received: stopping the function host, the broker and Azurite", stop.requested)
    return 0


def banner(with_host: bool) -> str:
    ports = AzuritePorts.default()
    lines = [
        "queue-drain local stack (logs and data in .devstack/):",
        f"  Azurite       blob {ports.blob}, queue {ports.queue}, table {ports.table}",
        f"  Service Bus   stand-in on {BROKER_PORT} ({BROKER_CONFIG.relative_to(ROOT)})",
    ]
    if with_host:
        lines += [f"  Functions     http://localhost:{HOST_PORT}/api", f"Try: {TRY_IT}"]
        lines += ["  A batch's trace: python -m shared.cli trace BATCH_ID"]
    else:
        lines += ["  Functions     not started: run `func start` in another terminal"]
    return "\n".join([*lines, "Ctrl-C stops everything."])


def run(with_host: bool) -> int:
    busy = busy_ports(port_needs(with_host))
    if busy:
        for need in busy:
            log.error(
                "port %d (for %s) is already in use: stop what holds it (another `make run`?)", need.port, need.who
            )
        return 1
    ensure_local_settings()
    stop = Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if with_host and shutil.which("func"):
        log.info("Core Tools found: `python -m devstack run --no-host` then `func start` uses the same services")
    host_log = STATE / "host.log"
    offset = log_size(host_log)  # the log is appended to: show only this run
    try:
        started = start_all(processes(with_host))
    except ServiceStartError as e:
        log.error("%s", e)
        return 1
    print(banner(with_host), flush=True)
    host_output = open_at(host_log, offset) if with_host else None
    try:
        return supervise(started, stop, host_output)
    finally:
        stop_all(started)
        if host_output:
            follow(host_output)  # the host's own shutdown lines
            host_output.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "token":
        print(dev_token(args.tenant, args.role, args.expires_in_s))
        return 0
    if args.command == "notice-key":
        try:
            print(tenant_notice_key(args.tenant))
        except ValueError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    logging.basicConfig(level=logging.INFO, format="devstack: %(message)s", stream=sys.stderr)
    return run(with_host=not args.no_host)


if __name__ == "__main__":
    sys.exit(main())
