"""`python -m shared.cli`: submit a batch and follow it, and work the poison queues, over the HTTP API.

    python -m shared.cli submit FILE [--follow] [--idempotency-key K] [--callback-url URL]
    python -m shared.cli results BATCH_ID [--failed]
    python -m shared.cli cancel BATCH_ID
    python -m shared.cli poison list | show MESSAGE_ID | replay --batch ID | --id MESSAGE_ID ... | --all
    python -m shared.cli trace BATCH_ID [--file PATH]

`--url` (default http://localhost:7071) and `--key` (a function key, sent as x-functions-key) reach
a deployed app as well as the local host. `trace` reads the span file the local host writes (TRACES_FILE;
`make run` uses .devstack/traces.jsonl). Built on the client package (`queue_drain_client`, client/): the
API's error codes are its exceptions, `--follow` is its `wait(progress=True)` (rich's bar).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from queue_drain_client import DEFAULT_URL, ApiError, Client, ConnectionFailed, QueueDrainError, WaitTimeout
from queue_drain_client import cli as client_cli

from shared.ops import waterfall

FOLLOW_EVERY_S = 0.5


def error_text(e: QueueDrainError) -> str:
    return client_cli.error_text(e, key_hint="pass a valid one with --key")


def summary(status: Mapping[str, Any]) -> str:
    return client_cli.summary(status, poison_hint="python -m shared.cli poison list")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shared.cli", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="the function app (default %(default)s)")
    parser.add_argument("--key", default=None, help="a function key, sent as x-functions-key")
    commands = parser.add_subparsers(dest="command", required=True)
    send = commands.add_parser("submit", help="submit a JSON ({'items': [...]}) or NDJSON file")
    send.add_argument("file", type=Path)
    send.add_argument("--follow", action="store_true", help="show progress until the batch completes")
    send.add_argument("--idempotency-key", default=None)
    send.add_argument("--callback-url", default=None, help="where the app POSTs the batch's final status")
    send.add_argument("--timeout", type=float, default=3600.0, help="seconds to follow before giving up")
    exported = commands.add_parser("results", help="a batch's results, one NDJSON line per item with an outcome")
    exported.add_argument("batch_id")
    exported.add_argument("--failed", action="store_true", help="only the items that failed")
    stop = commands.add_parser("cancel", help="cancel a batch: no handler call of it starts after the bound")
    stop.add_argument("batch_id")
    parked = commands.add_parser("poison", help="list, show or replay parked chunks")
    actions = parked.add_subparsers(dest="action", required=True)
    actions.add_parser("list")
    show = actions.add_parser("show")
    show.add_argument("message_id")
    again = actions.add_parser("replay")
    again.add_argument("--batch", default=None, help="only this batch's chunks")
    again.add_argument("--id", action="append", dest="ids", help="only this poison message (repeatable)")
    again.add_argument("--all", action="store_true", help="every parked chunk of every tenant (named, never implied)")
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
        with Client(args.url, args.key) as client:
            run(client, args, out)
    except (ApiError, ConnectionFailed, WaitTimeout, ValueError) as e:
        print(f"error: {error_text(e) if isinstance(e, QueueDrainError) else e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def run(client: Client, args: argparse.Namespace, out: IO[str]) -> None:
    if args.command == "submit":
        batch = client.submit(file=args.file, idempotency_key=args.idempotency_key, callback_url=args.callback_url)
        out.write(f"accepted batch {batch.batch_id}: {batch.items} items in {batch.chunks} chunks")
        out.write(f" (trigger {batch.trigger})\n")
        if args.follow:
            out.flush()
            status = client.wait(batch.batch_id, timeout_s=args.timeout, every_s=FOLLOW_EVERY_S, progress=True)
            out.write(summary(status) + "\n")
    elif args.command == "results":
        page = None
        for page in client.result_pages(args.batch_id, status="failed" if args.failed else None):
            out.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in page.lines)
        if page is not None and not page.final:
            print(f"note: batch {args.batch_id} is {page.batch_status}: items without an outcome yet are not listed",
                  file=sys.stderr)  # fmt: skip
    elif args.command == "cancel":
        out.write(json.dumps(client.cancel(args.batch_id), indent=2) + "\n")
    elif args.action == "list":
        out.write(json.dumps(client.poison(), indent=2) + "\n")
    elif args.action == "show":
        out.write(json.dumps(client.poison_detail(args.message_id), indent=2) + "\n")
    else:
        result = client.replay(batch_id=args.batch, message_ids=args.ids, all=args.all)
        out.write(f"replayed {result['replayed']} parked chunk(s); skipped {len(result['skipped'])}\n")


if __name__ == "__main__":
    sys.exit(main())
