"""The README's quickstart, run exactly as written against the real app in the local host (its default handler,
billing): the curl walk-through and the first Python block, taken from README.md by their fences, each end with
a `completed` batch whose every item succeeded. Only the address changes: the README's `localhost:7071` is this
test's host."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.host import ROOT
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost, wait_until
from tests.host.test_function_app import app_settings

README = (ROOT / "README.md").read_text()
FINAL = {"completed", "completed_with_failures", "cancelled", "failed", "expired"}
# The walk-through's batch id: the first line of the shell block sets it.
BATCH_ID = re.compile(r'"batch_id":"([0-9a-f]+)"')


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", README, flags=re.MULTILINE | re.DOTALL)


def walk_through() -> str:
    blocks = [b for b in fenced("sh") if "curl" in b]
    assert blocks, "the README has a curl walk-through"
    return blocks[0]


def first_python_block() -> str:
    blocks = fenced("python")
    assert blocks, "the README has a Python block"
    return blocks[0]


@pytest.fixture
def readme_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    env = app_settings(azurite_service, servicebus_service, names, "readme")
    assert "HANDLER" not in env, "the default handler, as under make run"
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env)
    finally:
        launcher.stop_all()


def here(text: str, host: RunningHost) -> str:
    return text.replace("http://localhost:7071", host.base_url).replace("localhost:7071", f"127.0.0.1:{host.port}")


def status(host: RunningHost, batch_id: str) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(f"{host.base_url}/api/batches/{batch_id}", timeout=30).json()
    return found


def final(host: RunningHost, batch_id: str) -> dict[str, Any]:
    wait_until(lambda: status(host, batch_id)["status"] in FINAL, 120, f"batch {batch_id} final")
    return status(host, batch_id)


def run(command: list[str], script: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*command, script], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


@pytest.mark.slow
def test_the_readmes_curl_walk_through_ends_completed_with_every_item_succeeded(readme_host: RunningHost) -> None:
    script = walk_through()
    shown = re.search(r'^# (\{"batch_id".*)$', script, flags=re.MULTILINE)
    assert shown, "the walk-through shows the submit's answer"
    output = run(["bash", "-euo", "pipefail", "-c"], here(script, readme_host))
    # The submit's answer, shown on stderr by the walk-through's first command.
    submitted = json.loads(next(line for line in output.stderr.splitlines() if line.startswith('{"batch_id"')))
    batch_id = submitted["batch_id"]
    assert BATCH_ID.findall(output.stdout)[0] == batch_id, "the next commands read the batch the first submitted"
    done = final(readme_host, batch_id)
    assert done["status"] == "completed", done
    assert done["items"]["succeeded"] == done["items"]["total"] == submitted["items"]
    # What the README shows of the submit's answer is what the app answers (ids and the ellipses aside).
    for key in ("items", "chunks", "trigger"):
        assert f'"{key}":{json.dumps(submitted[key])}' in shown.group(1), (key, submitted[key], shown.group(1))


@pytest.mark.slow
def test_the_readmes_first_python_block_ends_completed_with_every_item_succeeded(readme_host: RunningHost) -> None:
    output = run([sys.executable, "-c"], here(first_python_block(), readme_host)).stdout
    assert output.split()[:1] == ["completed"], output
    listed = httpx.get(f"{readme_host.base_url}/api/batches", timeout=30).json()["batches"]
    assert len(listed) == 1, listed
    done = final(readme_host, listed[0]["batch_id"])
    assert done["status"] == "completed", done
    assert done["items"]["succeeded"] == done["items"]["total"] > 0, done
