"""BENCHMARKS.md's fairness at 1,000,000 items taken apart: a newcomer's wait split into Azurite's own latency on
its path, timed at the same moments, and the app's part (bench/results/fairness-parts.json, `make
bench-fairness-parts`); a missing file is said, not hidden."""

from __future__ import annotations

from typing import Any

from bench.tools.results import section_start

OPS = (
    ("put", "PutMessage (B's submit)"),
    ("put_blob", "PutBlob (B's submit)"),
    ("get_blob", "GetBlob"),
    ("list", "ListQueues of the partition's lanes, with metadata (the drainer's lane listing)"),
    ("get", "GetMessages of 32 (the drainer's receive)"),
)


def pct(found: dict[str, Any], key: str) -> str:
    value = found.get(key)
    return "-" if value is None else f"{value:,.0f}"


def section() -> str:
    doc, rows = section_start(
        "fairness-parts.json", "Fairness at 1,000,000 items, taken apart", "make bench-fairness-parts"
    )
    if doc is None:
        return "\n".join(rows)
    target = doc["b_p99_target_ms"]
    scenario = doc["scenarios"][0]
    wait = scenario["handler_wait_ms_per_chunk"]
    rows += [
        f"Tenant A's {doc['a_items']:,}-item batch drains in the local host (handler waiting {wait:g} ms a chunk, as "
        f"a downstream call would) while tenant B submits {doc['probe_items']} items every {doc['probe_every_s']:g} "
        "s (`python -m bench.fairness --azurite-parts`, one round with lanes and its control without). Right after "
        "each of B's 202s the bench times, on the same Azurite at that moment, the storage calls a drainer must "
        "make to hand B's items to the handler (the partition's lane listing and a receive) and those of B's "
        "submit (`bench/azurite_probe.py`); the receive is from a small queue of its own, as B's lane is "
        "(A's deep lane is what keeps Azurite, one Node process, busy). The app's part of each wait is B's wait less "
        "that listing and receive "
        "(never below 0): the drainer's listing cadence, its event loop, and the handler call behind A's chunks. "
        "In the control B's items wait in A's deep queue behind A's, so its app's part includes that queue. "
        "All milliseconds; the machine's 2 cores were shared with other engineers' tests.",
        "",
        "| | lanes | B waits, 202 to handler: p50 / p99 | Azurite's part (list + receive): p50 / p99 | the app's part: "
        "p50 / p99 | A items/s |",
        "|---|---|---|---|---|---|",
    ]
    for n, pair in enumerate(scenario["rounds"], 1):
        for label, run in (("yes", pair["with_lanes"]), ("no (control)", pair["shared_lane"])):
            parts = run.get("taken_apart") or {}
            b, az, app = (parts.get(k, {}) for k in ("b_latency_ms", "azurite_path_ms", "app_added_ms"))
            rows.append(
                f"| round {n} | {label} | {pct(b, 'p50')} / {pct(b, 'p99')} | "
                f"{pct(az, 'p50')} / {pct(az, 'p99')} | {pct(app, 'p50')} / {pct(app, 'p99')} | "
                f"{run['a_items_per_s']:,.0f} |"
            )
    lanes = scenario["rounds"][0]["with_lanes"].get("taken_apart") or {}
    each = lanes.get("operations_ms", {})
    rows += [
        "",
        "Azurite's own latency per operation at that depth, with lanes (p50 / p99 / max):",
        "",
        "| operation | p50 | p99 | max |",
        "|---|---|---|---|",
        *[f"| {label} | {' | '.join(pct(each.get(op, {}), k) for k in ('p50', 'p99', 'max'))} |" for op, label in OPS],
        "",
        *verdict(lanes, target, doc.get("profile")),
        *profile(doc.get("profile")),
    ]
    return "\n".join(rows) + "\n"


def profile(found: dict[str, Any] | None) -> list[str]:
    """The host sampled by py-spy during the round with lanes (`bench/spy_summary.py`, a diagnostic by hand)."""
    if not found:
        return []
    shares = sorted(found["areas_share_of_busy"].items(), key=lambda kv: -(kv[1] or 0))
    return [
        f"**The host's process, sampled** ({found['note']}; `py-spy record --nonblocking`, summarised by "
        f"`python -m bench.spy_summary`, a diagnostic by hand: py-spy is not a project requirement): "
        f"{found['samples']:,} samples, {found['idle_share']:.0%} of them idle in the event loop's selector. Of "
        "the busy ones, the share with each part of the code on the stack (parts overlap):",
        "",
        "| part | share of busy samples |",
        "|---|---|",
        *[f"| {name} | {share:.0%} |" for name, share in shares if share],
        "",
    ]


def verdict(parts: dict[str, Any], target: float, sampled: dict[str, Any] | None = None) -> list[str]:
    app, az, b = (parts.get(k, {}) for k in ("app_added_ms", "azurite_path_ms", "b_latency_ms"))
    if not app.get("count"):
        return ["No newcomer was seen in this run.", ""]
    app_p99, az_p99, b_p99 = app["p99"], az["p99"], b["p99"]
    lines = [
        f"**With lanes, B's p99 is {b_p99:,.0f} ms against the {target:.0f} ms target: Azurite's list and receive "
        f"take {az_p99:,.0f} ms of it at p99 and the app's part {app_p99:,.0f} ms.**"
    ]
    lines.append(
        " Before the engine's fixes below (issue 30 item 5) this bench measured B's p99 at 2,431 ms, the app's part "
        "2,300 ms. One round's p99 is not a stable figure on this shared machine: the rounds taken while fixing it "
        "(load averages 4 to 8 on the 2 cores) gave the app's part p99 2,825, 5,505 and 2,840 ms before the fixes "
        "and 2,936, 1,325 and 389 after them (medians 2,840 and 1,325). What the app's part held, found "
        "in the host's log (its listings and the lanes they woke) and the "
        "code: (1) a lane's express page stayed open through its chunk's "
        "handler call and settle, and a listing that found the lane marked again meanwhile left B's next batch to "
        "the receivers, which come round to a lane only after their pages of A's chunks: seconds. The page now "
        "closes once its chunks have places, and a lane marked again while one is open gets the next at once "
        "(`shared/engine/drainer.py`). (2) B's submits overlapped (under load each took longer than the "
        "0.25 s between them), so a listing often saw one submit's mark before storing after another's: the "
        "first one's commit mark had come and gone between two listings, and its committed chunk waited 5 s "
        "(`recheck_s`), the deferral meant for a submit still storing. Two such marks in a row now make the lane "
        "due at once (`shared/core/lanes.py`; the cost, a chunk of a submit still storing received and put back "
        "now and then). (3) The watcher listed once per 4 chunks ended, and A's chunks end in bursts as their "
        "results' group commits return, so listings came up to a second apart; it counts chunks as they start now "
        "(`shared/engine/lane_watch.py`). Long stalls of the event loop were not the cause: in the runs taken for "
        "this the host logged from none to a few dozen over 100 ms in a round, the longest under 400 ms, not seconds."
        " (4) A later stop, with each probe's times written beside the host's log (`probes-*.tsv` in the run's "
        "folder) and the express path logged for a round: express pages had only what the receivers left of "
        "RECEIVERS x RECEIVE_BATCH, and behind A's backlog, with the handler waiting 200 ms a chunk, the "
        "receivers' pages wait for places, so that share was often full and B's lane got no express page until "
        "a receiver came round after its page. Express pages now hold a share of their own beside the "
        "receivers' (`shared/engine/express.py`; a drainer still holds at most twice RECEIVERS x RECEIVE_BATCH). "
        "Rounds on that stop's code, the app's part p99 / max: before the fix 2,179 / 2,611 ms, after it 541 / "
        "2,201 and 1,392 / 2,293 ms. What the logged round showed of the rest: an express page now took B's "
        "chunk within a listing and it got a place within tens of ms, but (a) about one B chunk in five was of a "
        "batch that no lane mark named (B's submits overlap, and a lane's mark names only the latest), so the "
        "drainer read its manifest and wrote its index entry before the handler call: 250 to 730 ms at this "
        "depth; and (b) a chunk received while its submit was still storing was put back for 2 s (`put_back`'s "
        "first delay): the multi-second tail (the two slowest probes of the logged round waited 2.6 and 2.3 s). "
        "(5) The stop after fixed both: each `submitted` doorbell names the attempt its submit committed and "
        "indexed, and the process it reaches remembers it whether it drains or not, so the drainer at work there "
        "admits such a batch with no manifest read and no index write (`shared/engine/serve.py`, "
        "`learn_committed`); and a chunk whose submit is still storing is put back for 1 s the first time, the "
        "least a queue hides a message for (`shared/engine/settling.py`, `wait_delay_s`). On the same machine at "
        "the same load (about 1 on the 2 cores), one round each: before these two changes the app's part p99 / "
        "max was 236 / 2,085 and 344 / 519 ms (B's p99 353 and 372 ms); after them 162 / 239, 264 / 288 and "
        "283 / 286 ms (B's p99 216, 293 and 290 ms; the table above is the last). The tail past a second is "
        "gone, and the p99 is at the target's level rather than seconds over it; it has not been measured under "
        "the loads of 4 to 8 that the earlier rounds met. On Azure a doorbell reaches one instance of several, "
        "and a drainer on another admits the batch by its manifest as before."
    )
    if app_p99 > target:
        lines.append(
            f" The app's part is over the target by {app_p99 - target:,.0f} ms at p99: B's work waits its turn on "
            "the one event loop of the host's Python worker, which also runs every "
            "receive, settle, result write and delete of A's drain, on two cores shared with Azurite, the bench and "
            "other engineers' tests (at such a moment Azurite's own calls are slow too)"
            + (
                f"; sampled during this round (below), that loop was busy {1 - sampled['idle_share']:.0%} of the "
                "time with A's drain."
                if sampled
                else "; sampled at an earlier stop, that loop was busy 81% of the time with A's drain."
            )
        )
    if az_p99 > target:
        lines.append(f" Azurite's part alone is over the target by {az_p99 - target:,.0f} ms at p99.")
    if app_p99 <= target and az_p99 <= target:
        lines.append(" Both parts are within the target on their own; the p99 of their sum is what misses, if it does.")
    return ["".join(lines), ""]
