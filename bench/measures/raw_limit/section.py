"""BENCHMARKS.md section 5: the local physical limit (the raw loop, with and without decoding) and the paired
rounds."""

from __future__ import annotations

from typing import Any

from bench.tools.results import fmt, run_source


def raw_limit(doc: dict[str, Any]) -> str:
    raw, f = doc["raw_limit"], doc["summary"]["figures"]
    decoded = raw["with_decode"]
    levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in raw["levels"])
    decoded_levels = " / ".join(f"{lv['clients']}: {lv['median']:.0f}" for lv in decoded["levels"])
    raw_fractions = f"{f['app_fraction_of_raw']:.2f} (whole session: {f['app_fraction_of_raw_wall']:.2f})"
    decoded_fraction = f"{f['app_fraction_of_raw_with_decode']:.2f}"
    chunk = doc["throughput"]["app"]["chunk_items"]
    return f"""## 5. The local physical limit

{run_source(doc)}

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
of the same size (`bench/measures/raw_limit/paired.py`). Raw / app messages/s (ratio) by round: {rounds}.
**Median ratio:
{paired["median_ratio"]:.2f}.**
"""


def paired_phrase(f: dict[str, Any]) -> str:
    median = f.get("paired_median_fraction_of_raw")
    return "" if median is None else f" (in paired rounds, raw and app back to back: a median {median:.0%})"
