"""Properties of the pure parts a chunk travels in: chunking, envelopes (inline, compressed, claim checks and retry
references) and trigger events, and what each refuses."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.batch import envelope
from shared.batch.batches import new_batch_id
from shared.batch.chunking import plan_chunks
from shared.core.errors import MalformedEnvelope, MalformedEvent
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import INLINE_MAX_BYTES

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)

# -- chunking and envelopes ------------------------------------------------------------------------------------------


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


# -- trigger events --------------------------------------------------------------------------------------------------


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
