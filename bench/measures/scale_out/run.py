"""`python -m bench.scale_out`: N local hosts on one Azurite stand for N instances; does the work spread?

Each round starts Azurite, the Service Bus stand-in and N local hosts running the unchanged function_app.py (the
app's own host.json and defaults; only the handler is the CPU-bound bench handler, about 1 ms of CPU per item),
submits one backlog and times it from the submit's answer to the last item handled. The hosts share nothing but
the services, as instances on Azure do; the scale-out events the first drainer publishes are what reaches the
others. Reported: seconds per round, the speed-up of N hosts over one, and each host's share of the items.

On this 2-core machine two hosts are the most that can run at full speed (Azurite and the broker share the
cores too); the platform model (`bench.platform`) answers for more instances.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.measures.throughput.run import submit_backlog
from bench.tools.config import app_env, trigger_queue
from bench.tools.handlers import CPU_MS_ENV
from bench.tools.stack import Stack

log = logging.getLogger("bench.measures.scale_out.run")
RESULTS = Path(__file__).resolve().parents[2] / "results"


def shares(record: Path) -> tuple[Counter[str], float]:
    """Items per host process, and the monotonic time of the last item."""
    per_pid: Counter[str] = Counter()
    last = 0.0
    for line in record.read_text().splitlines() if record.exists() else []:
        t, pid, n = line.split()
        per_pid[pid] += int(n)
        last = max(last, float(t))
    return per_pid, last


async def one_round(hosts: int, items: int, cpu_ms: float, run_dir: Path, timeout_s: float) -> dict[str, Any]:
    token = uuid.uuid4().hex[:8]
    role = f"scale{hosts}"
    record = run_dir / f"record-{hosts}.log"
    stack = Stack(run_dir / role, [trigger_queue(role, token)])
    try:
        stack.start()
        env = app_env(stack.storage, stack.servicebus, role, token, HANDLER="bench.tools.handlers:cpu")
        host_env = env | {"BENCH_RECORD_FILE": str(record), CPU_MS_ENV: str(cpu_ms)}
        for n in range(hosts):
            # One app, N instances: the same host id, as on Azure.
            stack.host(f"{role}-{n}", host_env | {"AzureFunctionsWebHost__hostid": f"scale-{token}"})
        submitted = await submit_backlog(env, items, role)
        started = time.monotonic()
        while True:
            per_pid, last = shares(record)
            if sum(per_pid.values()) >= items:
                break
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{hosts} host(s): {sum(per_pid.values())} of {items} items in {timeout_s:.0f} s")
            await asyncio.sleep(0.2)
        seconds = last - started
        log.info("%d host(s): %d items in %.1f s, shares %s", hosts, items, seconds, sorted(per_pid.values()))
        return {
            "hosts": hosts,
            "items": items,
            "chunks": submitted["chunks"],
            "seconds": round(seconds, 2),
            "items_per_s": round(items / seconds, 1),
            "host_shares": sorted(per_pid.values(), reverse=True),
        }
    finally:
        stack.stop_all()


async def measure(items: int, cpu_ms: float, rounds: int, run_dir: Path) -> dict[str, Any]:
    timeout_s = max(120.0, items * cpu_ms / 1000 * 4)
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for r in range(rounds):
        for hosts in (1, 2):
            (run_dir / f"round-{r}" / f"scale{hosts}").mkdir(parents=True, exist_ok=True)
    for r in range(rounds):  # alternate, so drift on a shared machine falls on both
        for hosts in (1, 2) if r % 2 == 0 else (2, 1):
            runs[hosts].append(await one_round(hosts, items, cpu_ms, run_dir / f"round-{r}", timeout_s))
    best = {h: min(x["seconds"] for x in rs) for h, rs in runs.items()}
    return {
        "items": items,
        "cpu_ms_per_item": cpu_ms,
        "rounds": runs,
        "best_seconds": best,
        "speed_up_2_over_1": round(best[1] / best[2], 2),
        "every_host_served": all(len(x["host_shares"]) == x["hosts"] for rs in runs.values() for x in rs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=120_000)
    parser.add_argument("--cpu-ms-per-item", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=RESULTS / "scale_out.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_dir = RESULTS / "runs" / f"scale-out-{time.strftime('%Y%m%d-%H%M%S')}"
    result = asyncio.run(measure(args.items, args.cpu_ms_per_item, args.rounds, run_dir))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
