"""Properties of the pure parts: back-off, chunking, envelopes, settlement, status, billing, scaling."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.batch import envelope, results
from shared.batch.batches import Admission, Manifest, State, admit, items_digest, new_batch_id
from shared.batch.chunking import plan_chunks
from shared.batch.results import ResultEntry
from shared.batch.settlement import settle
from shared.core import fastjson, layout
from shared.core.backoff import (
    PollPolicy,
    capped_exponential_ms,
    decreased_ms,
    jittered_ms,
    randomized_exponential_ms,
    retry_delay_ms,
)
from shared.core.errors import MalformedEnvelope, MalformedEvent
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import INLINE_MAX_BYTES, Decrease
from shared.engine.scaling import drainers_for_depth, wakeup_for
from shared.handlers import ItemOutcome
from shared.handlers.billing import InvalidItem, parse_amount, split
from shared.ops.status import batch_status
from shared.telemetry.metering import classify

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
unit = st.floats(min_value=0, max_value=1, exclude_max=True)


# -- back-off ------------------------------------------------------------------------------------------------


@given(st.integers(1, 10**7), st.floats(1.0, 10.0), st.integers(1, 10**8))
def test_capped_exponential_grows_but_never_past_the_ceiling(current, exponent, ceiling):
    nxt = capped_exponential_ms(current, exponent=exponent, ceiling_ms=ceiling)
    assert nxt <= ceiling
    assert nxt >= min(current, ceiling)


@given(st.integers(100, 10**7), st.integers(100, 10**7))
def test_work_resets_to_the_floor_or_halves_down_to_it(current, floor):
    assert decreased_ms(current, floor_ms=floor, decrease=Decrease.RESET) == floor
    halved = decreased_ms(current, floor_ms=floor, decrease=Decrease.HALVE)
    assert halved >= floor
    assert halved <= max(floor, current)


@given(st.integers(0, 10**7), st.floats(0, 0.5), unit)
def test_jitter_stays_within_its_band(interval, jitter, u):
    value = jittered_ms(interval, jitter=jitter, u=u)
    assert interval * (1 - jitter) - 1 <= value <= interval * (1 + jitter) + 1


@given(st.integers(0, 200), unit)
def test_randomized_policy_matches_the_whitepaper_formula(idle, u):
    value = randomized_exponential_ms(idle, floor_ms=100, delta_ms=100, ceiling_ms=1000, u=u)
    assert 100 <= value <= 1000
    if idle == 0:
        assert value == 100
    if idle >= 4:  # 100 + 15 * 100 * 0.8 > 1000
        assert value == 1000


@given(st.integers(1, 100), st.integers(0, 10_000), st.integers(0, 10**6), st.booleans(), unit)
def test_retry_delays_are_capped_and_jitter_keeps_the_upper_half(attempt, base, extra, jitter, u):
    cap = base + extra
    delay = retry_delay_ms(attempt, base_ms=base, max_ms=cap, jitter=jitter, u=u)
    full = min(cap, base * 2 ** min(attempt - 1, 40))
    assert delay <= full
    if jitter:
        assert delay >= full // 2
    else:
        assert delay == full


def test_retry_attempts_are_one_based():
    with pytest.raises(ValueError, match="1-based"):
        retry_delay_ms(0, base_ms=1, max_ms=1, jitter=False, u=0)


@settings(max_examples=50)
@given(st.lists(st.sampled_from(["idle", "work"]), max_size=40), st.sampled_from(list(Decrease)))
def test_the_poll_interval_stays_between_floor_and_ceiling_whatever_happens(events, decrease):
    policy = PollPolicy(floor_ms=1000, ceiling_ms=60_000, exponent=2.0, jitter=0.0, decrease=decrease)
    state = policy.initial(0)
    now = 0
    for event in events:
        now = state.next_due_ms
        state = (policy.after_idle if event == "idle" else policy.after_work)(state, now_ms=now, u=0.5)
        assert 1000 <= state.interval_ms <= 60_000
        assert state.next_due_ms == now + state.interval_ms
    if events and events[-1] == "work" and decrease is Decrease.RESET:
        assert state.interval_ms == 1000


def test_an_idle_queue_reaches_the_ceiling_and_stays_there():
    policy = PollPolicy(floor_ms=60_000, ceiling_ms=1_800_000, exponent=2.0, jitter=0.0, decrease=Decrease.RESET)
    state = policy.initial(0)
    intervals = []
    for _ in range(10):
        state = policy.after_idle(state, now_ms=state.next_due_ms, u=0.5)
        intervals.append(state.interval_ms)
    assert intervals[:5] == [120_000, 240_000, 480_000, 960_000, 1_800_000]
    assert set(intervals[4:]) == {1_800_000}


# -- chunking and envelopes --------------------------------------------------------------------------------------


@given(st.lists(st.text(min_size=1, max_size=50), max_size=300), st.integers(1, 50), st.integers(1, 400))
def test_chunks_partition_the_items_in_order_within_limits(items, max_items, max_bytes):
    chunks = plan_chunks(items, max_items=max_items, max_bytes=max_bytes)
    assert [i for c in chunks for i in c.items] == items
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert 1 <= c.count <= max_items
        assert c.count == 1 or sum(len(i) + 1 for i in c.items) <= max_bytes
        assert items[c.start : c.start + c.count] == list(c.items)


@given(st.lists(json_values, min_size=1, max_size=60), st.integers(0, 5), st.integers(0, 3))
def test_inline_envelopes_round_trip(items, chunk, gen):
    header = envelope.ChunkHeader(new_batch_id(None), "att1", chunk, gen)
    text = envelope.encode_inline(header, envelope.encode_items(items))
    assert text is not None
    assert text.isascii()
    decoded = envelope.decode(text)
    assert decoded.header == header
    assert decoded.items == items
    assert decoded.positions(len(items)) == list(range(len(items)))


def test_a_chunk_too_big_for_plain_text_travels_compressed_and_one_too_big_for_that_needs_a_blob():
    header = envelope.ChunkHeader(new_batch_id(None), "a", 0)
    repetitive = envelope.encode_items([{"id": i, "text": "x" * 200} for i in range(400)])
    text = envelope.encode_inline(header, repetitive)
    assert text is not None
    assert '"z":' in text
    assert len(text) <= INLINE_MAX_BYTES
    assert envelope.decode(text).items == [json.loads(i) for i in repetitive]
    rng = random.Random(7)
    noise = envelope.encode_items([{"id": i, "noise": rng.randbytes(60).hex()} for i in range(1000)])
    assert envelope.encode_inline(header, noise) is None


@given(st.lists(json_values, min_size=1, max_size=40), st.data())
def test_claim_checks_and_retry_references_select_the_right_items(items, data):
    positions = sorted(data.draw(st.sets(st.integers(0, len(items) - 1), min_size=1)))
    header = envelope.retry_header(envelope.ChunkHeader(new_batch_id(None), "a", 3), positions)
    blob = envelope.encode_claim_check(envelope.encode_items(items))
    decoded = envelope.decode(envelope.encode_reference(header, "b/chunks/000003.json.gz"))
    assert decoded.blob == "b/chunks/000003.json.gz"
    assert decoded.header.gen == 1
    assert envelope.select(envelope.decode_claim_check(blob), decoded.positions(len(items))) == [
        items[p] for p in positions
    ]


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[]", '{"v":2}', '{"v":1,"b":"../x","a":"a","c":0,"items":[]}',
     '{"v":1,"b":"' + "a" * 32 + '","a":"a","c":-1,"items":[]}',
     '{"v":1,"b":"' + "a" * 32 + '","a":"a","c":0}', '{"v":1,"b":"' + "a" * 32 + '","a":"a","c":0,"z":"!!"}'],
)  # fmt: skip
def test_anything_but_a_chunk_envelope_is_refused(text):
    with pytest.raises(MalformedEnvelope):
        envelope.decode(text)


# -- trigger events --------------------------------------------------------------------------------------------


@given(
    st.sampled_from(list(Reason)),
    st.integers(0, 10**9),
    st.one_of(st.none(), st.just("f" * 32)),
    st.integers(0, 9),
    st.one_of(st.none(), st.integers(0, 2**53)),
    st.one_of(st.none(), st.text("0123456789abcdef", min_size=1, max_size=64)),
)
def test_trigger_events_round_trip(reason, size, batch_id, slot, ready_ms, attempt):
    attempt = attempt if batch_id is not None else None
    event = TriggerEvent("acct", "work-items", reason, size, batch_id, slot, ready_ms=ready_ms, attempt=attempt)
    assert TriggerEvent.decode(event.encode()) == event


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b"{}", b'{"account":"a","queue":"Bad_Queue","reason":"submitted"}',
     b'{"account":"a","queue":"work-items","reason":"whenever"}',
     b'{"account":"a","queue":"work-items","reason":"submitted","payload_size":-1}', b"x" * 5000,
     b'{"account":"a","queue":"work-items","reason":"submitted","ready_ms":"soon"}',
     b'{"account":"a","queue":"work-items","reason":"submitted","attempt":"0a1b2c3d4e5f"}',
     b'{"account":"a","queue":"work-items","reason":"submitted","batch_id":"b","attempt":"../x"}',
     b'{"account":"a","queue":"work-items","reason":"submitted","batch_id":"b","attempt":"' + b"a" * 65 + b'"}'],
)  # fmt: skip
def test_malformed_trigger_events_are_refused_with_a_reason(body):
    with pytest.raises(MalformedEvent):
        TriggerEvent.decode(body)


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


# -- billing ------------------------------------------------------------------------------------------------------


shares = st.decimals(min_value=0, max_value=1, places=3)


@given(st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e9"), places=2), shares, shares)
def test_the_revenue_split_always_sums_to_the_amount_and_never_goes_negative(amount, a, d):
    if a + d > 1:
        a, d = a / 2, d / 2
    parts = split(amount, author_share=a, distributor_share=d, exponent=2)
    assert sum(parts.values()) == amount
    assert all(v >= 0 for v in parts.values())
    assert all(v == v.quantize(Decimal("0.01")) for v in parts.values())
    assert abs(parts["author"] - amount * a) <= Decimal("0.005")


canonical_amounts = st.builds(
    lambda whole, frac: f"{whole}.{frac}" if frac else str(whole),
    st.integers(1, 10**11),
    st.one_of(st.just(""), st.from_regex(r"[0-9]{1,2}", fullmatch=True)),
)
ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
FULLWIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
# Ways to write one amount that Decimal() takes but a ledger must not: each names a different rule.
DISGUISES = [
    lambda a: f" {a} ",
    lambda a: f"+{a}",
    lambda a: f"0{a}",
    lambda a: a.replace("1", "_1", 1) if "1" in a[1:] else f"{a[0]}_{a[1:]}" if len(a) > 1 else f"1_{a}",
    lambda a: a.translate(ARABIC_INDIC),
    lambda a: a.translate(FULLWIDTH),
    lambda a: f"{a}0" if "." in a and len(a.split(".")[1]) == 2 else f"{a}.001",
    lambda a: f"{Decimal(a):E}",
]


@given(canonical_amounts, st.sampled_from(range(len(DISGUISES))))
def test_only_canonical_ascii_amounts_are_booked_and_every_disguise_fails_by_the_rule(amount, disguise):
    assert parse_amount(amount, 2) == Decimal(amount)
    disguised = DISGUISES[disguise](amount)
    if disguised == amount:
        return
    with pytest.raises(InvalidItem, match="canonical decimal string"):
        parse_amount(disguised, 2)


@pytest.mark.parametrize(
    "raw",
    [" 19.99 ", "1_000.00", "19.99".translate(ARABIC_INDIC), "19.99".translate(FULLWIDTH), 19.99, 20, "19.", "-5"],
)
def test_the_billing_handler_fails_a_non_canonical_amount_permanently_naming_the_rule(raw):
    from types import SimpleNamespace

    from shared.handlers.billing import handle

    sale = {"id": "s-1", "amount": raw, "currency": "EUR", "author": "a", "distributor": "d"}
    context = SimpleNamespace(
        settings=SimpleNamespace(billing_author_share=Decimal("0.7"), billing_distributor_share=Decimal("0.2"))
    )
    (outcome,) = handle([sale], context).outcomes  # type: ignore[arg-type]
    assert not outcome.ok
    assert not outcome.retryable
    assert "canonical decimal string" in (outcome.reason or "")


# -- metering, scaling -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "method", "url", "headers", "operation"),
    [
        ("queue", "GET", "http://h/acct/q/messages?numofmessages=32&visibilitytimeout=30", {}, "queue.GetMessages"),
        ("queue", "GET", "http://h/acct/q/messages?numofmessages=1&peekonly=true", {}, "queue.PeekMessages"),
        ("queue", "POST", "http://h/acct/q/messages", {}, "queue.PutMessage"),
        ("queue", "DELETE", "http://h/acct/q/messages/abc?popreceipt=x", {}, "queue.DeleteMessage"),
        ("queue", "PUT", "http://h/acct/q/messages/abc?popreceipt=x&visibilitytimeout=0", {}, "queue.UpdateMessage"),
        ("queue", "GET", "https://a.queue.core.windows.net/q?comp=metadata", {}, "queue.GetQueueMetadata"),
        ("queue", "PUT", "https://a.queue.core.windows.net/q", {}, "queue.CreateQueue"),
        ("blob", "PUT", "http://h/acct/c/b.json", {}, "blob.PutBlob"),
        ("blob", "GET", "http://h/acct/c/b.json", {}, "blob.GetBlob"),
        ("blob", "PUT", "http://h/acct/c/l?comp=lease", {"x-ms-lease-action": "renew"}, "blob.LeaseBlob.Renew"),
        ("blob", "GET", "http://h/acct/c?restype=container&comp=list&prefix=x", {}, "blob.ListBlobs"),
        ("blob", "PUT", "http://h/acct/c?restype=container", {}, "blob.CreateContainer"),
    ],
)
def test_storage_requests_are_classified_as_the_operations_azure_bills(service, method, url, headers, operation):
    assert classify(service, method, url, headers) == operation


@given(st.integers(-5, 10**6), st.integers(1, 10_000), st.integers(1, 64))
def test_drainers_grow_with_depth_within_bounds(depth, per, maximum):
    n = drainers_for_depth(depth, per_drainer=per, maximum=maximum)
    assert 1 <= n <= maximum
    assert n == maximum or n * per >= depth


@given(st.lists(st.integers(0, 10**6), max_size=50), st.integers(1, 10_000), st.integers(0, 5_000))
def test_every_message_left_behind_has_a_wake_up_after_it_is_visible_within_the_window(due, window, margin):
    margin = min(margin, window)
    scheduled: list[int] = []
    for t in due:
        at = wakeup_for(t, scheduled, window_ms=window, margin_ms=margin)
        if at is not None:
            scheduled.append(at)
    for t in due:
        assert any(margin <= s - t <= window for s in scheduled), "never before visible + margin, never late"
    assert len(scheduled) <= len(set(due))


@pytest.mark.parametrize(
    "text",
    [
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFl==;BlobEndpoint=x",
        "Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey=abc/def+ghi=;EntityPath=q",
        "GET https://a.blob.core.windows.net/c/b?sv=2021&se=2030&sig=AbCd%2Fef%3D&sp=r failed",
        "Authorization: Bearer eyJ0eXAiOiJKV1QiLCJhbGciOi.payload.signature",
    ],
)
def test_secrets_are_masked_in_free_text(text):
    from shared.core.redact import redact

    masked = redact(text)
    for secret in ("Eby8vdM02xNOcqFl", "abc/def+ghi", "AbCd%2Fef", "eyJ0eXAiOiJKV1Qi"):
        assert secret not in masked
    assert "***" in masked


any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()  # NaN and the infinities too: json writes them, msgspec refuses them
    | st.text(st.characters(codec=None, categories=None), max_size=20),  # with surrogates: msgspec cannot encode them
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def assert_decodes_alike(data: str | bytes) -> None:
    try:
        expected = repr(json.loads(data))  # repr: NaN is not equal to itself, -0.0 equals 0.0
    except ValueError as e:
        with pytest.raises(type(e)):
            fastjson.loads(data)
        return
    assert repr(fastjson.loads(data)) == expected


@given(any_json, st.booleans(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_fast_json_decodes_every_text_to_what_the_standard_library_does(value, ascii_only, as_bytes):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert_decodes_alike(text.encode("utf-8", "surrogatepass") if as_bytes else text)


EDGES = ['{"a":1,"a":2}', "[1e400]", '["\\ud800"]', '["\ud800"]', "\ufeff[1]", '{"a":', "[NaN]", b'"\xff"']


@pytest.mark.parametrize("text", EDGES)
def test_fast_json_agrees_on_the_edges(text):
    assert_decodes_alike(text)


# -- put-backs and the committed attempts' memory --------------------------------------------------------------------


def test_a_chunk_of_a_batch_still_submitting_is_hidden_1_s_first_then_twice_as_long_each_time_up_to_a_minute():
    from shared.engine.settling import MAX_WAIT_DELAY_S, wait_delay_s

    assert [wait_delay_s(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert MAX_WAIT_DELAY_S == 60


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
