"""The local services of one benchmark run, each a separate process on free loopback ports, stopped by pid."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from devstack import broker as sb
from devstack.azurite import AzuritePorts, azurite, connection_string
from devstack.host import ROOT, host
from devstack.procs import ManagedProcess, free_port, python_module

log = logging.getLogger(__name__)

TRIGGER_PROPERTIES = {"LockDuration": "PT1M", "MaxDeliveryCount": 10, "DefaultMessageTimeToLive": "PT1H"}


@dataclass
class Stack:
    """Azurite and the Service Bus stand-in, plus whatever hosts and peer processes a phase starts."""

    run_dir: Path
    trigger_queues: Iterable[str]
    storage: str = ""
    servicebus: str = ""
    started: list[ManagedProcess] = field(default_factory=list)

    def start(self) -> Stack:
        ports = AzuritePorts.free()
        self._start(azurite(self.run_dir / "azurite", ports, self.run_dir / "azurite.log"), timeout_s=60)
        self.storage = connection_string(ports)
        port = free_port()
        config = sb.write_config(self.run_dir / "servicebus.json", {q: TRIGGER_PROPERTIES for q in self.trigger_queues})
        self._start(sb.broker(config, port, self.run_dir / "servicebus.log"), timeout_s=30)
        self.servicebus = sb.connection_string(port)
        return self

    def _start(self, process: ManagedProcess, timeout_s: float) -> ManagedProcess:
        process.start(timeout_s=timeout_s)
        self.started.append(process)
        return process

    def host(self, name: str, env: Mapping[str, str], root: Path = ROOT) -> tuple[ManagedProcess, int]:
        """The local function host running the real function_app.py with these app settings; `root`: another
        checkout's (a change's parent, measured in the same run), its own packages rather than this one's."""
        port = free_port()
        full_env = {
            "AzureWebJobsStorage": self.storage,
            "ServiceBusConnection": self.servicebus,
            "FUNCTIONS_WORKER_RUNTIME": "python",
            "AzureFunctionsWebHost__hostid": name,
            **env,
        }
        process = host(root, port, self.run_dir / f"{name}.log", env=full_env, grace_s=5)
        if root != ROOT:
            process = replace(process, env={**(process.env or {}), "PYTHONPATH": str(root)}, cwd=root)
        return self._start(process, timeout_s=90), port

    def peer(self, kind: str, queues: Iterable[str], summary: Path, record: Path | None) -> ManagedProcess:
        env = {**os.environ, "BENCH_STORAGE": self.storage, "PYTHONPATH": str(ROOT)}
        if record is not None:
            env["BENCH_RECORD_FILE"] = str(record)
        argv = python_module("bench.peers.process", "serve", "--peer", kind, "--queues", ",".join(queues))
        argv += ["--summary", str(summary)]
        process = ManagedProcess(f"peer {kind}", argv, [], self.run_dir / f"peer-{kind}.log", env=env, cwd=ROOT)
        return self._start(process, timeout_s=10)

    def stop(self, process: ManagedProcess) -> None:
        process.stop(grace_s=20)
        if process in self.started:
            self.started.remove(process)

    def stop_all(self) -> None:
        for process in reversed(list(self.started)):
            self.stop(process)
