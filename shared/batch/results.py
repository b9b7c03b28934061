"""Result blobs: the records of many chunks in one blob, and which record of a lineage counts (pure).

A chunk's outcome is a `ResultRecord`, keyed by its lineage (chunk, generation, first position). The drain
writes the records that settle close together in one blob per batch (a group commit, `shared.store.result_store`),
so a busy drain pays one PutBlob for many chunks and an idle one waits for nobody. A chunk redelivered after
a crash between that write and its delete records its lineage again, in another blob. Readers keep, per
lineage, the record of the latest attempt (the queue's dequeue count only grows; a tie goes to the later
blob name, which starts with the writer's clock): what overwriting one blob per lineage used to do. With one
exception: an outcome once recorded is never replaced by a discard. A chunk handled and recorded whose delete
was lost comes back after its batch was cancelled or expired, and is discarded unrun under a newer attempt;
the handled record still counts, and the discard settles only the items that record left `retrying` (`newest`).

Each blob's metadata lists its records' keys, attempts and counts, so batch status is one listing, no reads.
Blobs written before grouping (one per lineage, `{batch}/{chunk}/{gen}-{first}.json`) are read the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from shared.batch.settlement import ResultRecord
from shared.core import layout

RECORDS = "records"  # the metadata entry listing a group blob's records
MAX_RECORDS_PER_BLOB = 128  # keeps that entry (at most 43 characters a record) below the 8 KiB limit

Key = tuple[int, int, int]
# A replay's claim on a parked chunk (`shared.ops.replay_marks`) is kept in its parent record:
CLAIMED_MS = "replay_claimed_ms"  # when a replay last marked some of its items retrying (epoch ms)
CLAIMED = "replay_claimed"  # the positions replays marked retrying (and did not give back)
CLAIMED_FAILED = "replay_claimed_failed"  # their failures as they were, so anyone can give a dead claim back


@dataclass(frozen=True)
class ResultEntry:
    """One record as a blob listing describes it: its lineage, attempt and counts, and where it lives."""

    chunk: int
    gen: int
    first: int
    ok: int
    failed: int
    retrying: int
    written_at: datetime
    attempt: int = 1
    blob: str = ""
    cancelled: int = 0
    expired: int = 0
    then: ResultEntry | None = None  # a newer discard of the lineage that settled items this record left retrying
    # Older records of handled items of the same lineage, oldest first, where two copies of a chunk message recorded
    # it apart (`apart`): read with it and merged by position (`merged`); set by `result_store.list_counted` only.
    also: tuple[ResultEntry, ...] = ()

    @property
    def key(self) -> Key:
        return self.chunk, self.gen, self.first

    @property
    def handled(self) -> bool:
        """A record of items the handler gave an outcome for, not only of items discarded unrun."""
        return bool(self.ok or self.failed or self.retrying)

    def later(self, other: ResultEntry) -> bool:
        """Written by a later attempt than `other` (a tie goes to the later blob)."""
        return (self.attempt, self.blob) > (other.attempt, other.blob)


def blob_metadata(doc: Mapping[str, Any]) -> dict[str, str]:
    """A result blob's metadata: `records` lists each record as `chunk.gen.first:attempt.ok.failed.retrying`,
    followed by `.cancelled.expired` when it discarded items of an ended or expired batch."""
    if RECORDS not in doc:  # a blob of the layout before grouping: its counts
        return {k: str(len(doc[k])) for k in ("ok", "failed", "retrying")}
    return {RECORDS: ";".join(_entry_text(r) for r in doc[RECORDS])}


def _entry_text(doc: Mapping[str, Any]) -> str:
    text = (
        f"{doc['chunk']}.{doc['gen']}.{doc['first']}:{doc['attempt']}."
        f"{len(doc['ok'])}.{len(doc['failed'])}.{len(doc['retrying'])}"
    )
    ended = len(doc.get("cancelled", ())), len(doc.get("expired", ()))
    return text + (f".{ended[0]}.{ended[1]}" if any(ended) else "")


def entries(name: str, meta: Mapping[str, str], written_at: datetime) -> list[ResultEntry]:
    """The records a listed blob holds, from its name and metadata; none if it is not a result blob."""
    legacy = layout.parse_result_blob(name)
    if legacy is not None:
        chunk, gen, first = legacy
        ok, failed, retrying = (int(meta.get(k, 0)) for k in ("ok", "failed", "retrying"))
        return [ResultEntry(chunk, gen, first, ok, failed, retrying, written_at, blob=name)]
    stamp_ms = layout.result_group_stamp_ms(name)
    if stamp_ms is None:
        return []
    # The writer's clock to the millisecond, taken as the write began; a listing's Last-Modified has whole seconds.
    written_at = datetime.fromtimestamp(stamp_ms / 1000, timezone.utc)
    found = []
    for part in meta.get(RECORDS, "").split(";"):
        try:
            lineage, _, numbers = part.partition(":")
            c, g, f = (int(x) for x in lineage.split("."))
            counts = [int(x) for x in numbers.split(".")]
            if len(counts) == 4:
                counts += [0, 0]
            attempt, n_ok, n_failed, n_retrying, n_cancelled, n_expired = counts
        except ValueError:
            continue  # not one of ours: ignored, like a blob of a foreign name
        found.append(
            ResultEntry(c, g, f, n_ok, n_failed, n_retrying, written_at, attempt, name, n_cancelled, n_expired)
        )
    return found


def newest(found: Iterable[ResultEntry]) -> list[ResultEntry]:
    """One entry per lineage: its latest record of handled items, whatever the attempts of its discards (an
    outcome once recorded is never replaced by a discard); the latest discard only where no delivery handled it.
    A discard later than the handled record settles the items that record left retrying (its update was lost,
    the message came back and its batch had ended): the entry counts them discarded and names it (`then`)."""
    handled: dict[Key, ResultEntry] = {}
    discards: dict[Key, ResultEntry] = {}
    for e in found:
        best = handled if e.handled else discards
        held = best.get(e.key)
        if held is None or e.later(held):
            best[e.key] = e
    chosen = []
    for key in sorted(handled.keys() | discards.keys()):
        record, discard = handled.get(key), discards.get(key)
        if record is None:
            assert discard is not None
            chosen.append(discard)
        elif discard is None or not record.retrying or not discard.later(record):
            chosen.append(record)
        else:
            chosen.append(_covered(record, discard))
    return chosen


def _covered(record: ResultEntry, discard: ResultEntry) -> ResultEntry:
    cancelled = min(record.retrying, discard.cancelled)
    expired = min(record.retrying - cancelled, discard.expired)
    return replace(
        record,
        retrying=record.retrying - cancelled - expired,
        cancelled=record.cancelled + cancelled,
        expired=record.expired + expired,
        then=discard,
    )


def covered(record: Mapping[str, Any], discard: Mapping[str, Any] | None) -> dict[str, Any]:
    """A handled record's document as it counts (`newest`): the items it left retrying that a later discard of
    its lineage holds, moved to that discard's kind (a copy; the record itself when there is no such discard)."""
    if discard is None:
        return dict(record)
    left = set(record.get("retrying") or [])
    out = dict(record)
    moved: set[int] = set()
    for kind in ("cancelled", "expired"):
        taken = [p for p in discard.get(kind) or [] if p in left and p not in moved]
        moved.update(taken)
        if taken:
            out[kind] = [*(record.get(kind) or []), *taken]
    out["retrying"] = [p for p in record.get("retrying") or [] if p not in moved]
    known = {p for p, _ in record.get("ids") or []}
    ids = [*(record.get("ids") or []), *([p, i] for p, i in discard.get("ids") or [] if p in moved and p not in known)]
    if ids:
        out["ids"] = ids
    return out


KINDS = ("failed", "ok", "cancelled", "expired")  # the order in which a chunk's settled items are counted


def settled_counts(
    entries: Iterable[ResultEntry], chunks: int, sizes: Sequence[int] | None = None
) -> dict[int, dict[str, int]]:
    """Per chunk with a record, its items settled each way (KINDS), each item counted once: the one rule the
    status route, the batch list, the results export's counts and the failure tolerance all count by.

    A lineage recorded twice (a redelivered chunk) counts once, by its newest record. A generation carries only
    the items its predecessor holds as `retrying`, so it counts at most that many: should a parked item be
    replayed while its original is still redelivered, and the original then settle it, the predecessor's newest
    record holds it as settled and no longer as retrying, and the replayed generation's record of it is not
    counted again. A chunk's first generation counts at most the chunk's size, where `sizes` are known. Within
    what a generation may count: failures first, then successes, then the items discarded unrun."""
    totals: dict[tuple[int, int], list[int]] = {}
    for e in newest(entries):
        if 0 <= e.chunk < chunks:
            counts = totals.setdefault((e.chunk, e.gen), [0] * (len(KINDS) + 1))
            for i, n in enumerate((e.failed, e.ok, e.cancelled, e.expired, e.retrying)):
                counts[i] += n
    out: dict[int, dict[str, int]] = {}
    carried: dict[tuple[int, int], int] = {}  # (chunk, gen): how many items that generation hands to the next
    for chunk, gen in sorted(totals):
        *settled, retrying = totals[(chunk, gen)]
        recorded = sum(settled) + retrying
        if chunk not in out:  # its first generation with a record
            allowed = sizes[chunk] if sizes is not None else recorded
            out[chunk] = dict.fromkeys(KINDS, 0)
        else:
            allowed = carried.get((chunk, gen - 1), recorded)
        for kind, n in zip(KINDS, settled, strict=True):
            counted = min(n, allowed)
            out[chunk][kind] += counted
            allowed -= counted
        carried[(chunk, gen)] = min(retrying, allowed)
    return out


def item_outcomes(records: Sequence[Mapping[str, Any]], size: int | None) -> dict[int, tuple[str, Any]]:
    """Per position of a chunk, how it settled (a kind of KINDS) and what its record says of it (a failure's
    reason, a success's value, None for a discard), by `settled_counts`'s rule applied to positions: the results
    export's lines, which agree with the status route's counts. `records` are a chunk's documents as they count
    (`newest`, `covered`); `size` its items (None: any position a record holds).

    Generation by generation: the first with a record may settle any of the chunk's positions; a later one only
    those its predecessor held `retrying`, where that predecessor has a record (two copies of one chunk message
    walk their generations apart: the replay family's seed 420 had one copy's generation 2 record two items ok at
    attempt 4 while the other copy, a generation ahead, parked them failed at its last attempt; the status route
    counted them succeeded and the export, taking any failure first, said failed). Within a generation: failures
    first, then successes, then the items discarded unrun."""
    return {p: (kind, detail) for p, (kind, detail, _) in _walk(records, size)[0].items()}


def _walk(
    records: Sequence[Mapping[str, Any]], size: int | None
) -> tuple[dict[int, tuple[str, Any, int]], dict[int, int]]:
    """`item_outcomes`, each with the index of the record that settled it; and per record, how many of the
    positions it left retrying its generation handed on."""
    by_gen: dict[int, list[int]] = {}
    for n, record in enumerate(records):
        by_gen.setdefault(int(record["gen"]), []).append(n)
    held = ({p for r in records for p in (*settled_positions(r), *(r.get("retrying") or []))} if size is None
            else range(size))  # fmt: skip
    out: dict[int, tuple[str, Any, int]] = {}
    handed: dict[int, int] = {}
    carried: dict[int, set[int]] = {}  # gen: the positions it hands to the next
    for gen in sorted(by_gen):
        at = by_gen[gen]
        allowed = carried[gen - 1] if gen - 1 in carried else {p for p in held if p not in out}
        for kind in KINDS:
            for n in at:
                for p, detail in _settled(records[n], kind):
                    if p in allowed:
                        out[p] = (kind, detail, n)
                        allowed.discard(p)
        carried[gen] = set()
        for n in at:
            mine = {p for p in records[n].get("retrying") or [] if p in allowed} - carried[gen]
            handed[n] = len(mine)
            carried[gen] |= mine
    return out, handed


def apart(found: Iterable[ResultEntry]) -> set[int]:
    """The chunks whose counts a listing cannot tell: a generation with two records of handled items (two copies
    of one chunk message, a PutMessage applied twice, handled at once). Their counts come from their records
    (`told`); any other chunk has one such record per generation and the listing's counts are its items'."""
    seen: dict[tuple[int, int], ResultEntry] = {}
    out: set[int] = set()
    for e in found:
        if e.handled and seen.setdefault((e.chunk, e.gen), e) is not e:
            out.add(e.chunk)
    return out


def merged(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One lineage's records of handled items (oldest first) as one: each item as the newest record that settled it
    says, or `retrying` where none did. Two copies of a chunk message carry the same lineage when they carry the
    same first position, not always the same items (the copies family's seed 48: generation 1 of one copy held
    items 0 and 2 ok, of the other item 0 ok; the newer record alone left item 2 pending for good)."""
    newest_doc = dict(records[-1])
    if len(records) == 1:
        return newest_doc
    settled: dict[int, tuple[str, Any]] = {}
    ids: dict[int, Any] = {}
    for record in records:
        ids.update((p, i) for p, i in record.get("ids") or [])
        for kind in KINDS:
            settled.update((p, (kind, detail)) for p, detail in _settled(record, kind))
    retrying = sorted({p for r in records for p in r.get("retrying") or []} - settled.keys())
    of = {kind: sorted((p, d) for p, (k, d) in settled.items() if k == kind) for kind in KINDS}
    values = [v for _, v in of["ok"]]
    newest_doc |= {
        "ok": [p for p, _ in of["ok"]],
        "failed": [{"i": p, "reason": d} for p, d in of["failed"]],
        "retrying": retrying,
        "cancelled": [p for p, _ in of["cancelled"]],
        "expired": [p for p, _ in of["expired"]],
        "ids": sorted([p, i] for p, i in ids.items()),
    }
    newest_doc.pop("values", None)
    if values.count(None) != len(values):
        newest_doc["values"] = values
    return newest_doc


def older(found: Iterable[ResultEntry], chosen: ResultEntry) -> tuple[ResultEntry, ...]:
    """The records of handled items of `chosen`'s lineage older than it, oldest first (`ResultEntry.also`)."""
    kept = [e for e in found if e.key == chosen.key and e.handled and chosen.later(e)]
    return tuple(sorted(kept, key=lambda e: (e.attempt, e.blob)))


def told(chosen: Sequence[ResultEntry], docs: Sequence[Mapping[str, Any]]) -> list[ResultEntry]:
    """A chunk's entries as they count (`newest`), each with the counts of the items its record settled by
    `item_outcomes` (`docs`, their documents as they count, in the same order), and the items it left retrying
    that its generation hands on: so `settled_counts` counts what the export lists."""
    settled, handed = _walk(docs, None)
    counts: list[dict[str, int]] = [dict.fromkeys(KINDS, 0) for _ in docs]
    for kind, _, n in settled.values():
        counts[n][kind] += 1
    return [
        replace(e, ok=c["ok"], failed=c["failed"], cancelled=c["cancelled"], expired=c["expired"],
                retrying=handed.get(n, 0))
        for n, (e, c) in enumerate(zip(chosen, counts, strict=True))
    ]  # fmt: skip


def _settled(record: Mapping[str, Any], kind: str) -> list[tuple[int, Any]]:
    if kind == "failed":
        return [(f["i"], f.get("reason")) for f in record.get("failed") or []]
    if kind == "ok":
        return successes(record)
    return [(p, None) for p in record.get(kind) or []]


def group_document(batch_id: str, records: Sequence[ResultRecord], finished_at: str) -> dict[str, Any]:
    return {"batch_id": batch_id, RECORDS: [r.to_json(finished_at) for r in records]}


def successes(record: Mapping[str, Any]) -> list[tuple[int, Any]]:
    """(position, value) of each item a record holds as ok; a record stores `values` only if one is not null."""
    ok = list(record["ok"])
    if ok and isinstance(ok[0], dict):  # the layout before grouping: [{"i": position, "value": value}]
        return [(e["i"], e.get("value")) for e in ok]
    return list(zip(ok, record.get("values") or [None] * len(ok), strict=True))


def settled_positions(record: Mapping[str, Any]) -> set[int]:
    """The positions a record settled: ok, failed, or discarded unrun (not those it left retrying)."""
    settled = {p for p, _ in successes(record)} | {f["i"] for f in record.get("failed") or []}
    return settled | set(record.get("cancelled") or []) | set(record.get("expired") or [])


def claimed(record: Mapping[str, Any]) -> set[int]:
    """The positions a replay's claim holds retrying in `record` (none without a claim; a claim stamped before
    its positions were listed holds every item retrying)."""
    if CLAIMED_MS not in record:
        return set()
    return set(record.get(CLAIMED, record["retrying"]))


def select(doc: dict[str, Any], entry: ResultEntry) -> dict[str, Any] | None:
    """The record document in a blob that `entry` describes, itself (not a copy: a replay changes it in place);
    a blob of the layout before grouping is one record."""
    if RECORDS not in doc:
        return doc
    stored: list[dict[str, Any]] = doc[RECORDS]
    for record in stored:
        if (record["chunk"], record["gen"], record["first"], record["attempt"]) == (*entry.key, entry.attempt):
            return record
    return None
