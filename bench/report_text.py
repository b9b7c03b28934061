"""BENCHMARKS.md, written from a full run's document (`make bench` regenerates it)."""

from __future__ import annotations

from typing import Any

from bench.peers import LABELS
from bench.report import PEERS, SYSTEMS, fmt, ms

HOST_OVERHEADS = """\
**Host-side storage traffic not counted at the client** (the Functions host's own, from the WebJobs SDK and
Functions host sources; the same for both apps unless said otherwise):

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
  scheduled watchdog and its cancellation per drain session.
"""


def render(doc: dict[str, Any]) -> str:
    parts = [
        header(doc),
        targets(doc),
        transactions(doc),
        throughput(doc),
        latency(doc),
        idle(doc),
        raw_limit(doc),
        memory(doc),
        findings(doc),
        method(doc),
    ]
    return "\n".join(parts).rstrip() + "\n"


def header(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return f"""# Benchmarks

queue-drain (push drain + fallback, default settings) side by side with four polling peers, measured in one run
on one Azurite and one Service Bus stand-in, so machine noise cancels out in the ratios. Absolute times are from
a shared {m["cores"]}-core machine and are noisy; compare the ratios.

- Command: `{doc["command"]}` (from a fresh clone; it runs `make setup` first). This run took
  {doc["duration_s"] / 60:.1f} minutes, started {doc["started_at"]}.
- Machine: {m["cpu"]}, {m["cores"]} cores, {m["memory_gib"]} GiB, {m["os"]}, Python {m["python"]}, Node {m["node"]},
  Azurite {m["azurite"]}; commit `{(m["commit"] or "?")[:12]}`{" (with local changes)" if m["tree_modified"] else ""}.
- Every figure is in [`bench/results/latest.json`](bench/results/latest.json).

Peers (in `bench/peers/`, each faithful to its documented algorithm):

| | what it is |
|---|---|
{peer_table()}
"""


ALGORITHMS = {
    "a": "WebJobs SDK `QueueListener`: GetMessages 16, next batch at <= 8 in flight, back-off "
    "`100 ms + U(0.8,1.2)·2^(k-1)·100 ms` capped at 60 s, 10-min visibility, poison after 5 dequeues",
    "b": "GetMessages of 1; handle and delete; sleep 1 s when empty",
    "c": "GetMessages of 1; when empty sleep 1 s, 2 s, 4 s ... 60 s; reset on a message",
    "d": "GetMessages 32; `min(floor + (2^idle-1)·100 ms·U(0.8,1.2), 1 s)`; depth read per empty poll "
    "(`QueryState`); 10/50/100 dequeue tasks by depth",
}


def peer_table() -> str:
    return "\n".join(f"| {LABELS[k]} | {ALGORITHMS[k]} |" for k in PEERS)


def targets(doc: dict[str, Any]) -> str:
    rows = ["## Targets", "", "| target | figure | met |", "|---|---|---|"]
    for t in doc["summary"]["targets"]:
        figure = t["figure"]
        if "fraction" in t["target"] or "1/15" in t["target"] or "70%" in t["target"]:
            shown = "-" if figure is None else f"{figure:.3f}"
        else:
            shown = fmt(figure)
        rows.append(f"| {t['target']} | {shown} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(rows) + "\n"


def transactions(doc: dict[str, Any]) -> str:
    tput, f = doc["throughput"], doc["summary"]["figures"]
    rows = [
        "## 1. Storage transactions per 1,000 items",
        "",
        "Enqueue (or submit) through completion, counted at the client by billable operation, on the throughput "
        "backlogs of section 2.",
        "",
        "| system | per 1,000 items | (a) ÷ this | by operation (whole backlog) |",
        "|---|---|---|---|",
    ]
    for k in SYSTEMS:
        ops = ", ".join(f"{op} {n:,}" for op, n in tput[k]["transactions"].items())
        rows.append(
            f"| {LABELS[k]} | {fmt(f['transactions_per_1000'][k])} | "
            f"{fmt(f['fewer_transactions_than_a'][k])}x | {ops} |"
        )
    rows += ["", "![transactions per 1,000 items](bench/results/latest-transactions.png)", ""]
    return "\n".join(rows)


def throughput(doc: dict[str, Any]) -> str:
    tput = doc["throughput"]
    app = tput["app"]
    a_rate = tput["a"]["items_per_s"]
    rows = [
        "## 2. Drain throughput (no-op handler)",
        "",
        f"The app drains a backlog of {app['items']:,} items ({app['messages']} messages of "
        f"{app['chunk_items']} items, "
        f"the default `CHUNK_MAX_ITEMS`) with one `Drainer` in a fresh process; it was submitted through the app's "
        f"own `submit` in {fmt(app['submit']['seconds'])} s. The peers get one message per item, so on Azurite, "
        f"whose GetMessages slows with depth, their backlog is {tput['a']['items']:,} items (the same items). "
        "Times run from the drain's start (the app: the whole drain session, set-up and lease included; a peer: "
        "its first receive) to the last delete.",
        "",
        "| system | backlog items | seconds | items/s | messages/s | ÷ (a) items/s |",
        "|---|---|---|---|---|---|",
    ]
    for k in SYSTEMS:
        t = tput[k]
        rows.append(
            f"| {LABELS[k]} | {t['items']:,} | {fmt(t['drain_seconds'], 2)} | {fmt(t['items_per_s'], 0)} | "
            f"{fmt(t['messages_per_s'], 1)} | {fmt(t['items_per_s'] / a_rate)}x |"
        )
    return "\n".join(rows) + "\n"


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
        "enqueue), which only favours the peers.",
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
        "The first part is the local function host, not the app: it receives trigger messages with "
        "`receive_messages(max_message_count=16, max_wait_time=1)`, and the azure-servicebus SDK keeps a receive "
        "open for a further 0.2 s after the first message arrives to fill the batch "
        "(`_further_pull_receive_timeout` in `receiver_mixins.py`). The Azure Functions host's Service Bus "
        "extension hands each message to the function as it arrives, so deployed, this part is the broker's "
        "delivery time only."
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
        "1 to 30 minutes; the back-off state blob is written only while the interval changes). "
        f"(a) idles at its 60 s cap: one GetMessages a minute. (d) reads the depth on every empty poll, as the "
        "paper's `QueryState()` does, so it costs two transactions a second.",
        "",
        HOST_OVERHEADS,
    ]
    return "\n".join(rows)


def raw_limit(doc: dict[str, Any]) -> str:
    raw, f = doc["raw_limit"], doc["summary"]["figures"]
    blob = raw["with_result_blob"]
    levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in raw["levels"])
    blob_levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in blob["levels"])
    blob_rate = fmt(f["raw_with_result_blob_messages_per_s"], 0)
    blob_fraction = f"{f['app_fraction_of_raw_with_result_blob']:.2f}"
    return f"""## 5. The local physical limit

Raw GetMessages(32) + DeleteMessage on Azurite, concurrent clients, no processing, on the app's own backlog
shape ({raw["messages_per_round"]} messages of {raw["message_bytes"]:,} bytes, median of
{len(raw["levels"][0]["rates"])} rounds per level). Messages/s by clients: {levels}.

| | messages/s | the app's drain as a fraction |
|---|---|---|
| raw limit (GetMessages + Delete) | {fmt(f["raw_limit_messages_per_s"], 0)} | {f["app_fraction_of_raw"]:.2f} |
| raw + one result PutBlob per message (the app's storage pattern) | {blob_rate} | {blob_fraction} |
| the app's drain | {fmt(f["app_messages_per_s"], 1)} | |

With the result blob ({raw["result_blob_bytes"]:,} bytes, the app's own result document for a chunk of 500
successes) by clients: {blob_levels}.
"""


def memory(doc: dict[str, Any]) -> str:
    tput = doc["throughput"]
    rows = [
        "## 6. Peak RSS of the draining process",
        "",
        "VmHWM of the draining process (a fresh process for each drain).",
        "",
        "| system | backlog items | peak RSS MB |",
        "|---|---|---|",
    ]
    rows += [f"| {LABELS[k]} | {tput[k]['items']:,} | {fmt(tput[k]['peak_rss_mb'])} |" for k in SYSTEMS]
    return "\n".join(rows) + "\n"


def findings(doc: dict[str, Any]) -> str:
    f = doc["summary"]["figures"]
    missed = [t for t in doc["summary"]["targets"] if not t["met"]]
    lines = ["## Missed targets and their causes", ""]
    if not missed:
        lines.append("None: every target is met in this run.")
    for t in missed:
        lines.append(f"- **{t['target']}**: missed, {t['figure']:.3g} in this run.")
    profile = doc.get("profile")
    if any("latency" in t["target"] for t in missed):
        lines += [
            "",
            "**Wake latency.** About 200 ms of every app wake-up is the local function host's Service Bus receive "
            "(section 3), which waits a further 0.2 s after the first trigger message to fill a batch; the app's "
            "own drain takes tens of milliseconds. Proposed (to the local host's owner): receive one message at a "
            "time, e.g. `async for message in receiver`, which yields each message as it arrives, as the Azure "
            "Functions host does.",
        ]
    lines += [
        "",
        f"**Message rate against the raw limit.** The app drains {fmt(f['app_messages_per_s'], 1)} messages/s, "
        f"{f['app_fraction_of_raw']:.0%} of the raw GetMessages+Delete limit. The cause is first the app's design "
        "and then Azurite on two cores, not a hot spot in the drain loop:",
        "",
        "1. Per message the app must do one more write than the raw loop: the chunk's result blob (idempotent "
        "results, so a redelivered chunk never counts twice). Adding exactly that PutBlob to the raw loop alone "
        f"brings the limit down to {fmt(f['raw_with_result_blob_messages_per_s'], 0)} messages/s; the app reaches "
        f"{f['app_fraction_of_raw_with_result_blob']:.0%} of that. The blob's size does not matter (the same test "
        "with a 16-byte blob gave the same rate): Azurite, a single Node process, pays per request.",
        "2. The drain process is not CPU-bound: under pyinstrument it spends most of its wall time waiting "
        "(`epoll`) on Azurite, and its own CPU (decoding 500 items per message, building the result document, "
        "SDK request handling) runs on the same two cores as Azurite.",
    ]
    if profile:
        lines += [
            "",
            f"pyinstrument on a {profile['items']:,}-item drain ({fmt(profile['seconds_under_profiler'], 2)} s under "
            "the profiler), top of the call tree:",
            "",
            "```",
            *profile_excerpt(profile["profile_text"]),
            "```",
        ]
    lines += [
        "",
        "Proposed to the lead (the drain engine is the lead's): the 70 % target cannot be met while every chunk "
        "writes its own result blob, because that write alone halves the ceiling. Options: write one result blob "
        "per receive page (up to 32 chunks; a redelivered chunk then needs de-duplication by chunk id when status "
        "is read), or let handlers that return no values skip per-item results (counts in the blob's metadata "
        "only). Raising `CHUNK_CONCURRENCY` from 16 to 64 gained about 13 % in a trial (tuning, not a cure).",
        "",
    ]
    return "\n".join(lines)


def profile_excerpt(text: str, lines: int = 28) -> list[str]:
    body = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(body) if "Handle._run" in line or "Drainer" in line), 0)
    return body[max(0, start - 2) : start + lines]


def method(doc: dict[str, Any]) -> str:
    c = doc["config"]
    return f"""## How it is measured

- `make bench` (`python -m bench`) starts Azurite, the Service Bus stand-in, two local function hosts and one
  process per peer, each on free loopback ports, and stops each by its own pid. Sizes of this run: app backlog
  {c["app_backlog_items"]:,} items, peer backlog {c["peer_backlog_items"]:,} items, {c["latency_lanes"]} lanes x
  {c["latency_per_lane"]} submissions of {c["latency_batch_items"]} items, real-time idle run
  {c["idle_real_s"] / 60:.1f} min. `make bench-quick` runs the same at small sizes (under 5 minutes) and writes
  `bench/results/quick.json`.
- Peers are real code against the real Azurite through the azure-storage-queue aio SDK; their polling loops take
  an injectable clock, so the same code runs in real time and on a simulated day. Transactions are counted by the
  app's own `TransactionCounter` policy (`raw_request_hook`) on every client.
- Logs, handler records and service data of each run are in `bench/results/runs/` (not committed).
"""
