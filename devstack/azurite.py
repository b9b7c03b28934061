"""Azurite from the project's pinned npm dependency, on free loopback ports."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from devstack.procs import LOOPBACK, ManagedProcess, ServiceStartError, free_port

ROOT = Path(__file__).resolve().parent.parent

# Azurite's documented development account (public, the same on every machine).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class AzuritePorts:
    blob: int
    queue: int
    table: int

    @classmethod
    def free(cls) -> AzuritePorts:
        return cls(free_port(), free_port(), free_port())

    @classmethod
    def default(cls) -> AzuritePorts:
        return cls(10000, 10001, 10002)


def connection_string(ports: AzuritePorts) -> str:
    base = f"http://{LOOPBACK}"
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={base}:{ports.blob}/{ACCOUNT};"
        f"QueueEndpoint={base}:{ports.queue}/{ACCOUNT};"
        f"TableEndpoint={base}:{ports.table}/{ACCOUNT};"
    )


def azurite_binary() -> Path:
    """The pinned Azurite in node_modules; a clear error if `npm ci` has not run."""
    path = ROOT / "node_modules" / ".bin" / "azurite"
    if not path.exists():
        raise ServiceStartError(f"Azurite is not installed at {path.relative_to(ROOT)}: run `npm ci` (make setup)")
    if shutil.which("node") is None:
        raise ServiceStartError("node is not on PATH; Azurite needs Node.js 20")
    return path


def azurite(data_dir: Path, ports: AzuritePorts, log_path: Path) -> ManagedProcess:
    """An Azurite process (not yet started) serving blobs and queues from `data_dir`."""
    argv = [
        str(azurite_binary()),
        "--disableTelemetry",
        "--skipApiVersionCheck",
        "--location",
        str(data_dir),
        "--blobHost",
        LOOPBACK,
        "--blobPort",
        str(ports.blob),
        "--queueHost",
        LOOPBACK,
        "--queuePort",
        str(ports.queue),
        "--tableHost",
        LOOPBACK,
        "--tablePort",
        str(ports.table),
    ]
    data_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    return ManagedProcess("azurite", argv, [ports.blob, ports.queue, ports.table], log_path, env=env)
