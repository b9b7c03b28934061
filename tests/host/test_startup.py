"""What the host says and does when it cannot start, or can start only part of the app."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from devstack.host import ROOT
from devstack.procs import python_module
from tests.host.conftest import APPS, HostLauncher, RunningHost


def run_host(app: str, port: int, env: dict[str, str] | None = None, timeout_s: float = 60) -> tuple[int, str]:
    """Run the host to its exit; returns its exit code and its whole output."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    for key, value in list(full_env.items()):
        if value == "<unset>":
            del full_env[key]
    argv = python_module("emulators.functions", "--app-dir", str(APPS / app), "--port", str(port))
    done = subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=timeout_s, check=False)
    return done.returncode, done.stdout + done.stderr


def test_an_app_that_raises_at_import_stops_the_host_with_the_error_and_a_nonzero_exit(tmp_path: Path) -> None:
    code, output = run_host("broken_app", 0)
    assert code == 1
    assert (
        "The host could not start: importing function_app.py failed: RuntimeError: REQUIRED_SETTING is not set"
        in output
    )
    assert 'function_app.py", line' in output


def test_a_taken_port_is_reported_clearly() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = run_host("http_app", port)
    assert code == 1
    assert f"Port {port} is unavailable" in output


def test_timers_without_azure_web_jobs_storage_refuse_to_start() -> None:
    env = {"AzureWebJobsStorage": "<unset>", "TICK_SCHEDULE": "*/1 * * * * *", "TEST_MARKER_DIR": "."}
    code, output = run_host("timer_app", 0, env)
    assert code == 1
    assert "Missing value for AzureWebJobsStorage" in output


def test_a_function_with_an_unsupported_binding_is_listed_in_error_and_the_rest_runs(
    module_hosts: HostLauncher,
) -> None:
    host: RunningHost = module_hosts.start("http_app")
    log = host.log()
    assert "with_blob: The function is in error: binding 'data' of type 'blob' is not supported" in log
    assert "echo: [POST,PUT]" in log
