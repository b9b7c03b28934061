"""BENCHMARKS.md sections 3, 4 and 5: wake latency after idle, idle transactions, and the local physical limit
(the raw loop, and the paired rounds)."""

from __future__ import annotations

from typing import Any

from bench import report_idle
from bench.peers import LABELS
from bench.report import SYSTEMS, fmt, ms

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
  lanes listed, the depth, the leases). This run was measured before the chain existed (the commit in the
  header), so section 1 does not include it. Counted step by step from the code, not measured: for its
  200,000-item backlog an arming submit (2), a look during the drain if it lasts past the floor (about 5) and
  the look that ends the chain (6) come to 8-13 transactions, at most 0.07 per 1,000 items (8.3 would read
  about 8.4). Measured since, on today's code, the look chain and all: "Peer (a')" above, its last paragraph.
"""


def latency(doc: dict[str, Any]) -> str:
    lat = doc["latency"]
    systems = lat["systems"]
    a_p99 = systems["a"]["first_item_s"].get("p99")
    rows = [
        "## 3. Wake latency after idle",
        "",
        f"{systems['app']['submissions']} submissions of {lat['batch_items']} items each, at the same moments for "
        f"every system, after idle gaps drawn uniformly from {doc['config']['latency_gap_s'][0]:.0f}-"
        f"{doc['config']['latency_gap_s'][1]:.0f} s per lane ({doc['config']['latency_lanes']} independent instances "
        "of each peer, one queue each, so every back-off grows between its submissions). The app runs as deployed "
        "locally: the local function host with the real `function_app.py`, HTTP submit, Service Bus trigger. "
        "Latency runs from the submit's acknowledgement (the 202; for a peer, the last message stored) to the "
        "first item handled and to the batch completed, both observed by the same handler appending monotonic "
        "timestamps to a file (`bench/handlers.py`). All milliseconds.",
        "",
        "| system | completed | first item p50 | p95 | p99 | max | batch done p50 | p95 | p99 | max | (a) p99 ÷ this |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in SYSTEMS:
        s = systems[k]
        first, done = s["first_item_s"], s["batch_done_s"]
        p99 = first.get("p99")
        vs = "-" if not p99 or a_p99 is None else f"{a_p99 / p99:,.0f}x"
        rows.append(
            f"| {LABELS[k]} | {s['completed']}/{s['submissions']} | {ms(first.get('p50'))} | {ms(first.get('p95'))} | "
            f"{ms(p99)} | {ms(first.get('max'))} | {ms(done.get('p50'))} | {ms(done.get('p95'))} | "
            f"{ms(done.get('p99'))} | {ms(done.get('max'))} | {vs} |"
        )
    rows += [
        "",
        "![latency distributions](bench/results/latest-latency.png)",
        "",
        "A peer's first item can be handled before its last message is stored (a poll that lands during the "
        "enqueue of its messages): hence any negative or near-zero figures of the peers, which only favour "
        "them.",
        "",
        host_note(lat),
        "",
    ]
    return "\n".join(rows)


def host_note(lat: dict[str, Any]) -> str:
    timeline = lat.get("app_host_timeline", {})
    gap, drain = timeline.get("delivery_gap_s", {}), timeline.get("drain_duration_s", {})
    if not gap.get("count"):
        return ""
    return (
        f"Where the app's wake time goes, from the host's console: `drain` starts a median {ms(gap['p50'])} ms "
        f"(max {ms(gap['max'])}) after `submit_batch` ends, and runs a median {ms(drain['p50'])} ms "
        f"(p99 {ms(drain['p99'])}) including its lease, receive, manifest read, handler, result write and delete. "
        "The first part is Service Bus delivery through the local function host, which, like the Azure "
        "Functions host's Service Bus extension, hands each trigger message over as it arrives (one message per "
        "receive call; asking the SDK for more makes it linger 0.2 s after the first for the rest). A negative "
        "gap is a drain that started before `submit_batch` had logged its own end: the trigger is published "
        "inside it."
    )


def idle(doc: dict[str, Any]) -> str:
    idle_doc, f = doc["idle"], doc["summary"]["figures"]
    rows = [
        "## 4. Idle storage transactions per queue per day",
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
        report_idle.section(),
    ]
    return "\n".join(rows)


def raw_limit(doc: dict[str, Any]) -> str:
    raw, f = doc["raw_limit"], doc["summary"]["figures"]
    decoded = raw["with_decode"]
    levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in raw["levels"])
    decoded_levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in decoded["levels"])
    raw_fractions = f"{f['app_fraction_of_raw']:.2f} (whole session: {f['app_fraction_of_raw_wall']:.2f})"
    decoded_fraction = f"{f['app_fraction_of_raw_with_decode']:.2f}"
    chunk = doc["throughput"]["app"]["chunk_items"]
    return f"""## 5. The local physical limit

Raw GetMessages(32) + DeleteMessage on Azurite, concurrent clients (asyncio tasks with a client each, in one
process, through the same aio SDK the app uses, configured as the app's clients are), no processing, on the
app's own backlog: the same number of messages ({raw["messages_per_round"]}) of the same size
({raw["message_bytes"]:,} bytes: the app's {chunk}-item chunks, encoded as the app encodes them), because
Azurite's GetMessages slows with depth and message size.
Median of {len(raw["levels"][0]["rates"])} rounds per level. Messages/s by clients: {levels}.

**What is compared.** The app packs up to {chunk} items into one queue message, so its items/s is not comparable
with anything raw. What is comparable is *queue messages got and deleted per second* on *the same messages*:
the raw loop's best level against the messages the app's drain got and deleted between its first GetMessages
and its last DeleteMessage (the steady window of section 2; the whole session, set-up and tear-down included,
is shown too). The app must also do per message what the raw loop does not: decode the chunk's items, run the
handler, settle, and record the result (one PutBlob for many chunks: {f["app_result_blobs"]} for
{doc["throughput"]["app"]["messages"]} messages in this run). A second ceiling adds to the raw loop the part no
consumer of these messages can skip, decoding each message's items with the app's own decoder.

| | messages/s | the app's drain as a fraction |
|---|---|---|
| raw limit (GetMessages + Delete) | {fmt(f["raw_limit_messages_per_s"], 0)} | {raw_fractions} |
| raw + decode each message's {chunk} items | {fmt(f["raw_with_decode_messages_per_s"], 0)} | {decoded_fraction} |
| the app's drain, steady window | {fmt(f["app_messages_per_s"], 1)} | |
| the app's drain, whole session | {fmt(f["app_messages_per_s_wall"], 1)} | |

With decoding, by clients: {decoded_levels}.
{paired_text(doc)}"""


def paired_text(doc: dict[str, Any]) -> str:
    paired = doc.get("paired")
    if not paired:
        return ""
    rounds = "; ".join(
        f"{p['raw_messages_per_s']:.0f} / {p['app_messages_per_s']:.0f} ({p['ratio']:.2f})" for p in paired["rounds"]
    )
    return f"""
**Paired rounds.** The ratio above sets a raw figure from the start of the run against one drain minutes later.
To see both sides at the same moment, {len(paired["rounds"])} rounds each ran the raw loop ({paired["clients"]}
clients, {paired["messages_per_round"]} of the app's messages) and, right after, the app's drain of a fresh backlog
of the same size (`bench/paired.py`). Raw / app messages/s (ratio) by round: {rounds}. **Median ratio:
{paired["median_ratio"]:.2f}.**
"""


def paired_phrase(f: dict[str, Any]) -> str:
    median = f.get("paired_median_fraction_of_raw")
    return "" if median is None else f" (in paired rounds, raw and app back to back: a median {median:.0%})"
