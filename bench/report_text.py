"""BENCHMARKS.md, written from a full run's document (`make bench` regenerates it)."""

from __future__ import annotations

from typing import Any

from bench import cost, report_flow, report_idle, report_platform, report_tracing
from bench.peers import LABELS
from bench.profile_parts import OTHER
from bench.report import PEERS, SYSTEMS, fmt, ms

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
  about 8.4).
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
        report_tracing.section(),
        report_flow.section(),
        report_platform.section(),
        findings(doc),
        method(doc),
        cost.section(),
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
  Azurite {m["azurite"]}; {commits(m)}.
- Load: the machine is shared with other engineers' test suites. {load_line(m)} Azurite, the Service Bus
  stand-in, the function hosts, the peers and the drain all share those {m["cores"]} cores.
- Every figure is in [`bench/results/latest.json`](bench/results/latest.json).

Peers (in `bench/peers/`, each faithful to its documented algorithm):

| | what it is |
|---|---|
{peer_table()}
"""


def commits(m: dict[str, Any]) -> str:
    def one(commit: str | None, modified: bool) -> str:
        return f"`{(commit or '?')[:12]}`" + (" with uncommitted changes" if modified else "")

    end = one(m["commit"], m["tree_modified"])
    if "commit_at_start" not in m:
        return f"commit {end}"
    start = one(m["commit_at_start"], m["tree_modified_at_start"])
    if start == end:
        return f"commit {end}"
    return (
        f"commit {start} at the start and {end} at the end (the working tree is shared: other engineers "
        "committed during the run, so later phases ran newer code)"
    )


def load_line(m: dict[str, Any]) -> str:
    load = m.get("load_during_run") or {}
    if not load.get("samples"):
        return ""
    return (
        f"The 1-minute load average during the run, sampled every {load['every_s']:.0f} s: mean "
        f"{load['mean']:.2f}, max {load['max']:.2f} (these figures include the benchmark's own processes)."
    )


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
        f"own `submit` in {fmt(app['submit']['seconds'])} s. The peers get the same items, one message each, "
        "measured twice: a full drain of a smaller backlog "
        f"({tput['a']['items']:,} items: its time, transactions and memory), and their rate on a "
        f"{deep_items(doc)} backlog (the table after this one; a full drain of that many one-message items would "
        "take a peer hours or days on Azurite). The app's "
        f"{app['items']:,} items make a queue only "
        f"{app['messages']:,} messages deep.",
        "",
        "Times run from the drain's start to its last delete (the app: the whole drain session in a fresh process, "
        "set-up, lease and a cold Service Bus connection for its watchdog included; a peer: its first receive).",
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
    rows += [
        "",
        f"The app's drain in detail: its first GetMessages came {fmt(app['drain_set_up_seconds'], 3)} s after "
        f"the start; from there to its last DeleteMessage (the steady window) took {fmt(app['steady_seconds'], 2)} s: "
        f"{fmt(app['items'] / app['steady_seconds'], 0)} items/s, {fmt(app['messages_per_s_steady'], 1)} "
        f"messages/s. The process used {fmt(app['drain_cpu_seconds'], 2)} s of CPU in "
        f"{fmt(app['drain_seconds'], 2)} s ({app['drain_cpu_seconds'] / app['drain_seconds']:.0%} of one core; "
        "the rest is waiting, on Azurite and, on a loaded machine, for a core). "
        "Where it goes: the last section, under the message rate.",
    ]
    rows += deep_rows(doc)
    if app.get("watchdog_publish_failures"):
        rows += [
            "",
            f"In this drain the Service Bus watchdog could not be scheduled ({app['watchdog_publish_failures']} "
            "warning in its log): the drain schedules it alongside its first receive, and in a fresh process the "
            "sender's first AMQP handshake with the local stand-in timed out while the drain kept both cores busy; "
            "the SDK gave up (`'NoneType' object has no attribute 'create_sender_link'`). The drain itself is "
            "unaffected, and a session longer than one lease renewal schedules it again (`_keep_watchdog_ahead`); "
            "a shorter one runs without crash cover beyond the fallback. Waiting for the handshake before the second "
            "receive did not prevent it here (tried, reverted): it needs the handshake to finish before the drain "
            "starts at all, which puts the round trip back on the wake-up path. Left as is, noted for the owner "
            "of the drain engine.",
        ]
    return "\n".join(rows) + "\n"


def rate(items_per_s: float | None) -> str:
    """Items/s with the digits a slow rate needs (a peer on a deep Azurite queue drains a few items a minute)."""
    if items_per_s is None:
        return "-"
    return fmt(items_per_s, 0 if items_per_s >= 100 else 1 if items_per_s >= 1 else 2)


def times(ours: float, theirs: float | None) -> str:
    return f"{fmt(ours / theirs, 0)}x" if theirs else "-"


def hours_range(hours: list[float] | None) -> str:
    if not hours:
        return "- (nothing drained in the window)"
    low, high = hours
    if high < 1:
        return f"{fmt(low * 60)}-{fmt(high * 60)} min"
    return f"{fmt(low, 1)}-{fmt(high, 1)} h" if high < 48 else f"{fmt(low / 24, 1)}-{fmt(high / 24, 1)} days"


def deep_items(doc: dict[str, Any]) -> str:
    deep = doc.get("deep_backlog")
    return f"{deep['items']:,}-item" if deep else "200,000-item (not measured in this run)"


def deep_rows(doc: dict[str, Any]) -> list[str]:
    """The peers' rates on the deep backlog: one queue, each peer draining it for a window in turn."""
    deep = doc.get("deep_backlog")
    if not deep:
        return []
    app = doc["throughput"]["app"]
    rows = [
        "",
        f"**The peers on a {deep['items']:,}-item backlog.** One queue holds {deep['items']:,} items, one message "
        f"each (stored in {fmt(deep['enqueue_seconds'], 0)} s); each peer in turn drains it for "
        f"{fmt(deep['window_s'], 0)} s in a fresh process, so every rate is taken at that depth (the queue "
        f"held {deep['depth_at_end']:,} messages at the end). Azurite's GetMessages costs more the deeper the "
        "queue (compare these rates with the full drains above), so a full drain's time is estimated as a range: "
        "the depth over the measured rate if that rate held, half of it if each receive's cost fell in proportion "
        "to the depth left. The depth effect is Azurite's (Azure Storage's published target for one queue, 2,000 "
        "messages/s, does not depend on depth), so on Azure the gap would be narrower than this table shows and "
        "nearer the full drains' above; it is still the drain these peers would do on the local stack users run. "
        f"The app's figures are its full drain from the table above (its {app['items']:,} items are "
        f"{app['messages']:,} messages).",
        "",
        "| system | depth at its start | items in the window | items/s | app ÷ this | full drain of "
        f"{deep['items']:,}, estimated | peak RSS MB |",
        "|---|---|---|---|---|---|---|",
        f"| {LABELS['app']} | {app['messages']:,} messages ({app['items']:,} items) | {app['items_ok']:,} (all) | "
        f"{fmt(app['items_per_s'], 0)} | 1.0x | {fmt(app['drain_seconds'], 2)} s (measured) | "
        f"{fmt(app['peak_rss_mb'])} |",
    ]
    for k in PEERS:
        d = deep[k]
        rows.append(
            f"| {LABELS[k]} | {d['depth_at_start']:,} | {d['items_ok']:,} | {rate(d['items_per_s'])} | "
            f"{times(app['items_per_s'], d['items_per_s'])} | {hours_range(d['full_drain_hours_estimate'])} | "
            f"{fmt(d['peak_rss_mb'])} |"
        )
    return rows


def cpu_phrase(app: dict[str, Any]) -> str:
    share = app["drain_cpu_seconds"] / app["drain_seconds"]
    if share >= 0.7:
        return "The drain process is CPU-bound"
    if share >= 0.5:
        return "The drain process spends most of its time on CPU"
    return "The drain process spends less than half its time on CPU"


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


def memory(doc: dict[str, Any]) -> str:
    tput = doc["throughput"]
    rows = [
        "## 6. Peak RSS of the draining process",
        "",
        "VmHWM of the draining process (a fresh process for each drain).",
        "",
        "| system | backlog items | peak RSS MB | on the deep backlog (section 2) |",
        "|---|---|---|---|",
    ]
    deep = doc.get("deep_backlog") or {}
    for k in SYSTEMS:
        on_deep = fmt(deep[k]["peak_rss_mb"]) if k in deep else ("the same drain" if k == "app" else "-")
        rows.append(f"| {LABELS[k]} | {tput[k]['items']:,} | {fmt(tput[k]['peak_rss_mb'])} | {on_deep} |")
    return "\n".join(rows) + "\n"


def findings(doc: dict[str, Any]) -> str:
    f, app = doc["summary"]["figures"], doc["throughput"]["app"]
    missed = [t for t in doc["summary"]["targets"] if not t["met"]]
    lines = ["## Missed targets and their causes", ""]
    if not missed:
        lines.append("None: every target is met in this run.")
    for t in missed:
        lines.append(f"- **{t['target']}**: missed, {t['figure']:.3g} in this run.")
    if any("latency" in t["target"] for t in missed):
        lines += ["", latency_cause(doc)]
    rate_missed = any("70%" in t["target"] for t in missed)
    if rate_missed:
        lines += ["", *rate_cause(doc, f, app)]
    text = "\n".join(lines) + "\n"
    if not rate_missed:  # met: where the time goes, and what was fixed to get there, still belongs here
        text += "\n## The message rate: where the drain's time goes\n\n" + "\n".join(rate_cause(doc, f, app)) + "\n"
    return text


def latency_cause(doc: dict[str, Any]) -> str:
    timeline = doc["latency"].get("app_host_timeline", {})
    gap, drain = timeline.get("delivery_gap_s", {}), timeline.get("drain_duration_s", {})
    return (
        "**Wake latency.** The app's own part of a wake-up is the `drain` function (lease, receive, manifest "
        "read, handler, result write, delete, lease release, one last look at the queue): a median "
        f"{ms(drain.get('p50'))} ms for the whole function (p99 {ms(drain.get('p99'))}), and the first item is "
        "handled before its end (section 3). The larger part, "
        f"a median {ms(gap.get('p50'))} ms (max {ms(gap.get('max'))}) between `submit_batch` ending and `drain` "
        "starting, is Service Bus delivery through the local function host, which receives one message per call "
        f"as the Azure Functions host's extension does. {wake_spread(doc)} The remainder is the shared machine's "
        "load (section header)."
    )


def wake_spread(doc: dict[str, Any]) -> str:
    samples = sorted(doc["latency"]["systems"]["app"]["first_item_samples_s"])
    if not samples:
        return ""
    fast = [x for x in samples if x < 0.1]
    return (
        f"Of {len(samples)} wake-ups, {len(fast)} took under 100 ms; the slowest took "
        f"{', '.join(f'{x * 1000:.0f}' for x in samples[-3:])} ms."
    )


def rate_cause(doc: dict[str, Any], f: dict[str, Any], app: dict[str, Any]) -> list[str]:
    profile = doc.get("profile")
    lines = [
        f"**Message rate against the raw limit.** Steady, the app drains {fmt(f['app_messages_per_s'], 1)} "
        f"messages/s, {f['app_fraction_of_raw']:.0%} of the raw GetMessages+Delete rate on the same messages"
        f"{paired_phrase(f)}; the target is 70%. Found by profiling (pyinstrument, below; py-spy and the "
        "collector's callbacks, point 3) and by the CPU clock:",
        "",
        f"1. **{cpu_phrase(app)}.** It used "
        f"{fmt(app['drain_cpu_seconds'], 2)} s of CPU in a {fmt(app['drain_seconds'], 2)} s drain "
        f"({f['app_drain_cpu_share']:.0%} of a core), on two cores it shares with Azurite (a single Node "
        "process, itself busy with every request) and the Service Bus stand-in. "
        "The raw loop spends its CPU on one DeleteMessage per message (plus 1/32 of a GetMessages); the app spends "
        "it on that and on the work the design asks of it per message.",
        f"2. **Per message the app does more than the raw loop, by design**: {per_message_ms(app):.1f} ms of CPU "
        f"per message, where the raw loop takes {1000 / f['raw_limit_messages_per_s']:.1f} ms of wall time per "
        f"message in all. It decodes the chunk (the JSON of its {app['chunk_items']} items; base64 and gunzip first "
        "if it had to be compressed to fit), runs the handler, "
        "settles each item, records the result and deletes. The result records cost little now: the drain "
        "group-commits them, one PutBlob for the chunks that settle while the previous write is in flight "
        f"({f['app_result_blobs']} PutBlob for {app['messages']} messages). {decode_ceiling(f)}",
        "3. **What profiling found that was ours, and is fixed in this run.** Sampling CPU (py-spy) instead of "
        "wall time, and the garbage collector's own callbacks, showed three costs that the wall-clock profile "
        "below spreads over its last row: (i) the SDK's aiohttp transport, at its default `use_env_settings`, "
        "made two thread-pool hops per request to look up `~/.netrc` and the proxy environment, about a third of "
        "the CPU of each DeleteMessage; the app's clients now resolve the proxy once, when built "
        "(`shared/core/proxies.py`), and the raw loop and the peers use the same client configuration, so the raw "
        "limit rose with it; (ii) the collector ran after nearly every message (a message allocates about a "
        "thousand objects, Python collects every 700) and now and then walked the whole heap, 0.3-0.5 ms of CPU "
        "per message, now about 0.1 ms (`GC_GEN0_THRESHOLD`, 20,000 by default); (iii) the items' JSON: msgspec "
        "decodes it in about 60% of the time, and the standard library takes over for what msgspec refuses "
        "(NaN, numbers beyond a double, lone surrogates), so every item decodes to the same value as before. "
        "Measured by hand before they were committed (drains of 200,000 items, each paired with a raw round on "
        "the same Azurite; scratch scripts, not part of `make bench`): the app's CPU per message fell from "
        "2.1-3.1 ms to 1.3-1.7 ms and its rate rose from 260-440 to 450-640 messages/s, while the raw loop, "
        "given the same client fix, rose from about 700 to 780-1,000 messages/s.",
    ]
    if profile:
        total = sum(profile["parts_s"].values())
        lines += [
            "",
            f"Where a profiled {profile['items']:,}-item drain's time went: {fmt(total, 2)} s of wall time sampled "
            f"by pyinstrument (process start to end; the drain itself {fmt(profile['seconds_under_profiler'], 2)} s), "
            f"{fmt(profile['cpu_seconds_under_profiler'], 2)} s of it CPU; the profiler slows it down. Each part "
            "includes the SDK and network code it calls:",
            "",
            "| part of the work | seconds | share |",
            "|---|---|---|",
            *[f"| {part_label(part)} | {sec:.3f} | {sec / total:.0%} |" for part, sec in profile["parts_s"].items()],
            "",
            "Top of the call tree:",
            "",
            "```",
            *profile_excerpt(profile["profile_text"]),
            "```",
        ]
    lines += [
        "",
        "What was ours to fix is fixed: each chunk used to write its own result blob (the drain now "
        "group-commits result records and releases its handler slot before settling), and the three costs of "
        "point 3. What is left per message is work the design asks for: decoding the chunk's items into Python "
        "objects, settling them and recording the result, the bookkeeping of a message kept invisible while it "
        "waits, and the same DeleteMessage the raw loop makes. That work grows with the chunk while the raw "
        "loop's does not, and the transactions per item fall as the chunk grows, so the chunk size is where the "
        f"message-rate and transactions targets meet: {former_default(doc, f, app)} "
        "On the deployed service the ratio also changes shape: the storage account, not a Node process sharing "
        "the drain's two cores, serves the requests, and its per-queue target is about 2,000 messages/s.",
        "",
    ]
    return lines


# The last full run at the former default chunk, committed with its BENCHMARKS.md in c412912 (figures of that run).
FORMER_DEFAULT = {
    "commit": "c412912",
    "chunk_items": 500,
    "message_bytes": 7_968,
    "raw_limit_messages_per_s": 918,
    "app_messages_per_s": 547.0,
    "app_fraction_of_raw": 0.60,
    "paired_median": 0.58,
    "transactions_ratio": 490,
}


def former_default(doc: dict[str, Any], f: dict[str, Any], app: dict[str, Any]) -> str:
    """The chunk-size trade-off, with the former default's committed run beside this one."""
    old = FORMER_DEFAULT
    text = (
        f"at the former default of {old['chunk_items']} items the full run committed in {old['commit']} measured "
        f"{old['app_fraction_of_raw']:.2f} of the raw limit (paired median {old['paired_median']:.2f}) with "
        f"{old['transactions_ratio']}x fewer transactions than (a); at 100 items a 1,000-item batch would cost "
        "about 20 transactions, about 100x fewer than (a), under the 200x target."
    )
    if app["chunk_items"] == old["chunk_items"]:
        return text
    return text + (
        f" This run uses {app['chunk_items']}-item chunks ({doc['raw_limit']['message_bytes']:,}-byte messages "
        f"against {old['message_bytes']:,}), so part of the ratio's change is the raw loop's: Azurite's raw limit "
        f"is {fmt(f['raw_limit_messages_per_s'], 0)} messages/s here against {old['raw_limit_messages_per_s']} "
        f"then; the rest is the app's, steady {fmt(f['app_messages_per_s'], 0)} messages/s against "
        f"{old['app_messages_per_s']:.0f}."
    )


def decode_ceiling(f: dict[str, Any]) -> str:
    raw, decoded = f["raw_limit_messages_per_s"], f["raw_with_decode_messages_per_s"]
    if decoded is None or raw is None:
        return ""
    if decoded >= raw:
        return (
            f"Adding only the items' decode to the raw loop did not lower its rate in this run ({fmt(decoded, 0)} "
            f"against {fmt(raw, 0)} messages/s: at this message size Azurite, not the client's CPU, sets the raw "
            "loop's pace, and the two differ by no more than their rounds do)."
        )
    return (
        "Decoding the items is what remains: adding only that decode to the raw loop brings its ceiling down to "
        f"{fmt(decoded, 0)} messages/s ({ratio_text(decoded, raw)} of the raw limit); against that ceiling the "
        f"app reaches {f['app_fraction_of_raw_with_decode']:.0%}."
    )


def per_message_ms(app: dict[str, Any]) -> float:
    return float(app["drain_cpu_seconds"]) * 1000 / int(app["messages"])


def part_label(part: str) -> str:
    return OTHER if part.startswith("everything else") else part


def ratio_text(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.0%}"


def profile_excerpt(text: str, lines: int = 28) -> list[str]:
    body = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(body) if "Handle._run" in line or "Drainer" in line), 0)
    return body[max(0, start - 2) : start + lines]


def method(doc: dict[str, Any]) -> str:
    c = doc["config"]
    return f"""## How it is measured

- `make bench` (`python -m bench`) starts Azurite, the Service Bus stand-in, two local function hosts and one
  process per peer, each on free loopback ports, and stops each by its own pid. Sizes of this run: app backlog
  {c["app_backlog_items"]:,} items, peer backlog {c["peer_backlog_items"]:,} items drained in full and a
  {c.get("deep_backlog_items", 0):,}-item one drained {c.get("deep_window_s", 0):.0f} s per peer,
  {c["latency_lanes"]} lanes x {c["latency_per_lane"]} submissions of {c["latency_batch_items"]} items, real-time
  idle run {c["idle_real_s"] / 60:.1f} min. `make bench-quick` runs the same at small sizes (under 5 minutes) and
  writes `bench/results/quick.json`.
- Peers are real code against the real Azurite through the azure-storage-queue aio SDK; their polling loops take
  an injectable clock, so the same code runs in real time and on a simulated day. Transactions are counted by the
  app's own `TransactionCounter` policy (`raw_request_hook`) on every client.
- Logs, handler records and service data of each run are in `bench/results/runs/` (not committed).
"""
