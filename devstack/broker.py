"""The Service Bus stand-in (emulators/servicebus) as a child process on a loopback port."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from devstack.procs import LOOPBACK, ManagedProcess, python_module

ROOT = Path(__file__).resolve().parent.parent

# The official emulator's published development credentials; the stand-in accepts exactly these.
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
NAMESPACE = "sbemulatorns"


def connection_string(port: int, host: str = "localhost") -> str:
    """The emulator connection string: plain AMQP (no TLS) on `host:port`, development key."""
    return (
        f"Endpoint=sb://{host}:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};UseDevelopmentEmulator=true;"
    )


def broker(
    config_path: Path,
    port: int,
    log_path: Path,
    *,
    data_dir: Path | None = None,
    auto_create_queues: bool = False,
) -> ManagedProcess:
    """A stand-in process (not yet started) serving the queues of an emulator-format config file."""
    args = ["--config", str(config_path), "--host", LOOPBACK, "--port", str(port)]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    if auto_create_queues:
        args.append("--auto-create-queues")
    return ManagedProcess("servicebus", python_module("emulators.servicebus", *args), [port], log_path, cwd=ROOT)


def write_config(path: Path, queues: Mapping[str, Mapping[str, object]]) -> Path:
    """Write an emulator-format Config.json with these queues (name → `Properties` in the emulator's field names)."""
    document = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NAMESPACE,
                    "Queues": [{"Name": name, "Properties": dict(properties)} for name, properties in queues.items()],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path
