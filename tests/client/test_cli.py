"""`queue-drain`, the client's command line, against the real app in the local host: every command a user needs,
the URL, key and token from the environment only, a question before a cancel or a replay of everything; and
`pip install ./client` in a fresh virtual environment gives the command."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from queue_drain_client import cli

from tests.faults.stack import Stack, started

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = {"FAULT_CHUNK_DELAY_S": "0.5", "CHUNK_MAX_ITEMS": "100", "CHUNK_CONCURRENCY": "2", "MAX_ITEMS": "20000"}
    with started(tmp_path_factory.mktemp("cli"), settings) as found:
        yield found


class Terminal(io.StringIO):
    """A stdin a person answers at."""

    def isatty(self) -> bool:
        return True


class Ran:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


def run(url: str, *argv: str, stdin: io.StringIO | None = None, **env: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), env={"QUEUE_DRAIN_URL": url, **env}, streams=(stdin or io.StringIO(), out, err))
    return Ran(code, out.getvalue(), err.getvalue())


def accepted(ran: Ran) -> str:
    found = re.match(r"accepted batch ([0-9a-f]{32}): ", ran.out)
    assert found, (ran.out, ran.err)
    return found[1]


def ndjson(tmp_path: Path, count: int, tag: str) -> Path:
    path = tmp_path / f"{tag}.ndjson"
    path.write_text("".join(json.dumps({"id": f"{tag}-{i}"}) + "\n" for i in range(count)))
    return path


def test_submit_with_its_options_then_status_list_wait_and_results(stack: Stack, tmp_path: Path) -> None:
    url = stack.live_host().url
    sent = run(
        url, "submit", str(ndjson(tmp_path, 150, "s")), "--tenant", "acme", "--priority", "high",
        "--expires-in-s", "3600", "--max-failed-fraction", "0.5", "--label", "order=po-1", "--wait",
    )  # fmt: skip
    assert sent.code == 0, sent.err
    batch_id = accepted(sent)
    assert f"batch {batch_id}: completed" in sent.out
    assert "150 succeeded, 0 failed of 150" in sent.out
    status = run(url, "status", batch_id).json()
    assert (status["status"], status["metadata"], status["lane"]["priority"]) == (
        "completed",
        {"order": "po-1"},
        "high",
    )
    assert status["max_failed_fraction"] == 0.5
    listed = run(url, "list", "--tenant", "acme", "--status", "completed", "--limit", "5").json()
    assert [b["batch_id"] for b in listed] == [batch_id]
    waited = run(url, "wait", batch_id)
    assert f"batch {batch_id}: completed" in waited.out
    lines = run(url, "results", batch_id).out.splitlines()
    assert sorted(json.loads(line)["position"] for line in lines) == list(range(150))
    assert run(url, "results", batch_id, "--failed").out == ""
    assert run(url, "queues").json()["partitions"]
    assert "parked" in run(url, "poison").json()


def test_a_cancel_asks_first_and_does_nothing_unless_answered_yes(stack: Stack, tmp_path: Path) -> None:
    url = stack.live_host().url
    batch_id = accepted(run(url, "submit", str(ndjson(tmp_path, 5000, "c"))))
    unasked = run(url, "cancel", batch_id)
    assert unasked.code == 2
    assert "pass --yes" in unasked.err
    declined = run(url, "cancel", batch_id, stdin=Terminal("n\n"))
    assert declined.code == 2
    assert "[y/N]" in declined.err
    assert run(url, "status", batch_id).json()["status"] not in {"cancelling", "cancelled"}
    answered = run(url, "cancel", batch_id, stdin=Terminal("y\n"))
    assert answered.code == 0, answered.err
    assert answered.json()["status"] in {"cancelling", "cancelled"}
    assert run(url, "cancel", batch_id, "--yes").code == 0
    assert run(url, "wait", batch_id).out.startswith(f"batch {batch_id}: cancelled")


def test_replaying_everything_asks_first_and_a_replay_names_what_it_replays(stack: Stack) -> None:
    url = stack.live_host().url
    unasked = run(url, "replay", "--all")
    assert unasked.code == 2
    assert "pass --yes" in unasked.err
    assert run(url, "replay").code == 2, "what to replay is always named"
    done = run(url, "replay", "--all", "--yes")
    assert done.code == 0, done.err
    assert done.json()["replayed"] == 0


def test_the_key_and_token_come_from_the_environment_never_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(401, json={"error": {"code": "unauthenticated", "message": "no token"}})

    class Scripted(cli.Client):
        def __init__(self, url: str, key: str | None = None, **options: Any) -> None:
            super().__init__(url, key, transport=httpx.MockTransport(answer), **options)

    monkeypatch.setattr(cli, "Client", Scripted)
    refused = run("http://app.test", "queues", QUEUE_DRAIN_KEY="k-1", QUEUE_DRAIN_TOKEN="t-1")
    assert refused.code == 1
    assert refused.err == "error: 401: no token\n"
    assert seen[0].headers["x-functions-key"] == "k-1"
    assert seen[0].headers["authorization"] == "Bearer t-1"
    assert run("http://app.test", "--key", "k-1", "queues").code == 2, "no --key option: shells keep history"


def test_the_console_script_is_declared_and_resolves_to_the_cli() -> None:
    declared = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared == {"queue-drain": "queue_drain_client.cli:main"}
    assert callable(cli.main)


@pytest.mark.slow
def test_pip_install_of_the_client_gives_the_queue_drain_command(stack: Stack, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    source = tmp_path / "client"  # a copy: setuptools builds in the source tree (build/), not in the checkout
    shutil.copytree(ROOT / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(source)], capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stderr
    command = env_dir / "bin" / "queue-drain"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.strip().startswith("queue-drain ")
    queues = subprocess.run(
        [str(command), "queues"], capture_output=True, text=True, timeout=120,
        env={"QUEUE_DRAIN_URL": stack.live_host().url, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert queues.returncode == 0, queues.stderr
    assert "partitions" in json.loads(queues.stdout)
    assert sys.executable != str(python)
