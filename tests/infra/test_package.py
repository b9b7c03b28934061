"""`make package` (issue 14): the zip `func azure functionapp publish` would send, installed from
requirements.txt alone into a clean venv and indexed there with the template's settings; and the lock that
holds the remote build to the versions CI tested."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devstack.lock import closure, parse_lock, top_level
from devstack.package import ROOT, ignored, included_files


@pytest.mark.parametrize(
    ("path", "rules", "expected"),
    [
        ("tests/app/test_x.py", ["tests"], True),
        ("shared/tests.py", ["tests"], False),
        ("README.md", ["*.md"], True),
        ("docs/design.md", ["*.md"], True),
        ("shared/x.py", ["__pycache__"], False),
        ("shared/__pycache__/x.pyc", ["__pycache__"], True),
        ("local.settings.json", ["local.settings.json"], True),
        ("local.settings.json.sample", ["local.settings.json"], False),
        ("infra/main.bicep", ["infra/"], True),
        ("infra", ["infra/"], False),
        (".github/workflows/ci.yml", [".git*"], True),
    ],
)
def test_funcignore_patterns_match_as_gitignore_does(path: str, rules: list[str], expected: bool) -> None:
    assert ignored(path, rules) is expected


def test_the_package_holds_the_app_and_nothing_for_development() -> None:
    files = set(included_files(ROOT))
    assert {"function_app.py", "host.json", "requirements.txt", "requirements.lock", "shared/core/settings.py"} <= files
    assert "shared/static/dashboard.html" in files, "the operator page ships with the app"
    kept_out = ("tests/", "sim/", "emulators/", "devstack/", "bench/", "node_modules/", ".venv/", "infra/", ".github/")
    assert not [f for f in files if f.startswith(kept_out) or f.endswith(".md") or f == "local.settings.json"]


def test_the_lock_pins_every_runtime_package_at_the_version_tested_here() -> None:
    assert "-c requirements.lock" in (ROOT / "requirements.txt").read_text().splitlines()
    locked = parse_lock((ROOT / "requirements.lock").read_text())
    installed = closure(top_level(ROOT / "requirements.txt"))
    assert installed == locked, "regenerate: python -m devstack.lock > requirements.lock"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_make_package_builds_a_zip_that_installs_and_indexes_in_a_clean_venv(tmp_path: Path) -> None:
    """The whole `make package` step: pip installs requirements.txt (with its lock) into a fresh venv, so it
    needs the package index, as the remote build on Azure does."""
    out = tmp_path / "queue-drain.zip"
    done = subprocess.run(
        [sys.executable, "-m", "devstack.package", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imports and indexes its 15 functions in a clean venv" in done.stderr
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    assert "function_app.py" in names
    development = ("sim/", "tests/", "bench/", "emulators/", "devstack/", "client/", "node_modules/", "infra/")
    assert not [n for n in names if n.startswith(development)], "the zip holds only what the app runs"
