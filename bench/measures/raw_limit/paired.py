"""The message-rate ratio in paired rounds: the raw loop and the app's drain back to back, several times.

Section 5's headline ratio sets the raw loop's best level (the median of its rounds, measured at the start of the
run) against one drain of the app, minutes later. On a shared machine the load moves in between; here each round runs
the raw loop at that best level on the app's own messages and, right after, the app's drain of a fresh backlog of the
same size (submitted through `submit`, drained by `bench.measures.throughput.drain_process`), so both sides of each
ratio see the same moment. The median of the rounds' ratios is reported beside the headline."""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

from bench.measures.raw_limit import run as raw_limit
from bench.measures.throughput.run import drain_app, submit_backlog
from bench.tools.config import app_env

log = logging.getLogger(__name__)


async def measure(
    storage: str, servicebus: str, token: str, items: int, clients: int, rounds: int, run_dir: Path
) -> dict[str, Any]:
    env = app_env(storage, servicebus, "paired", token, HANDLER="shared.handlers.noop:handle")
    texts = raw_limit.chunk_texts(raw_limit.messages_for(items))
    pairs = []
    for n in range(rounds):
        [level] = await raw_limit.levels(storage, f"paired-raw-{token}", texts, (clients,), 1, decode=False)
        raw = level["median"]
        await submit_backlog(env, items, f"paired{n}")
        drained = drain_app(env, run_dir, f"paired-{n}")
        app = drained["report"]["messages"] / (drained["steady_seconds"] or drained["seconds"])
        pairs.append({"raw_messages_per_s": raw, "app_messages_per_s": app, "ratio": app / raw})
        log.info("paired round %d: raw %.0f, app %.0f messages/s: %.2f", n + 1, raw, app, app / raw)
    return {
        "clients": clients,
        "messages_per_round": len(texts),
        "rounds": pairs,
        "median_ratio": statistics.median(p["ratio"] for p in pairs),
    }
