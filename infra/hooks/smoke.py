"""azd's postdeploy hook: prove the deployed app answers and drains, or fail the deployment.

1. GET /api/openapi.json with no key (the one anonymous route): the host is up and indexed the app.
2. Fetch the default function key with the Azure CLI (ARM `listKeys`, the deployer's own sign-in).
3. POST a one-item batch and follow its status_url until `completed`: the submit stored it, the doorbell
   reached Service Bus, the drain function woke (a cold start on an idle app: allow minutes) and settled it.

Standard library only (it runs wherever azd runs). azd passes its environment values as environment variables:
FUNCTION_APP_URL, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME (infra/main.bicep outputs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

TIMEOUT_S = float(os.environ.get("SMOKE_TIMEOUT_S", "600"))
ITEM = {"id": "smoke-0", "amount": "1.00", "currency": "EUR", "author": "author-000", "distributor": "partner-0"}


def call(url: str, *, key: str = "", body: bytes | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/x-ndjson"} if body is not None else {}
    if key:
        headers["x-functions-key"] = key
    if not url.startswith("https://"):
        sys.exit(f"smoke: {url} is not an https URL")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")  # noqa: S310 (https only, checked above)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (https only, checked above)
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read()[:300]


def function_key(group: str, app: str) -> str:
    command = f"az functionapp keys list -g {group} -n {app} --query functionKeys.default -o tsv".split()
    found = subprocess.run(command, capture_output=True, text=True, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        sys.exit(f"smoke: cannot read the function key ({found.stderr.strip()[:200]})")
    return found.stdout.strip()


def wait_until_completed(base: str, status_url: str, key: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        code, status = call(base + status_url, key=key)
        if code == 200 and status.get("status") in {"completed", "completed_with_failures", "abandoned"}:
            return dict(status)
        time.sleep(5)
    sys.exit(f"smoke: the batch was not completed within {TIMEOUT_S:.0f} s ({status_url})")


def main() -> None:
    base = os.environ["FUNCTION_APP_URL"].rstrip("/")
    code, document = call(f"{base}/api/openapi.json")
    if code != 200 or "openapi" not in (document or {}):
        sys.exit(f"smoke: GET /api/openapi.json answered {code}")
    print("smoke: the app is up (OpenAPI document served)")
    key = function_key(os.environ["AZURE_RESOURCE_GROUP"], os.environ["AZURE_FUNCTION_APP_NAME"])
    code, accepted = call(f"{base}/api/batches", key=key, body=(json.dumps(ITEM) + "\n").encode())
    if code != 202:
        sys.exit(f"smoke: POST /api/batches answered {code}: {accepted!r}")
    status = wait_until_completed(base, accepted["status_url"], key)
    if status["status"] != "completed":
        sys.exit(f"smoke: the one-item batch ended {status['status']}: {status}")
    print(f"smoke: batch {accepted['batch_id']} of one item completed")


if __name__ == "__main__":
    main()
