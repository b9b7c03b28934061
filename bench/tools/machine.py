"""What the run ran on: CPU, cores, memory, OS, Python, Node, Azurite, and the commit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _output(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def details() -> dict[str, Any]:
    azurite = json.loads((ROOT / "package.json").read_text()).get("devDependencies", {}).get("azurite")
    # The run's own result files (bench/results) do not make the code it measured modified.
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"])
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "node": _output(["node", "--version"]),
        "azurite": azurite,
        "commit": _output(["git", "rev-parse", "HEAD"]),
        "tree_modified": bool(dirty),
    }


class LoadSampler:
    """The 1-minute load average every `every_s` while a run lasts: the machine is shared, so say how busy it was."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(round(os.getloadavg()[0], 2))
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(round(os.getloadavg()[0], 2))

    def summary(self) -> dict[str, Any]:
        s = self.samples
        return {
            "every_s": self.every_s,
            "samples": len(s),
            "mean": round(sum(s) / len(s), 2) if s else None,
            "max": max(s, default=None),
            "load_1min": s,
        }
