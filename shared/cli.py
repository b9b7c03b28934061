"""`python -m shared.cli`: submit a batch and follow it, and work the poison queues, over the HTTP API.

    python -m shared.cli submit FILE [--follow] [--idempotency-key K]
    python -m shared.cli poison list | show MESSAGE_ID | replay [--batch ID] [--id MESSAGE_ID ...]
    python -m shared.cli results BATCH_ID [--failed]
    python -m shared.cli trace BATCH_ID [--file PATH]

`--url` (default http://localhost:7071) and `--key` (a function key, sent as x-functions-key) reach
a deployed app as well as the local host. `trace` reads the span file the local host writes (TRACES_FILE;
`make run` uses .devstack/traces.jsonl). Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from shared.ops import waterfall
from shared.ops.status import FINAL

DEFAULT_URL = "http://localhost:7071"
FOLLOW_EVERY_S = 0.5
BAR_WIDTH = 30
DONE = {"completed", "completed_with_failures"}
EMPTY_ERRORS = {
    401: "the function key is missing or wrong (pass a valid one with --key)",
    404: "no such route here (does --url point at the function app?)",
}


class ApiError(Exception):
    """Raised when the API answers with an error; the message is the API's own."""


class Client:
    def __init__(self, url: str, key: str | None, timeout_s: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ApiError(f"--url must be an http(s) URL, not {url!r}")
        self.url = url.rstrip("/")
        self.key = key
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
        data, _ = self.raw(method, path, body, headers)
        return json.loads(data or b"null")

    def raw(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """The answer's body as bytes, and its headers (lower-case names)."""
        url = f"{self.url}{path}"  # http(s) only: checked in __init__
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))  # noqa: S310
        if self.key:
            request.add_header("x-functions-key", self.key)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - operator's URL
                return response.read(), {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as e:
            raise ApiError(f"{e.code}: {error_text(e.code, e.read())}") from None
        except urllib.error.URLError as e:
            raise ApiError(f"cannot reach {self.url}: {e.reason}") from None


def error_text(status: int, body: bytes) -> str:
    if not body.strip():  # the host's own refusals (401, 404 for an unknown route) have no body
        return EMPTY_ERRORS.get(status, "the server gave no details")
    try:
        error = json.loads(body)["error"]
        return f"{error['message']}" + (f" ({error['limit']})" if "limit" in error else "")
    except (ValueError, KeyError, TypeError):
        return body[:300].decode("utf-8", "replace")


def content_type_of(path: Path) -> str:
    return "application/x-ndjson" if path.suffix in {".ndjson", ".jsonl"} else "application/json"


def submit(client: Client, path: Path, key: str | None) -> dict[str, Any]:
    body = path.read_bytes()
    headers = {"Content-Type": content_type_of(path), "Content-Encoding": "gzip"}
    if key:
        headers["Idempotency-Key"] = key
    answer: dict[str, Any] = client.call("POST", "/api/batches", gzip.compress(body), headers)
    return answer


def bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // max(1, total)
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + f"] {done}/{total}"


def follow(client: Client, status_url: str, out: IO[str], *, timeout_s: float) -> dict[str, Any]:
    """Poll the batch until it completes, redrawing one progress line."""
    deadline = time.monotonic() + timeout_s
    while True:
        status: dict[str, Any] = client.call("GET", status_url)
        items = status["items"]
        settled = items["succeeded"] + items["failed"]
        out.write(f"\r{bar(settled, items['total'])} {status['status']:<24}")
        out.flush()
        if status["status"] in DONE:
            out.write("\n")
            return status
        if time.monotonic() > deadline:
            out.write("\n")
            raise ApiError(f"the batch did not complete within {timeout_s:.0f} s (still {status['status']})")
        time.sleep(FOLLOW_EVERY_S)


def summary(status: dict[str, Any]) -> str:
    items, chunks = status["items"], status["chunks"]
    lines = [
        f"batch {status['batch_id']}: {status['status']}",
        f"  items   {items['succeeded']} succeeded, {items['failed']} failed of {items['total']}",
        f"  chunks  {chunks['done']} done, {chunks['poisoned']} with parked items, of {chunks['total']}",
        f"  from {status['created_at']} to {status['completed_at']}",
    ]
    if items["failed"]:
        lines.append("  see the parked items: python -m shared.cli poison list")
    return "\n".join(lines)


def results(client: Client, batch_id: str, out: IO[str], *, failed_only: bool) -> str:
    """Write the batch's result lines (NDJSON) to `out`, page after page; answers the batch's status."""
    if not batch_id.isalnum():
        raise ApiError(f"{batch_id!r} is not a batch id")
    query = {"status": "failed"} if failed_only else {}
    status = ""
    while True:
        data, headers = client.raw("GET", f"/api/batches/{batch_id}/results?{urllib.parse.urlencode(query)}")
        out.write(data.decode("utf-8"))
        status = headers.get("x-batch-status", "")
        if "x-continuation" not in headers:
            return status
        query["continuation"] = headers["x-continuation"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shared.cli", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="the function app (default %(default)s)")
    parser.add_argument("--key", default=None, help="a function key, sent as x-functions-key")
    commands = parser.add_subparsers(dest="command", required=True)
    send = commands.add_parser("submit", help="submit a JSON ({'items': [...]}) or NDJSON file")
    send.add_argument("file", type=Path)
    send.add_argument("--follow", action="store_true", help="show progress until the batch completes")
    send.add_argument("--idempotency-key", default=None)
    send.add_argument("--timeout", type=float, default=3600.0, help="seconds to follow before giving up")
    parked = commands.add_parser("poison", help="list, show or replay parked chunks")
    actions = parked.add_subparsers(dest="action", required=True)
    actions.add_parser("list")
    show = actions.add_parser("show")
    show.add_argument("message_id")
    again = actions.add_parser("replay")
    again.add_argument("--batch", default=None, help="only this batch's chunks")
    again.add_argument("--id", action="append", dest="ids", help="only this poison message (repeatable)")
    exported = commands.add_parser("results", help="a batch's results, one NDJSON line per item with an outcome")
    exported.add_argument("batch_id")
    exported.add_argument("--failed", action="store_true", help="only the failed items")
    traced = commands.add_parser("trace", help="a batch's trace as a waterfall, from the local span file")
    traced.add_argument("batch_id")
    default_file = os.environ.get("TRACES_FILE") or str(Path(".devstack") / "traces.jsonl")
    traced.add_argument("--file", type=Path, default=Path(default_file), help="the span file (%(default)s)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, out: IO[str] = sys.stdout) -> int:
    args = parse_args(argv)
    if args.command == "trace":
        spans = waterfall.batch_spans(waterfall.read_spans(args.file), args.batch_id)
        out.write("\n".join(waterfall.render(spans, args.batch_id)) + "\n")
        return 0 if spans else 1
    try:
        client = Client(args.url, args.key)
        if args.command == "submit":
            accepted = submit(client, args.file, args.idempotency_key)
            out.write(
                f"accepted batch {accepted['batch_id']}: {accepted['items']} items in {accepted['chunks']} chunks"
            )
            out.write(f" (trigger {accepted['trigger']})\n")
            if args.follow:
                out.write(summary(follow(client, accepted["status_url"], out, timeout_s=args.timeout)) + "\n")
        elif args.command == "results":
            status = results(client, args.batch_id, out, failed_only=args.failed)
            if status not in FINAL:
                print(f"note: batch {args.batch_id} is {status}: items without an outcome yet are not listed",
                      file=sys.stderr)  # fmt: skip
        elif args.action == "list":
            out.write(json.dumps(client.call("GET", "/api/poison"), indent=2) + "\n")
        elif args.action == "show":
            out.write(json.dumps(client.call("GET", f"/api/poison/{args.message_id}"), indent=2) + "\n")
        else:
            request = {"batch_id": args.batch, "message_ids": args.ids}
            body = json.dumps({k: v for k, v in request.items() if v}).encode()
            result = client.call("POST", "/api/poison/replay", body, {"Content-Type": "application/json"})
            out.write(f"replayed {result['replayed']} parked chunk(s); skipped {len(result['skipped'])}\n")
    except ApiError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
