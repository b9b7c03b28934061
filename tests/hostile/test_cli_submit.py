"""`python -m shared.cli submit FILE --follow`, run as its own process against the local host of the real app:
the client package's progress bar (rich's), then a summary and exit code 0; a bad file, key or URL is a clear
message and non-zero."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devstack.host import ROOT
from tests.hostile.conftest import SUBMIT_KEY, HostileStack, wait_status

pytestmark = pytest.mark.hostile

EXAMPLE = ROOT / "examples" / "transactions.ndjson"


def test_submit_follow_shows_progress_until_complete_then_a_summary(hostile: HostileStack) -> None:
    done = hostile.cli("submit", str(EXAMPLE), "--follow", "--timeout", "120")
    assert done.returncode == 0, done.stderr
    accepted = re.search(
        r"accepted batch ([0-9a-f]{32}): 1000 items in 2 chunks \(trigger (?:published|deferred)\)", done.stdout
    )
    assert accepted, done.stdout
    batch_id = accepted.group(1)
    assert re.search(r"completed +━+ 1000/1000 ", done.stdout), "rich's bar (through the client) ends full"
    assert f"batch {batch_id}: completed\n" in done.stdout
    assert "  items   1000 succeeded, 0 failed of 1000" in done.stdout
    assert "  chunks  2 done, 0 with parked items, of 2" in done.stdout
    assert done.stderr == ""
    ran = hostile.executions()
    assert all(ran[f"tx-{n:05d}"] == 1 for n in range(1000)), "every transaction was handled exactly once"
    assert wait_status(hostile, batch_id, {"completed"})["items"]["succeeded"] == 1000


def test_submit_with_an_idempotency_key_twice_is_one_batch(hostile: HostileStack, tmp_path: Path) -> None:
    sales = tmp_path / "two.ndjson"
    sales.write_text('{"id": "idem-1"}\n{"id": "idem-2"}\n')
    first = hostile.cli("submit", str(sales), "--idempotency-key", f"k-{tmp_path.name}", key=SUBMIT_KEY)
    again = hostile.cli("submit", str(sales), "--idempotency-key", f"k-{tmp_path.name}", key=SUBMIT_KEY)
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    assert first.stdout == again.stdout, "the same key answers the same batch"
    hostile.wait_drained()
    assert hostile.executions()["idem-1"] == 1


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"id": 1}\n{"id": \n', "error: 400: line 2 is not valid JSON"),
        (b"", "error: 400: the batch has no items"),
        (b'{"id": "\xff"}\n', "error: 400: body is not valid UTF-8"),
        (
            b"[" * 100 + b"]" * 100,
            "error: 400: line 1 nests 100 levels deep, more than MAX_JSON_DEPTH (MAX_JSON_DEPTH)",
        ),
    ],
)
def test_a_bad_file_is_refused_with_the_apis_reason_and_exit_code_1(
    hostile: HostileStack, tmp_path: Path, content: bytes, says: str
) -> None:
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(content)
    done = hostile.cli("submit", str(bad), "--follow")
    assert done.returncode == 1
    assert done.stderr.startswith(says), done.stderr
    assert done.stdout == ""


def test_a_missing_file_is_exit_code_2_naming_it(hostile: HostileStack, tmp_path: Path) -> None:
    done = hostile.cli("submit", str(tmp_path / "nothing.ndjson"), "--follow")
    assert done.returncode == 2
    assert "No such file or directory" in done.stderr
    assert "nothing.ndjson" in done.stderr


def test_a_wrong_key_says_so(hostile: HostileStack) -> None:
    done = hostile.cli("submit", str(EXAMPLE), "--follow", key="not-a-key")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: 401: the function key is missing or wrong (pass a valid one with --key)"


def test_an_unreachable_host_says_so(hostile: HostileStack) -> None:
    done = hostile.cli("--url", "http://127.0.0.1:9", "submit", str(EXAMPLE))
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot reach http://127.0.0.1:9"), done.stderr
