"""The operator's page in a real headless Chromium (Debian's package, driven by Playwright), against one whole
local stack: Azurite, the Service Bus stand-in and the local host running the real function_app.py with function
keys checked from file-based secret storage, as in Azure.

Playwright never downloads a browser here: it launches the `chromium` on PATH with a fresh profile. Under CI=true a
missing browser or stack is a failure (`tests.conftest.unavailable`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devstack.host import ROOT
from tests.conftest import unavailable
from tests.faults.stack import started
from tests.host.test_keys import HOST_KEY, MASTER, write_secrets
from tests.hostile.conftest import HostileStack

# Debian's package puts `chromium` on PATH; CHROMIUM names another build of it.
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DASHBOARD_KEY = "dashboard-only-key-5c2e8a1f9b7d4e36"  # a key of the dashboard function alone
SCREENSHOTS = ROOT / ".devstack"
KEYS = {"master key": MASTER, "host key": HOST_KEY, "dashboard key": DASHBOARD_KEY}


@dataclass
class PageStack(HostileStack):
    """The hostile suite's view of a stack (requests with a host key, the broken flag), with what the browser saw."""

    seen: list[str] = field(default_factory=list)  # every console error and page error the browser reported

    def submit(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        body = "\n".join(json.dumps(i) for i in items).encode()
        reply = self.request("POST", "/api/batches", body, {"Content-Type": "application/x-ndjson"})
        assert reply.status == 202, (reply.status, reply.body[:300])
        accepted: dict[str, Any] = reply.json()
        return accepted


def settings_for(root: Path) -> dict[str, str]:
    secrets = write_secrets(root / "secrets")
    (secrets / "dashboard.json").write_text(json.dumps({"keys": [{"name": "default", "value": DASHBOARD_KEY}]}))
    return {
        "AzureWebJobsSecretStorageType": "files",
        "FUNCTIONS_SECRETS_PATH": str(secrets),
        "HANDLER": "tests.dashboard.handlers:settle",
        "DASHBOARD_BROKEN_FLAG": str(root / "broken"),
        "CHUNK_MAX_ITEMS": "25",
    }


@pytest.fixture(scope="module")
def page_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageStack]:
    root = tmp_path_factory.mktemp("dashboard")
    with started(root, settings_for(root)) as stack:
        yield PageStack(stack, root)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A persistent Chromium context on a fresh profile folder (no cookies, no storage carried in)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as e:
        unavailable("Playwright", e)
        raise
    if not CHROMIUM:
        unavailable("Chromium", FileNotFoundError("no chromium on PATH (make setup installs Debian's chromium)"))
    playwright = sync_playwright().start()
    try:
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            try:
                context = playwright.chromium.launch_persistent_context(
                    profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
            except Error as e:
                unavailable("Chromium", e)
                raise
            try:
                yield context
            finally:
                context.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(chromium: Any, page_stack: PageStack) -> Iterator[Any]:
    """A new tab at 1280 x 900 whose console errors and uncaught exceptions land in `page_stack.seen`."""
    tab = chromium.new_page()
    tab.set_viewport_size({"width": 1280, "height": 900})
    page_stack.seen.clear()
    tab.on("console", lambda m: page_stack.seen.append(f"console: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: page_stack.seen.append(f"page error: {e}"))
    try:
        yield tab
    finally:
        tab.close()
