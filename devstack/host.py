"""The local function host (`python -m emulators.functions`) as a managed child process."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from devstack.procs import ManagedProcess, python_module

ROOT = Path(__file__).resolve().parent.parent


def host(
    app_dir: Path,
    port: int,
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    grace_s: float | None = None,
) -> ManagedProcess:
    """A host process (not yet started) serving `app_dir`'s function_app.py on 127.0.0.1:`port`.

    `env` is added to this process's environment; like Core Tools, the host lets a variable that is
    already set win over the same name in the app's local.settings.json.
    """
    args = ["--app-dir", str(app_dir), "--port", str(port)]
    if grace_s is not None:
        args += ["--grace-period", str(grace_s)]
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH", "")) if p)
    return ManagedProcess("function host", python_module("emulators.functions", *args), [port], log_path, env=full_env)
