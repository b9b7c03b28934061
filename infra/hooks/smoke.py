"""azd's postdeploy hook: prove the deployed app answers and its whole path works, or fail the deployment.

1. GET /api/openapi.json with no key (the one anonymous route): the host is up and indexed the app.
2. The default function key, read through ARM (`listkeys` of the site's host) with azd's own sign-in
   (`azd auth token`), so the Azure CLI need not be signed in, nor pointed at this subscription.
   `SMOKE_FUNCTION_KEY` skips this (e.g. after `func azure functionapp publish`, with the key at hand).
3. POST /api/probes and follow it until the drain function has seen it: the HTTP function sent a trigger event to
   Service Bus with the app's identity, the Service Bus trigger fired the drain function, which wrote to storage,
   and the status route read it back with the work queue's depth. No batch, no call of the chunk handler: a
   custom handler never fails a deploy, and nothing lands among the user's batches.
4. With TENANT_FROM=principal (infra/main.bicep's output), GET /api/queues with the key, no token and a hand-written
   X-MS-CLIENT-PRINCIPAL holding the operator role must answer 401: App Service Authentication guards the app. If
   the app answers it, anyone with the key could name any tenant (docs/deploying.md, "Caller identity").

Every step is retried with back-off until one deadline (`SMOKE_TIMEOUT_S`, 900 s by default): after a first
deploy the identity's new roles take up to about ten minutes to reach storage and Service Bus (403s, a host that
answers 503 meanwhile), the host's keys exist only once it has started, and an idle app's first event waits for
a cold start. A refusal that waiting cannot mend (400, 404 of a route, a bad URL) fails at once.

Standard library only (it runs wherever azd runs). azd passes its environment values as environment variables:
FUNCTION_APP_URL, AZURE_SUBSCRIPTION_ID, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME (infra/main.bicep outputs).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

TIMEOUT_S = float(os.environ.get("SMOKE_TIMEOUT_S", "900"))
ARM = os.environ.get("SMOKE_ARM_ENDPOINT", "https://management.azure.com").rstrip("/")
ARM_API_VERSION = "2023-12-01"
REQUEST_TIMEOUT_S = 30.0
FIRST_WAIT_S, LONGEST_WAIT_S = 2.0, 20.0
# Answers worth waiting out: the host starting (502, 503, 504), a role or key not yet propagated (401, 403), a
# throttle (429), a transient failure (500), a key listing asked of a host not started yet (409).
RETRIED = {401, 403, 408, 409, 429, 500, 502, 503, 504}


class Failed(Exception):
    """A step failed in a way that waiting cannot mend."""


class NotYet(Exception):
    """A step's answer is worth waiting out; the message says what was seen."""


def checked_url(url: str) -> str:
    """https, or http to a loopback address only (the local host, in the tests)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return url
    try:
        loopback = parts.scheme == "http" and ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Failed(f"{url} is not an https URL")
    return url


def call(url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None) -> Any:
    """The JSON answer of a 2xx; NotYet for an answer or a network failure worth waiting out; Failed otherwise."""
    request = urllib.request.Request(checked_url(url), data=body, headers=headers or {}, method=method)  # noqa: S310 (checked_url)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:  # noqa: S310 (checked_url)
            return json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        said = e.read()[:200].decode("utf-8", "replace")
        if e.code in RETRIED:
            raise NotYet(f"{method} {urllib.parse.urlsplit(url).path} answered {e.code}") from e
        raise Failed(f"{method} {urllib.parse.urlsplit(url).path} answered {e.code}: {said}") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise NotYet(f"{method} {urllib.parse.urlsplit(url).path}: {e}") from e
    except json.JSONDecodeError as e:
        raise NotYet(f"{method} {urllib.parse.urlsplit(url).path} answered something other than JSON") from e


def until(deadline: float, what: str, attempt: Callable[[], Any]) -> Any:
    """`attempt()` until it returns something other than None, waiting out NotYet with back-off to `deadline`."""
    wait, last = FIRST_WAIT_S, "nothing yet"
    while True:
        try:
            result = attempt()
            if result is not None:
                return result
        except NotYet as e:
            last = str(e)
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failed(f"{what}: not done within {TIMEOUT_S:.0f} s (last: {last})")
        print(f"smoke: {what}: waiting ({last})", flush=True)
        time.sleep(min(wait, left))
        wait = min(wait * 2, LONGEST_WAIT_S)


def azd_token(scope: str = "") -> str:
    """A token of azd's own sign-in (the one `azd up` deploys with), for ARM unless another scope is named."""
    azd = shutil.which("azd")
    if azd is None:
        raise Failed("azd is not on PATH: set SMOKE_FUNCTION_KEY to the app's function key instead")
    command = [azd, "auth", "token", "--output", "json", "--no-prompt", "--scope", scope or f"{ARM}/.default"]
    found = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        token = str(json.loads(found.stdout)["token"])
    except (ValueError, KeyError, TypeError) as e:
        raise Failed(f"azd auth token gave no token ({found.stderr.strip()[:200]}): run `azd auth login`") from e
    return token


def function_key(deadline: float) -> str:
    """The host's default function key, by ARM's listkeys with azd's token, in the subscription azd deployed to."""
    given = os.environ.get("SMOKE_FUNCTION_KEY", "")
    if given:
        return given
    site = "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Web/sites/{}".format(
        *(urllib.parse.quote(os.environ[name], safe="") for name in ARM_NAMES)
    )
    url = f"{ARM}{site}/host/default/listkeys?api-version={ARM_API_VERSION}"
    token = azd_token()

    def listed() -> str | None:
        keys = call(url, method="POST", headers={"Authorization": f"Bearer {token}"})
        key = ((keys or {}).get("functionKeys") or {}).get("default")
        if not key:
            raise NotYet("listkeys gave no default function key yet")
        return str(key)

    key: str = until(deadline, "reading the function key through ARM", listed)
    return key


ARM_NAMES = ("AZURE_SUBSCRIPTION_ID", "AZURE_RESOURCE_GROUP", "AZURE_FUNCTION_APP_NAME")


# A principal a client writes itself: the operator role, no token. Only the platform may set this header.
FORGED = base64.b64encode(
    json.dumps({"auth_typ": "aad", "claims": [{"typ": "roles", "val": "operator"}], "role_typ": "roles"}).encode()
).decode()


def forgery_refused(base: str, key: str) -> bool | None:
    """True once the platform answers 401 to a forged principal without a token; Failed if the app answers."""
    headers = {"x-functions-key": key, "X-MS-CLIENT-PRINCIPAL": FORGED}
    request = urllib.request.Request(checked_url(f"{base}/api/queues"), headers=headers)  # noqa: S310 (checked_url)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S):  # noqa: S310 (checked_url)
            pass
    except urllib.error.HTTPError as e:
        if e.code == 401:
            return True
        raise NotYet(f"GET /api/queues with a forged principal answered {e.code}") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise NotYet(f"GET /api/queues: {e}") from e
    raise Failed(
        "a request without a token and with a hand-written X-MS-CLIENT-PRINCIPAL (operator) was answered: App "
        "Service Authentication does not guard this app, so any key holder can name any tenant. See "
        "docs/deploying.md, Caller identity (set TENANT_FROM=header, or put a gateway that checks tokens in front)"
    )


def main() -> None:
    base = os.environ["FUNCTION_APP_URL"].rstrip("/")
    deadline = time.monotonic() + TIMEOUT_S

    def served() -> bool | None:
        document = call(f"{base}/api/openapi.json")
        return True if isinstance(document, dict) and "openapi" in document else None

    until(deadline, "the host serving its OpenAPI document", served)
    print("smoke: the app is up (OpenAPI document served)", flush=True)
    key = function_key(deadline)
    headers = {"x-functions-key": key}
    sent = until(deadline, "sending the probe", lambda: call(f"{base}/api/probes", method="POST", headers=headers))

    def seen() -> dict[str, Any] | None:
        status = call(base + sent["status_url"], headers=headers)
        return dict(status) if status.get("status") == "seen" else None

    status = until(deadline, "the drain function receiving the probe", seen)
    print(
        f"smoke: probe {sent['probe_id']} went through Service Bus to the drain function and back "
        f"(work queue depth {status.get('work_queue_depth')})",
        flush=True,
    )
    if os.environ.get("TENANT_FROM", "").strip() == "principal":
        until(deadline, "App Service Authentication refusing a forged principal", lambda: forgery_refused(base, key))
        print("smoke: a forged X-MS-CLIENT-PRINCIPAL without a token is refused (401)", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        sys.exit(f"smoke: {e}")
