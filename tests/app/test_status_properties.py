"""Properties of the pure parts that account for a batch: settlement, status counts, result and group blob names,
admission, batch ids, and the committed attempts' memory."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from shared.batch import results
from shared.batch.batches import Admission, Manifest, State, admit, items_digest, new_batch_id
from shared.batch.results import ResultEntry
from shared.batch.settlement import settle
from shared.core import layout
from shared.handlers import ItemOutcome
from shared.ops.status import batch_status

# -- settlement and status -------------------------------------------------------------------------------------------


outcome_kinds = st.sampled_from(["ok", "retry", "perm"])


@given(st.lists(outcome_kinds, min_size=1, max_size=50), st.integers(1, 6), st.integers(1, 6))
def test_settlement_accounts_for_every_item_exactly_once(kinds, attempt, max_attempts):
    outcomes = [ItemOutcome.success() if k == "ok" else ItemOutcome.failure(k, retryable=(k == "retry")) for k in kinds]
    positions = list(range(100, 100 + len(kinds)))
    s = settle(
        batch_id="f" * 32, chunk=0, gen=0, positions=positions, outcomes=outcomes, attempt=attempt,
        max_attempts=max_attempts,
    )  # fmt: skip
    ok = [p for p, _ in s.record.ok]
    poisoned = [f.position for f in s.poison]
    assert sorted(ok + poisoned + s.retry) == positions
    assert s.record.retrying == s.retry
    if attempt >= max_attempts:
        assert not s.retry
    assert all(kinds[p - 100] == "ok" for p in ok)
    assert all(kinds[p - 100] == "retry" for p in s.retry)


def manifest(sizes: tuple[int, ...], state: State = State.ACCEPTED) -> Manifest:
    return Manifest("f" * 32, "att", state, sum(sizes), sizes, ("q",), "d", "2026-01-01T00:00:00+00:00")


def test_status_counts_lineages_and_knows_when_a_chunk_is_done():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    m = manifest((10, 5))
    entries = [
        ResultEntry(0, 0, 0, ok=7, failed=1, retrying=2, written_at=at),
        ResultEntry(0, 1, 3, ok=2, failed=0, retrying=0, written_at=at + timedelta(seconds=1)),
        ResultEntry(1, 0, 0, ok=4, failed=0, retrying=1, written_at=at),
    ]
    status = batch_status(m, entries)
    assert status["status"] == "processing"
    assert status["trigger"] == "published"
    assert status["items"] == {"total": 15, "succeeded": 13, "failed": 1, "pending": 1}
    assert status["chunks"] == {"total": 2, "done": 1, "poisoned": 1, "pending": 1}
    entries.append(ResultEntry(1, 1, 2, ok=1, failed=0, retrying=0, written_at=at + timedelta(seconds=2)))
    status = batch_status(m, entries)
    assert status["status"] == "completed_with_failures"
    assert status["completed_at"] == (at + timedelta(seconds=2)).isoformat()


def test_a_batch_still_staging_is_never_reported_completed_or_accepted():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    status = batch_status(manifest((1,), State.STAGING), [ResultEntry(0, 0, 0, 1, 0, 0, at)])
    assert status["status"] == "submitting", "no 202 yet"
    assert status["submission"] == "incomplete"
    assert batch_status(manifest((1,), State.STAGING), [])["status"] == "submitting"
    assert batch_status(manifest((1,), State.ABANDONED), [])["status"] == "abandoned"


@given(st.integers(0, 999_999), st.integers(0, 999), st.integers(0, 999_999))
def test_result_blob_names_parse_back(chunk, gen, first):
    name = layout.result_blob("f" * 32, chunk, gen, first)
    assert name.startswith(layout.results_prefix("f" * 32))
    assert layout.parse_result_blob(name) == (chunk, gen, first)


def test_a_lineage_recorded_twice_counts_once_by_its_newest_attempt():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    m = manifest((10,))
    first = ResultEntry(0, 0, 0, ok=10, failed=0, retrying=0, written_at=at, attempt=1, blob="0/r1-a.json")
    again = ResultEntry(0, 0, 0, ok=8, failed=0, retrying=2, written_at=at, attempt=2, blob="0/r0-b.json")
    status = batch_status(m, [again, first])
    assert status["items"] == {"total": 10, "succeeded": 8, "failed": 0, "pending": 2}, "attempt 2 wins"
    tie = ResultEntry(0, 0, 0, ok=10, failed=0, retrying=0, written_at=at, attempt=2, blob="0/r2-c.json")
    assert results.newest([again, tie, first]) == [tie], "same attempt: the later blob wins"


@given(
    st.lists(
        st.tuples(st.integers(0, 999_999), st.integers(0, 999), st.integers(1, 99), st.integers(1, 40)),
        min_size=1,
        max_size=results.MAX_RECORDS_PER_BLOB,
        unique_by=lambda spec: spec[:3],  # one group never holds the same delivery of a lineage twice
    )
)
def test_a_group_blob_lists_every_record_in_its_metadata_within_the_limit(specs):
    records = []
    for chunk, gen, attempt, n in specs:
        outcomes = [
            ItemOutcome.success(p) if p % 3 else ItemOutcome.failure("no", retryable=p % 2 == 0) for p in range(n)
        ]
        s = settle(batch_id="f" * 32, chunk=chunk, gen=gen, positions=list(range(n)), outcomes=outcomes,
                   attempt=attempt, max_attempts=3)  # fmt: skip
        records.append(s.record)
    doc = results.group_document("f" * 32, records, "2026-01-01T00:00:00+00:00")
    meta = results.blob_metadata(json.loads(json.dumps(doc)))
    name = layout.result_group_blob("f" * 32, 1_700_000_000_000, "0a1b2c3d")
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    listed = results.entries(name, meta, at)
    assert [(e.key, e.attempt, e.ok, e.failed, e.retrying) for e in listed] == [
        ((r.chunk, r.gen, r.first), r.attempt, len(r.ok), len(r.failed), len(r.retrying)) for r in records
    ]
    for entry, record in zip(listed, records, strict=True):
        stored = results.select(json.loads(json.dumps(doc)), entry)
        assert stored is not None
        assert results.successes(stored) == record.ok


def test_a_full_group_of_the_largest_records_fits_azures_metadata_limit():
    big = {"chunk": 999_999, "gen": 999, "first": 800_000, "attempt": 999, "failed": []}
    big |= {"retrying": range(800_000, 900_000)}
    doc = {"records": [big | {"ok": range(900_000, 1_000_000)}] * results.MAX_RECORDS_PER_BLOB}
    meta = results.blob_metadata(doc)
    assert meta["records"].count(";") == results.MAX_RECORDS_PER_BLOB - 1
    assert sum(len(k) + len(v) for k, v in meta.items()) <= 8 * 1024, "Azure's limit for all metadata of a blob"


def test_listing_reads_the_layout_before_grouping_and_ignores_foreign_blobs():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    legacy = layout.result_blob("f" * 32, 3, 1, 7)
    [entry] = results.entries(legacy, {"ok": "4", "failed": "1", "retrying": "0"}, at)
    assert (entry.key, entry.ok, entry.failed, entry.retrying) == ((3, 1, 7), 4, 1, 0)
    old_doc = {"chunk": 3, "gen": 1, "attempt": 2, "ok": [{"i": 7, "value": {"x": 1}}], "failed": [], "retrying": []}
    assert results.successes(results.select(old_doc, entry) or {}) == [(7, {"x": 1})]
    assert results.select(old_doc, entry) is old_doc, "the stored document itself: a replay edits it in place"
    for foreign in ("f" * 32 + "/notes.txt", "f" * 32 + "/rabc-1.json", "f" * 32 + "/r1-x/y.json"):
        assert results.entries(foreign, {results.RECORDS: "1.0.0:1.1.0.0"}, at) == []
    name = layout.result_group_blob("f" * 32, 1, "ab")
    assert [e.key for e in results.entries(name, {results.RECORDS: "1.0.0:1.1.0.0;junk;2.x.0:1"}, at)] == [(1, 0, 0)]


def test_admission_follows_the_committed_attempt_and_the_staging_ttl():
    now = datetime(2026, 1, 1, 0, 10, tzinfo=timezone.utc)
    accepted = manifest((1,))
    assert admit(accepted, "att", now=now, staging_ttl_s=60) is Admission.PROCESS
    assert admit(accepted, "other", now=now, staging_ttl_s=60) is Admission.STALE
    staging = manifest((1,), State.STAGING)
    assert admit(staging, "att", now=now, staging_ttl_s=3600) is Admission.WAIT
    assert admit(staging, "att", now=now, staging_ttl_s=60) is Admission.ABANDONED
    assert admit(staging, "older", now=now, staging_ttl_s=3600) is Admission.STALE


def test_batch_ids_from_the_same_idempotency_key_agree_and_digests_ignore_nothing():
    assert new_batch_id("k-1") == new_batch_id("k-1") != new_batch_id("k-2")
    assert new_batch_id(None) != new_batch_id(None)
    assert items_digest(["1", "2"]) != items_digest(["12"])


# -- the committed attempts' memory ----------------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 10**13))), max_size=60))
def test_the_committed_attempts_keep_each_acceptance_time_once_and_only_for_batches_they_remember(puts):
    from shared.batch.verdicts import CommittedAttempts

    memory, told = CommittedAttempts(max_entries=8, max_age_s=60.0), {}
    for n, accepted_ms in puts:
        memory.put(f"b{n}", "a1", now=0.0, accepted_ms=accepted_ms)
        told[f"b{n}"] = accepted_ms
    remembered = {b for b in told if memory.get(b, now=1.0) is not None}
    assert len(remembered) == min(8, len(told))
    for batch_id, accepted_ms in told.items():
        assert memory.take_accepted(batch_id) == (accepted_ms if batch_id in remembered else None)
        assert memory.take_accepted(batch_id) is None, "taken once"


def test_a_doorbell_s_word_admits_its_attempt_but_never_condemns_another_nor_replaces_what_storage_said():
    from shared.batch.verdicts import CommittedAttempts

    memory = CommittedAttempts()
    memory.put("said", "a1", now=0.0, hint=True)  # a doorbell
    assert memory.judge("said", "a1", now=1.0) is True
    assert memory.judge("said", "a2", now=1.0) is None, "another attempt: read its manifest, do not drop it"
    memory.put("said", "a2", now=1.0)  # the manifest (or the lane's mark) says otherwise
    assert memory.judge("said", "a1", now=2.0) is False
    memory.put("read", "b1", now=0.0)
    memory.put("read", "b9", now=1.0, hint=True)
    assert (memory.judge("read", "b1", now=2.0), memory.judge("read", "b9", now=2.0)) == (True, False)
    assert memory.judge("unknown", "c1", now=2.0) is None
