"""`make package`: the deployment zip as `func azure functionapp publish` builds it, then proof that it runs.

    python -m devstack.package [dist/queue-drain.zip]

1. **Build**: every file under the project folder except what `.funcignore` names (gitignore-style patterns,
   as Core Tools reads them), zipped with forward-slash names. Nothing from `.gitignore` is consulted, as
   Core Tools does not (so `.funcignore` must name local.settings.json, .venv and the like itself).
2. **Verify**: unpack into a fresh folder, create a clean venv there, `pip install -r requirements.txt` (which
   pins every runtime package through its `-c requirements.lock`, as the remote build will), then import the
   app and index its functions in that venv with the app settings the deployment template sets, and check
   the functions and their triggers. The clean venv has no test or local-tool package, so an import that only
   works in development fails here.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import subprocess
import sys
import tempfile
import venv
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

log = logging.getLogger("package")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ZIP = ROOT / "dist" / "queue-drain.zip"
EXPECTED = {
    "submit_batch": "httpTrigger",
    "batch_list": "httpTrigger",
    "batch_status": "httpTrigger",
    "batch_cancel": "httpTrigger",
    "batch_results": "httpTrigger",
    "queue_status": "httpTrigger",
    "poison_list": "httpTrigger",
    "poison_detail": "httpTrigger",
    "poison_replay": "httpTrigger",
    "replay_status": "httpTrigger",
    "probe": "httpTrigger",
    "dashboard": "httpTrigger",
    "openapi": "httpTrigger",
    "drain": "serviceBusTrigger",
    "fallback_poll": "timerTrigger",
}
# Run in the clean venv: import the app as the worker does (cwd on sys.path) and list each function's trigger.
INDEX_SCRIPT = """
import json, function_app
out = {}
for f in function_app.app.get_functions():
    trigger = next(b for b in f.get_bindings() if b.type.endswith("Trigger"))
    out[f.get_function_name()] = trigger.type
print(json.dumps(out))
"""


def patterns(funcignore: Path) -> list[str]:
    lines = funcignore.read_text().splitlines() if funcignore.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str, rules: Iterable[str]) -> bool:
    """gitignore-style: a pattern without a slash matches any path component (a folder's contents with it);
    one with a slash matches from the root; a trailing slash matches folders only (a component before the last)."""
    parts = relative.split("/")
    for rule in rules:
        folder_only = rule.endswith("/")
        rule = rule.rstrip("/")
        if "/" in rule:
            anchored = rule.lstrip("/")
            if fnmatch.fnmatchcase(relative, anchored) or fnmatch.fnmatchcase(relative, anchored + "/*"):
                return True
            continue
        candidates = parts[:-1] if folder_only else parts
        if any(fnmatch.fnmatchcase(part, rule) for part in candidates):
            return True
    return False


def included_files(root: Path) -> list[str]:
    rules = patterns(root / ".funcignore")
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = sorted(d for d in dirs if not ignored(prefix + d, rules) and d != "dist")
        found.extend(prefix + f for f in sorted(files) if not ignored(prefix + f, rules))
    return found


def build(root: Path, out: Path) -> list[str]:
    files = included_files(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in files:
            archive.write(root / name, name)
    log.info("built %s: %d files, %d KB", out.name, len(files), out.stat().st_size // 1024)
    return files


def verify(archive: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """Unpack, install requirements.txt into a clean venv, import and index the app there: its functions."""
    with tempfile.TemporaryDirectory(prefix="qd-package-") as scratch:
        app = Path(scratch) / "app"
        with zipfile.ZipFile(archive) as z:
            z.extractall(app)
        env_dir = Path(scratch) / "venv"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        log.info("installing requirements.txt into a clean venv")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt"],
            cwd=app,
            check=True,
        )
        environ = {"PATH": os.environ.get("PATH", ""), "HOME": scratch, **settings}
        done = subprocess.run(
            [str(python), "-c", INDEX_SCRIPT], cwd=app, env=environ, check=True, capture_output=True, text=True
        )
    functions: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return functions


def template_settings() -> dict[str, str]:
    """The app settings infra/ sets, with what only Azure knows as placeholders (from the offline checks)."""
    sys.path.insert(0, str(ROOT))
    from tests.infra.test_templates import deployed_environment

    return deployed_environment()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    out = Path(argv[0]).resolve() if argv else DEFAULT_ZIP
    files = build(ROOT, out)
    leaked = [f for f in files if f.startswith(("tests/", ".venv/", "node_modules/")) or f == "local.settings.json"]
    if leaked:
        log.error("the package holds files .funcignore should keep out: %s", leaked[:5])
        return 1
    functions = verify(out, template_settings())
    if functions != EXPECTED:
        log.error("the packaged app indexes %s, expected %s", functions, EXPECTED)
        return 1
    log.info("the packaged app imports and indexes its %d functions in a clean venv", len(functions))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
