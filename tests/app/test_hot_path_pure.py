"""The drain's per-message bookkeeping made cheaper (issue 42) says exactly what it said before: a chunk's settlement
and its record's document, and the plain JSON writer, against the plain rules they implement (pure)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.batch import results
from shared.batch.settlement import MAX_ID_CHARS, Failure, item_ids, settle
from shared.core import fastjson
from shared.handlers import ItemOutcome

plain_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)  # beyond 64 bits too: msgspec refuses, json writes
    | st.text(st.characters(codec=None, categories=None), max_size=12),  # lone surrogates too
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(plain_json)
@settings(max_examples=400, deadline=None)
def test_the_plain_writer_writes_the_value_json_writes(value):
    written = fastjson.dumps_plain(value)
    assert json.loads(written) == json.loads(json.dumps(value, separators=(",", ":")))


class Str(str):
    pass


ids = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=False),
    st.text(max_size=MAX_ID_CHARS + 5), st.builds(Str, st.text(max_size=3)), st.lists(st.integers(), max_size=2),
)  # fmt: skip
items = st.one_of(st.fixed_dictionaries({"id": ids}), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                  st.integers(), st.text(max_size=3), st.none())  # fmt: skip


def expected_ids(positions: list[int], batch: list[Any]) -> list[tuple[int, Any]]:
    """The rule as stated: an object's "id" kept if it is an integer (not a bool) or a string of at most
    MAX_ID_CHARS."""
    found = []
    for p, item in zip(positions, batch, strict=True):
        value = item.get("id") if isinstance(item, dict) else None
        if (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and len(value) <= MAX_ID_CHARS
        ):
            found.append((p, value))
    return found


outcomes = st.one_of(
    st.just(ItemOutcome.success()),
    st.builds(ItemOutcome.success, st.integers() | st.text(max_size=3) | st.floats()),
    st.builds(lambda r, retry: ItemOutcome.failure(r, retryable=retry), st.text(max_size=5), st.booleans()),
)


@given(st.lists(st.tuples(outcomes, items), max_size=30), st.integers(1, 6), st.booleans())
@settings(max_examples=400, deadline=None)
def test_a_settlement_is_what_its_rules_say(cases, attempt, all_ok):
    if all_ok:  # the path taken when every item succeeded
        cases = [(ItemOutcome.success(), item) for _, item in cases]
    positions = [3 * i + 1 for i in range(len(cases))]
    outs, batch = [o for o, _ in cases], [i for _, i in cases]
    s = settle(batch_id="b", chunk=2, gen=1, positions=positions, outcomes=outs, attempt=attempt, max_attempts=4,
               items=batch)  # fmt: skip
    ok = [(p, o.value) for p, o in zip(positions, outs, strict=True) if o.ok]
    retry = [p for p, o in zip(positions, outs, strict=True) if not o.ok and o.retryable and attempt < 4]
    poisoned = [p for p, o in zip(positions, outs, strict=True) if not o.ok and not (o.retryable and attempt < 4)]
    assert s.record.ok == ok
    assert s.retry == s.record.retrying == retry
    assert [f.position for f in s.poison] == [f.position for f in s.record.failed] == poisoned
    assert all(isinstance(f, Failure) and f.reason for f in s.poison)
    assert s.record.ids == expected_ids(positions, batch) == item_ids(positions, batch)
    assert s.complete == (not retry)


@given(st.lists(st.tuples(outcomes, items), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_a_record_document_reads_back_as_it_was_written(cases):
    positions = list(range(len(cases)))
    outs, batch = [o for o, _ in cases], [i for _, i in cases]
    record = settle(batch_id="b", chunk=0, gen=0, positions=positions, outcomes=outs, attempt=9, max_attempts=3,
                    items=batch).record  # fmt: skip
    doc = results.group_document("b", [record], "2026-01-01T00:00:00+00:00")
    plain = not record.holds_values
    written = fastjson.dumps_plain(doc) if plain else json.dumps(doc, separators=(",", ":")).encode()
    [stored] = json.loads(written)[results.RECORDS]
    assert results.successes(stored) == [(p, v) for p, v in record.ok] or any(
        v != v
        for _, v in record.ok  # NaN is not equal to itself
    )
    assert stored["ids"] if record.ids else "ids" not in stored
    assert [tuple(pair) for pair in stored.get("ids", [])] == record.ids
    assert ("values" in stored) == any(v is not None for _, v in record.ok)
