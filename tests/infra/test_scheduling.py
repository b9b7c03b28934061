"""The suite's xdist schedule (tests/scheduling.py): a test on a stack its file starts once shares that file's
worker, tests/hostile goes whole to one worker, and a node id a plugin repeats still runs each time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scheduling import group_of, unique

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a whole-suite collection in its own process (9 s)
def test_every_test_on_a_module_or_class_scoped_stack_is_scheduled_with_its_file(tmp_path: Path) -> None:
    probe = tmp_path / "scoped.txt"
    env = {**os.environ, "SCOPE_PROBE": str(probe)}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.scheduling", "-p", "no:cacheprovider"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    scoped = probe.read_text().split("\n")[:-1]
    files = {nodeid.split("::", 1)[0] for nodeid in scoped}
    assert "tests/host/test_http_triggers.py" in files, "the probe saw a known module-scoped stack"
    alone = sorted({f for f in files if any(group_of(n) == n for n in scoped if n.startswith(f + "::"))})
    assert not alone, f"add these files (or their directory) to tests/scheduling.py's FILE_DIRS or FILE_FILES: {alone}"


def test_units_are_the_hostile_directory_a_grouped_file_or_the_test_itself() -> None:
    assert group_of("tests/hostile/test_keys.py::test_a[x]") == "tests/hostile"
    assert group_of("tests/hostile/test_secrets.py::test_b") == "tests/hostile"
    assert group_of("tests/host/test_keys.py::test_c") == "tests/host/test_keys.py"
    assert group_of("tests/sim/test_conformance_bus.py::test_d[real]") == "tests/sim/test_conformance_bus.py"
    assert group_of("tests/sim/test_seeds.py::test_e[3]") == "tests/sim/test_seeds.py::test_e[3]"
    assert group_of("tests/app/test_x.py::Test::test_f") == "tests/app/test_x.py::Test::test_f"


def test_a_repeated_node_id_is_told_apart_and_keeps_its_unit() -> None:
    named = unique(["a.py::t", "a.py::t", "b.py::u", "a.py::t"])
    assert len(set(named)) == 4
    assert (named[0], named[2]) == ("a.py::t", "b.py::u")
    assert all(group_of(n) == "a.py::t" for n in (named[1], named[3]))
