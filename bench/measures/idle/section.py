"""BENCHMARKS.md section 4: idle transactions per queue per day, simulated and real, and the host's own traffic
not counted at the client."""

from __future__ import annotations

from typing import Any

from bench.peers import LABELS
from bench.tools.results import SYSTEMS, run_source

HOST_OVERHEADS = """\
**Host-side storage traffic not counted at the client** (the Functions host's own, from the WebJobs SDK and
Functions host sources; added up per app below):

- Every Functions app: the primary-host lock, a 15 s blob lease on `locks/{hostId}/host` renewed 3 s before
  expiry (every 12 s: about 7,200 renewals a day by the primary instance; other instances retry every 5 s)
  — `PrimaryHostCoordinator` (azure-functions-host).
- queue-drain only: the timer's singleton listener lock, a 60 s blob lease (`SingletonOptions.ListenerLockPeriod`)
  renewed at half its period (`SingletonManager.CreateLeaseRenewalTimer`): about 2,880 renewals a day, plus one
  acquire attempt a minute by each other instance (`ListenerLockRecoveryPollingInterval`). The schedule monitor
  would add a status-blob write per run (1,440 a day at one a minute); `fallback_poll` sets `use_monitor=False`.
- (a) only: with runtime scale monitoring (Premium), the queue's scale monitor samples every 10 s
  (`ScaleOptions.ScaleMetricsSampleInterval`): a GetQueueProperties (and a peek when the queue is not empty),
  about 8,640 a day per queue; on Consumption the platform's scale controller probes the queue itself.
- queue-drain's push path costs Service Bus operations, not storage ones: one message per submit, plus a
  scheduled watchdog and its cancellation per drain session, and a scheduled look per queue per minute while
  the queue holds messages (the look chain, `shared.watch.lookout`). Its storage side is one GetBlob per submit, a
  PutBlob when a submit arms it, and about 6 transactions per look (the chain blob read and written, the
  lanes listed, the depth, the leases). This run was measured before the chain existed (its commit above), so
  section 1 does not include it. Counted step by step from the code, not measured: for its
  200,000-item backlog an arming submit (2), a look during the drain if it lasts past the floor (about 5) and
  the look that ends the chain (6) come to 8-13 transactions, at most 0.07 per 1,000 items (8.3 would read
  about 8.4). Measured since, on today's code, the look chain and all: "Peer (a')" below, its last paragraph.
"""


def idle(doc: dict[str, Any]) -> str:
    idle_doc, f = doc["idle"], doc["summary"]["figures"]
    rows = [
        "## 4. Idle storage transactions per queue per day",
        "",
        run_source(doc),
        "",
        "Per day: each policy's real code driven by a simulated clock for 24 hours (the peers' loops on an "
        "always-empty simulated queue that counts each call; the app's real `fallback.poll` against the real "
        "Azurite once per timer tick, with the simulated time as `clock_ms`). Cross-check: the same code in real "
        "time on queues that never get work, counted at the client (the app: its own counter, read from "
        "`/api/queues` of a host of its own, less the cost of reading it), beside the simulation of the same span "
        "(the app's ticks aligned to the real host's minute boundaries).",
        "",
        "| system | per day (simulated) | ÷ (a) | real-time window | real count | simulated count, same window |",
        "|---|---|---|---|---|---|",
    ]
    for k in SYSTEMS:
        i = idle_doc[k]
        rows.append(
            f"| {LABELS[k]} | {i['per_day']:,} | {f['idle_fraction_of_a'][k]:.3f} | {i['window_s'] / 60:.1f} min | "
            f"{i['real_window_total']:,} | {i['simulated_window_total']:,} |"
        )
    app_ops = ", ".join(f"{op} {n}" for op, n in idle_doc["app"]["simulated_day"].items())
    rows += [
        "",
        f"The app's simulated day by operation: {app_ops} (a depth read per back-off interval, which doubles from "
        "1 to 30 minutes; the back-off state blob is written only while the interval changes). This run ticks the "
        "timer every minute, as an instance that is alive anyway does, so the back-off sets the count; with the "
        "default schedule (every 6 hours) each tick finds the queue due and a queue's own looks are about 8 a "
        "day (Idle per app, below). "
        f"(a) idles at its 60 s cap: one GetMessages a minute. (d) reads the depth on every empty poll, as the "
        "paper's `QueryState()` does, so it costs two transactions a second.",
        "",
        HOST_OVERHEADS,
    ]
    return "\n".join(rows)
