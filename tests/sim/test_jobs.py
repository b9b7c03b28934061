"""Seeds in parallel processes (`sim.pool`) print what one process prints: `python -m sim --jobs 2` the same failed
seeds' reports, fingerprints and feature reach as `--jobs 1`, in seed order; `python -m sim.mutants --jobs 2` the
same catching seeds, and `--verify` says whether a row of the table still holds. A mutant put back in this process
before the run is in the workers too (they are forked), which is how these seeds are made to fail."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.__main__ import main as simulate
from sim.mutants.hunting import BY_NAME
from sim.mutants.runner import main as mutants
from sim.mutants.table import Result, load

# random seeds 1 and 2 fail with it in place, 1 is its fastest catching seed (tests/sim/test_mutants.py), 0 passes;
# a random seed takes about a third of a second
FAST = "transient-recorded-ok"


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = simulate(argv)
    out = capsys.readouterr().out
    # the family line's timings are the only thing that may differ
    return code, re.sub(r" in [0-9.]+ s \(.*\), ", " in - s, ", out)


def test_two_processes_print_what_one_prints_failed_seeds_in_seed_order(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--family", "random", "--seeds", "3", "--digests"]
    with BY_NAME[FAST].patch():
        alone, one = _printed(capsys, [*argv, "--jobs", "1"])
        beside, two = _printed(capsys, [*argv, "--jobs", "2"])
    assert (alone, beside) == (1, 1)
    assert two == one
    assert re.findall(r"^random seed (\d): [0-9a-f]{16}$", one, re.M) == ["0", "1", "2"]
    assert "seed 1: FAILED" in one
    assert "random: 3 seed(s) in - s, " in one
    assert "2 failed: [1, 2]" in one


def test_two_processes_stop_at_the_first_failed_seed(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--family", "random", "--seeds", "3", "--stop", "--jobs", "2"]
    with BY_NAME[FAST].patch():
        code, out = _printed(capsys, argv)
    assert code == 1
    assert "random: 2 seed(s) in - s, 1 failed: [1]" in out


@pytest.mark.slow  # seconds of seeds in two pairs of processes: `make test`, not test-fast
def test_today_s_code_gives_the_same_fingerprints_and_reach_in_two_processes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--family", "submit", "--seeds", "3", "--digests"]
    alone, one = _printed(capsys, [*argv, "--jobs", "1"])
    beside, two = _printed(capsys, [*argv, "--jobs", "2"])
    assert (alone, beside) == (0, 0)
    assert two == one
    assert "feature reach" in one
    assert len(set(re.findall(r"^submit seed \d: ([0-9a-f]{16})$", one, re.M))) == 3


@pytest.mark.slow  # seconds of seeds in two pairs of processes: `make test`, not test-fast
def test_the_runner_in_two_processes_finds_the_seed_one_process_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for jobs in ("1", "2"):
        assert mutants(["--only", FAST, "--seeds", "4", "--jobs", jobs, "--json", str(tmp_path / jobs)]) == 0
    one, two = load([tmp_path / "1"])[FAST], load([tmp_path / "2"])[FAST]
    assert (one.seed, one.tried, one.family) == (two.seed, two.tried, two.family) == (1, 2, "random")
    assert one.violation == two.violation


def _measured(path: Path, seed: int | None, tried: int) -> Path:
    path.write_text(Result(FAST, "random", tried, seed, "as measured", 0, "abc1234").line() + "\n")
    return path


@pytest.mark.slow  # seconds of seeds in two pairs of processes: `make test`, not test-fast
def test_verify_reproduces_a_row_on_its_seed_and_writes_nothing_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured, out = _measured(tmp_path / "measured.jsonl", 1, 2), tmp_path / "out.jsonl"
    assert mutants(["--only", FAST, "--verify", str(measured), "--jobs", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{FAST} [" in printed
    assert "reproduced by seed 1 (2 seeds)" in printed
    assert "1 row(s): 1 reproduced" in printed
    assert not out.exists()


def test_verify_says_a_row_moved_and_records_its_new_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    measured, out = _measured(tmp_path / "measured.jsonl", 0, 1), tmp_path / "out.jsonl"
    assert mutants(["--only", FAST, "--verify", str(measured), "--jobs", "2", "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "MOVED: seed 0 no longer catches it; seed 1 (2 seeds)" in printed
    assert [json.loads(line)["seed"] for line in out.read_text().splitlines()] == [1]


def test_verify_says_a_row_is_lost_when_no_seed_of_its_budget_catches_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured = _measured(tmp_path / "measured.jsonl", 0, 1)
    assert mutants(["--only", FAST, "--verify", str(measured), "--seeds", "1", "--jobs", "2"]) == 1
    assert "LOST: seed 0 no longer catches it, nor any of the first 1 seeds" in capsys.readouterr().out
