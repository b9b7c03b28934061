"""`python -m bench.rounds`: the app's drain beside peer (a') and the raw loop, in interleaved rounds on one stack
(issue 42's targets 1, 2 and 4 in one command).

Each round drains the same ITEMS items three ways:
- the app: submitted through its own `submit`, drained by one `Drainer` in a fresh process
  (`bench.measures.throughput.drain_process`): its whole session (set-up, lease, the watchdog's Service Bus
  connection included) and its steady window (first GetMessages to last DeleteMessage);
- (a'): the same items as the app's chunk messages, drained by the built-in trigger's loop in a fresh process
  (`bench.peers.chunked`), from its first receive to its last delete;
- raw: GetMessages(32) + DeleteMessage of as many of the app's messages by CLIENTS concurrent clients in this
  process, no processing (`bench.measures.raw_limit`): the physical limit, right beside the app's drain.
The order alternates (`plan.order`): the app and (a') go app, (a'), (a'), app, ...; the raw loop is always next to
the app. Beside each rate, that side's CPU seconds per message (its process's CPU over the same span, divided by
the messages it drained). With --profile, one more drain of the app under pyinstrument: where its CPU goes.
With --spin N, N CPU-bound processes run beside the whole run (a load that is reproducible). With --before DIR,
the app as another checkout has it (a change's parent) drains in each round too, right beside this one: a change's
CPU per message measured against its parent's at the same moments.

    python -m bench.rounds [--items 200000] [--rounds 5] [--profile] [--spin 0]
        -> bench/results/rounds.json, a line in bench/results/cpu_history.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.measures.chunked.run import chunked_throughput
from bench.measures.raw_limit import run as raw_limit
from bench.measures.rounds import plan
from bench.measures.rounds.profile import app_cpu_profile
from bench.measures.throughput.run import app_throughput
from bench.tools import enqueue, machine
from bench.tools.config import trigger_queue
from bench.tools.spinners import spinning
from bench.tools.stack import Stack
from devstack.host import ROOT

log = logging.getLogger("bench.measures.rounds.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"
HISTORY = RESULTS / "cpu_history.json"
ITEMS = 200_000
ROUNDS = 5
CLIENTS = 16  # the raw loop's best level in section 5's runs
PROFILE_ITEMS = 100_000


async def raw_round(storage: str, name: str, texts: list[str], clients: int) -> dict[str, Any]:
    """The raw loop on `texts` (filled first, not timed): messages/s and this process's CPU per message."""
    filler = enqueue.client(storage, name)
    await enqueue.create(filler)
    await enqueue.put_all(filler, texts)
    await filler.close()
    started, cpu_started = time.monotonic(), time.process_time()
    await raw_limit.drain_raw(storage, name, clients)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu_started
    return {
        "messages": len(texts),
        "seconds": seconds,
        "messages_per_s": len(texts) / seconds,
        "cpu_s_per_message": plan.per_message(cpu, len(texts)),
    }


async def one_round(stack: Stack, token: str, n: int, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"order": list(plan.order(n, before=args.before is not None))}
    texts = raw_limit.chunk_texts(raw_limit.messages_for(args.items))
    for side in plan.order(n, before=args.before is not None):
        if side == plan.RAW:
            out[side] = await raw_round(stack.storage, f"rounds-raw-{token}", texts, args.clients)
        elif side in (plan.APP, plan.BEFORE):
            root = args.before if side == plan.BEFORE else ROOT
            app = await app_throughput(stack.storage, stack.servicebus, token, args.items, run_dir, root, side)
            out[side] = {
                "messages": app["messages"],
                "seconds": app["drain_seconds"],
                "messages_per_s": app["messages_per_s"],
                "messages_per_s_steady": app["messages_per_s_steady"],
                "items_per_s": app["items_per_s"],
                "cpu_s_per_message": plan.per_message(app["drain_cpu_seconds"], app["messages"]),
                "cpu_s_per_message_steady": plan.per_message(app["steady_cpu_seconds"], app["messages"]),
                "transactions_per_1000": app["transactions_per_1000"],
            }
        else:
            a2 = await chunked_throughput(stack.storage, f"{token}r{n}", args.items, run_dir)
            out[side] = {
                "messages": a2["messages_ok"],
                "seconds": a2["drain_seconds"],
                "messages_per_s": a2["messages_per_s"],
                "items_per_s": a2["items_per_s"],
                "cpu_s_per_message": plan.per_message(a2["cpu_seconds"], a2["messages_ok"]),
                "transactions_per_1000": a2["transactions_per_1000"],
            }
        log.info("round %d %s: %.1f messages/s, CPU %.2f ms per message", n + 1, side,
                 out[side]["messages_per_s"], (out[side]["cpu_s_per_message"] or 0) * 1000)  # fmt: skip
    return out


async def measure(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    stack = Stack(run_dir / "stack", [trigger_queue(role, token) for role in ("tput", "profile")])
    found: dict[str, Any] = {"rounds": []}
    try:
        stack.start()
        for n in range(args.rounds):
            found["rounds"].append(await one_round(stack, token, n, args, run_dir))
        if args.profile:
            log.info("profile: the app's drain of %d items under pyinstrument", PROFILE_ITEMS)
            found["profile"] = await app_cpu_profile(stack.storage, stack.servicebus, token, PROFILE_ITEMS, run_dir)
    finally:
        stack.stop_all()
    return found


def append_history(row: dict[str, Any], path: Path = HISTORY) -> None:
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        rows = []
    rows.append(row)
    path.write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rounds", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--clients", type=int, default=CLIENTS, help="the raw loop's concurrent clients")
    parser.add_argument("--profile", action="store_true", help="one more app drain under pyinstrument")
    parser.add_argument("--spin", type=int, default=0, help="CPU-bound processes beside the run")
    parser.add_argument(
        "--before", type=Path, help="another checkout (a change's parent): its app drained in the same rounds"
    )
    parser.add_argument("--before-commit", default="", help="the commit --before's checkout holds (its history line)")
    parser.add_argument("--json", type=Path, default=RESULTS / "rounds.json")
    parser.add_argument("--no-history", action="store_true", help="do not add the run to cpu_history.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("azure", "shared"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"rounds-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    at_start = machine.details()
    with machine.LoadSampler(every_s=10) as load, spinning(args.spin) if args.spin else nullcontext():
        found = asyncio.run(measure(args, run_dir))
    command = "python -m bench.rounds" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("items", args.items), ("rounds", args.rounds))
        if v != {"items": ITEMS, "rounds": ROUNDS}[k]
    ) + (f" --spin {args.spin}" if args.spin else "")  # fmt: skip
    if args.before is not None:
        command += f" --before <a checkout of {args.before_commit or 'the parent commit'}>"
    doc = {
        "command": command,
        "duration_s": round(time.monotonic() - started, 1),
        "machine": machine.details() | {"commit_at_start": at_start["commit"], "load_during_run": load.summary()},
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "no_history", "before", "before_commit")},
        **found,
    }
    doc["summary"] = plan.summarize(doc["rounds"])
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if args.before is not None:
        change = doc["summary"]["cpu_after_over_before"]
        log.info("CPU per message, after over before: %s (median %.3f)", fmt_list(change),
                 doc["summary"]["median_cpu_after_over_before"] or 0)  # fmt: skip
    if not args.no_history and args.before is not None:
        found_before = {"median_cpu_s_per_message_app": doc["summary"]["median_cpu_s_per_message_before"],
                        "median_cpu_s_per_message_a2": doc["summary"]["median_cpu_s_per_message_a2"]}  # fmt: skip
        label = args.before_commit or "parent"
        row = plan.history_row(label, False, command + " (its --before side)", args.items, found_before,
                               doc["machine"]["load_during_run"])  # fmt: skip
        append_history(row)
    if not args.no_history:
        m = doc["machine"]
        append_history(plan.history_row(m["commit"], m["tree_modified"], command, args.items, doc["summary"],
                                        m["load_during_run"]))  # fmt: skip
    s = doc["summary"]
    log.info(
        "done in %.0f s: app/(a') %s (median %.2f), app/raw %s (median %.2f); CPU ms per message: app %.3f, "
        "(a') %.3f, raw %.3f; load mean %s",
        doc["duration_s"], fmt_list(s["app_over_a2"]), s["median_app_over_a2"] or 0, fmt_list(s["app_over_raw"]),
        s["median_app_over_raw"] or 0, (s["median_cpu_s_per_message_app"] or 0) * 1000,
        (s["median_cpu_s_per_message_a2"] or 0) * 1000, (s["median_cpu_s_per_message_raw"] or 0) * 1000,
        doc["machine"]["load_during_run"]["mean"],
    )  # fmt: skip
    return 0


def fmt_list(values: Sequence[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
