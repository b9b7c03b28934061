"""`queue-drain`: the client's command line (installed with the package as a console script).

    queue-drain submit FILE [--tenant T] [--priority high] [--idempotency-key K] [--callback-url URL]
                            [--expires-in-s N] [--not-before WHEN] [--max-failed-fraction F] [--label K=V ...] [--wait]
    queue-drain status BATCH_ID
    queue-drain list [--status S] [--tenant T] [--since WHEN] [--until WHEN] [--limit N]
    queue-drain wait BATCH_ID [--timeout-s N]          (a progress bar)
    queue-drain results BATCH_ID [--failed] [--partial]
    queue-drain cancel BATCH_ID [--yes]
    queue-drain queues
    queue-drain poison [MESSAGE_ID]
    queue-drain replay (--batch ID | --id MESSAGE_ID ... | --all [--yes]) [--background]

The app's URL, function key and bearer token come from the environment, never from the command line (which the
shell's history keeps): QUEUE_DRAIN_URL (default http://localhost:7071), QUEUE_DRAIN_KEY, QUEUE_DRAIN_TOKEN.
Cancelling a batch and replaying every parked chunk ask first; `--yes` answers for you (and is needed where no one
can answer: without a terminal). Exit codes: 0 done, 1 the API or the network said no, 2 a usage error or a
question not answered yes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import IO, Any

from queue_drain_client._common import DEFAULT_URL
from queue_drain_client._sync import Client
from queue_drain_client._version import __version__
from queue_drain_client.errors import ApiError, QueueDrainError, Unauthorized

ENV_URL, ENV_KEY, ENV_TOKEN = "QUEUE_DRAIN_URL", "QUEUE_DRAIN_KEY", "QUEUE_DRAIN_TOKEN"


class Refused(Exception):
    """Raised when a destructive command was not confirmed."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="queue-drain", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--version", action="version", version=f"queue-drain {__version__}")
    commands = top.add_subparsers(dest="command", required=True)
    submit = commands.add_parser("submit", help="submit a JSON ({'items': [...]}) or NDJSON (.ndjson, .jsonl) file")
    submit.add_argument("file")
    submit.add_argument("--tenant")
    submit.add_argument("--priority", choices=["normal", "high"])
    submit.add_argument("--idempotency-key", help="default: one of the client's own, the same on its retries")
    submit.add_argument("--callback-url", help="where the app POSTs the batch's completion notice")
    submit.add_argument("--expires-in-s", type=int, help="items not handled by then end `expired`")
    submit.add_argument("--not-before", help="a delay in seconds, or an RFC 3339 date-time with its offset")
    submit.add_argument("--max-failed-fraction", type=float, help="end the batch `failed` past this share")
    submit.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="metadata (repeatable)")
    submit.add_argument("--wait", action="store_true", help="follow it to the end with a progress bar")
    submit.add_argument("--timeout-s", type=float, default=3600.0, help="how long --wait follows it")
    commands.add_parser("status", help="a batch's status").add_argument("batch_id")
    listing = commands.add_parser("list", help="recent batches, newest first")
    listing.add_argument("--status")
    listing.add_argument("--tenant", help="another tenant's batches (the operator's)")
    listing.add_argument("--since", help="accepted at or after (RFC 3339)")
    listing.add_argument("--until", help="accepted before (RFC 3339)")
    listing.add_argument("--limit", type=int, default=20, help="how many batches at most (default %(default)s)")
    wait = commands.add_parser("wait", help="follow a batch to the end, with a progress bar")
    wait.add_argument("batch_id")
    wait.add_argument("--timeout-s", type=float, default=3600.0)
    results = commands.add_parser("results", help="a final batch's results, one NDJSON line per item")
    results.add_argument("batch_id")
    results.add_argument("--failed", action="store_true", help="only the items that failed")
    results.add_argument("--partial", action="store_true", help="a running batch's lines so far, not waiting")
    cancel = commands.add_parser("cancel", help="cancel a batch (asks first)")
    cancel.add_argument("batch_id")
    cancel.add_argument("--yes", action="store_true", help="do not ask")
    commands.add_parser("queues", help="depths, drainers, storage transactions, tenants")
    poison = commands.add_parser("poison", help="the parked chunks, or one of them")
    poison.add_argument("message_id", nargs="?")
    replay = commands.add_parser("replay", help="put parked chunks back on their queue")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--batch", help="a batch's parked chunks")
    which.add_argument("--id", action="append", dest="ids", help="this parked message (repeatable)")
    which.add_argument("--all", action="store_true", help="every parked chunk (asks first)")
    replay.add_argument("--yes", action="store_true", help="do not ask")
    replay.add_argument("--background", action="store_true", help="as a background job (answers its id)")
    return top


def error_text(e: QueueDrainError, key_hint: str = f"set {ENV_KEY}") -> str:
    """`<status>: <the API's message> (<limit>)`, as the API said it."""
    if not isinstance(e, ApiError):
        return str(e)
    hint = f" ({key_hint})" if type(e) is Unauthorized else ""
    limit = f" ({e.details['limit']})" if "limit" in e.details else ""
    return f"{e.status}: {e.message}{limit}{hint}"


def summary(status: Mapping[str, Any], poison_hint: str = "queue-drain poison") -> str:
    items, chunks = status["items"], status["chunks"]
    lines = [
        f"batch {status['batch_id']}: {status['status']}",
        f"  items   {items['succeeded']} succeeded, {items['failed']} failed of {items['total']}",
        f"  chunks  {chunks['done']} done, {chunks['poisoned']} with parked items, of {chunks['total']}",
        f"  from {status['created_at']} to {status.get('completed_at')}",
    ]
    if items["failed"]:
        lines.append(f"  see the parked items: {poison_hint}")
    return "\n".join(lines)


def labels(pairs: Iterable[str]) -> dict[str, str] | None:
    found = dict(pair.partition("=")[::2] for pair in pairs)
    if any("=" not in pair for pair in pairs):
        raise ValueError("--label takes KEY=VALUE")
    return found or None


def moment(text: str | None) -> datetime | None:
    """An RFC 3339 date-time with its offset (`Z` too)."""
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def not_before(text: str | None) -> datetime | int | None:
    """A delay in whole seconds, or a date-time."""
    return int(text) if text is not None and text.isdigit() else moment(text)


def confirm(question: str, yes: bool, stdin: IO[str], stderr: IO[str]) -> None:
    """Go on only if `--yes` was given or the person at the terminal answers y; else Refused."""
    if yes:
        return
    if not stdin.isatty():
        raise Refused(f"{question} Not asked without a terminal: pass --yes")
    stderr.write(f"{question} [y/N] ")
    stderr.flush()
    if stdin.readline().strip().lower() not in {"y", "yes"}:
        raise Refused("not confirmed: nothing done")


def write_json(doc: Any, out: IO[str]) -> None:
    out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def run(client: Client, args: argparse.Namespace, streams: tuple[IO[str], IO[str], IO[str]]) -> None:
    stdin, out, err = streams
    command = args.command
    if command == "submit":
        batch = client.submit(
            file=args.file,
            tenant=args.tenant,
            priority=args.priority,
            idempotency_key=args.idempotency_key,
            callback_url=args.callback_url,
            expires_in_s=args.expires_in_s,
            not_before=not_before(args.not_before),
            max_failed_fraction=args.max_failed_fraction,
            metadata=labels(args.label),
        )
        replayed = " (its Idempotency-Key was seen before: the first batch)" if batch.replayed else ""
        out.write(f"accepted batch {batch.batch_id}: {batch.items} items in {batch.chunks} chunks{replayed}\n")
        if args.wait:
            out.flush()
            out.write(summary(client.wait(batch.batch_id, timeout_s=args.timeout_s, progress=True)) + "\n")
    elif command == "status":
        write_json(client.status(args.batch_id), out)
    elif command == "list":
        found = client.batches(page=min(args.limit, 50), status=args.status, tenant=args.tenant,
                               since=moment(args.since), until=moment(args.until))  # fmt: skip
        write_json([batch for _, batch in zip(range(args.limit), found, strict=False)], out)
    elif command == "wait":
        out.write(summary(client.wait(args.batch_id, timeout_s=args.timeout_s, progress=True)) + "\n")
    elif command == "results":
        status = "failed" if args.failed else None
        if args.partial:
            for page in client.result_pages(args.batch_id, status=status):
                out.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in page.lines)
                if not page.final:
                    err.write(f"note: batch {args.batch_id} is {page.batch_status}: these lines are partial\n")
        else:
            out.writelines(
                json.dumps(line, separators=(",", ":")) + "\n" for line in client.results(args.batch_id, status=status)
            )
    elif command == "cancel":
        confirm(f"Cancel batch {args.batch_id}? Its items not yet handled will never be.", args.yes, stdin, err)
        write_json(client.cancel(args.batch_id), out)
    elif command == "queues":
        write_json(client.queues(), out)
    elif command == "poison":
        write_json(client.poison_detail(args.message_id) if args.message_id else client.poison(), out)
    else:
        if args.all:
            confirm("Replay every parked chunk of every batch?", args.yes, stdin, err)
        what = {"batch_id": args.batch, "message_ids": args.ids, "all": args.all}
        write_json(client.start_replay(**what) if args.background else client.replay(**what), out)


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    streams: tuple[IO[str], IO[str], IO[str]] | None = None,
) -> int:
    stdin, out, err = streams or (sys.stdin, sys.stdout, sys.stderr)
    environ = os.environ if env is None else env
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    url = environ.get(ENV_URL) or DEFAULT_URL
    try:
        with Client(url, environ.get(ENV_KEY) or None, token=environ.get(ENV_TOKEN) or None) as client:
            run(client, args, (stdin, out, err))
    except Refused as e:
        err.write(f"{e}\n")
        return 2
    except QueueDrainError as e:
        err.write(f"error: {error_text(e)}\n")
        return 1
    except (ValueError, OSError) as e:
        err.write(f"error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
