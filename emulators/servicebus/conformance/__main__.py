"""`python -m emulators.servicebus.conformance`: fetch the SDK's queue tests and run them against the stand-in.

The tests come from the source distribution of the azure-servicebus version pinned in `requirements.lock`
(pip downloads it once into `.devstack/conformance-servicebus/`). Each run copies the two queue test files
and their helpers into a fresh directory beside the harness (`harness/`), runs pytest there and prints one
line per test. The exit status is 0 only if every in-scope test passed.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
HARNESS = Path(__file__).resolve().parent / "harness"
CACHE = ROOT / ".devstack" / "conformance-servicebus"
# The SDK's test files and helpers the queue suites need, as found under `tests/` in the source distribution.
SDK_FILES = (
    "test_queues.py",
    "utilities.py",
    "mocks.py",
    "async_tests/test_queues_async.py",
    "async_tests/mocks_async.py",
)


def pinned_version(lock: Path) -> str:
    match = re.search(r"^azure-servicebus==([\w.]+)$", lock.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no azure-servicebus pin in {lock.name}")
    return match.group(1)


def sdist(version: str) -> Path:
    """The source distribution of azure-servicebus `version`, downloaded once."""
    folder = CACHE / version
    found = sorted(folder.glob("azure*servicebus-*.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    log.info("downloading the azure-servicebus %s source distribution", version)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*command, f"azure-servicebus=={version}", "-d", str(folder)], check=True)
    found = sorted(folder.glob("azure*servicebus-*.tar.gz"))
    if not found:
        raise SystemExit(f"pip did not leave a source distribution in {folder}")
    return found[0]


def prepare(archive: Path, work: Path) -> None:
    """A fresh directory with the SDK's queue tests (flat, as their imports expect) and the harness."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        members = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix(): m for m in tar.getmembers()}
        for name in SDK_FILES:
            member = members.get(f"tests/{name}")
            source = tar.extractfile(member) if member is not None else None
            if source is None:
                raise SystemExit(f"{archive.name} has no tests/{name}")
            (work / Path(name).name).write_bytes(source.read())
    shutil.copytree(HARNESS, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (work / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\ntimeout = 600\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-k", dest="keyword", help="only the tests matching this pytest -k expression")
    parser.add_argument("--work-dir", type=Path, default=CACHE / "run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    version = pinned_version(ROOT / "requirements.lock")
    work = args.work_dir.resolve()
    prepare(sdist(version), work)
    log.info("running the azure-servicebus %s queue tests against a fresh stand-in", version)
    command = [sys.executable, "-m", "pytest", str(work), "-c", str(work / "pytest.ini")]
    command += ["--rootdir", str(work), "--confcutdir", str(work), "-p", "no:cacheprovider", "-q"]
    command += ["-W", "ignore::DeprecationWarning", "--tb=short"]
    if args.keyword:
        command += ["-k", args.keyword]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(command, cwd=work, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
