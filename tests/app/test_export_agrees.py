"""The results export says of each item what the status route counts, however a chunk's copies walked their
generations (issue 37, the replay family's seed 420).

A chunk message put twice (a PutMessage applied whose answer was lost, retried by the SDK) has two copies with
their own dequeue counts. Each retry rewrites a copy as the next generation, so the copies walk apart: in seed
420 one copy's generation 2 recorded two items ok at attempt 4, while the other copy, a generation ahead, parked
the same items failed at its last attempt. The status route counts generation by generation (a generation
settles only what its predecessor left retrying) and said succeeded; the export took any failure first and
said failed. The export now follows the status route's rule by position (`results.item_outcomes`).

The property test over two copies' records then found the counts' own limit: where two lineages of one
generation hold one item, or a lineage of the next stems from a record not counted while the counted one left
items retrying, counts alone cannot tell the items apart (five of five counted done while one item's retry was
still to run). A chunk whose listing shows two records of handled items in one generation is now counted from
its records, by position (`result_store.list_counted`), for the status route, the list, finalize and the
tolerance.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.batch import results
from shared.batch.settlement import Failure, ResultRecord
from shared.ops import lifecycle
from shared.ops.reports import read_batch_page, read_batch_status
from shared.store.result_store import ResultWriter
from tests.app.sales import submit_ids

WRITTEN = datetime(2026, 1, 1, tzinfo=timezone.utc)
PARKED = "failed 4 times (MAX_DEQUEUE_COUNT 4); last: transient"


def seed_420(batch_id: str) -> list[ResultRecord]:
    """Chunk 0's records as seed 420 left them (its chunk 2, two items): the copies agree up to generation 1,
    then one records generation 2 ok at attempt 4 while the other's generation 3 parks the items."""

    def record(gen: int, attempt: int, ok: list[int] = (), failed: list[int] = (), retrying: list[int] = ()) -> Any:
        return ResultRecord(batch_id, 0, gen, attempt, [(p, {"n": p}) for p in ok],
                            [Failure(p, PARKED) for p in failed], list(retrying))  # fmt: skip

    return [
        record(0, 1, retrying=[0, 1]),
        record(1, 2, retrying=[0, 1]),
        record(1, 3, retrying=[0, 1]),
        record(2, 3, retrying=[0, 1]),
        record(3, 4, failed=[0, 1]),
        record(2, 4, ok=[0, 1]),
    ]


def counted_by_position(docs: list[dict[str, Any]], size: int) -> Counter[str]:
    return Counter(kind for kind, _ in results.item_outcomes(docs, size).values())


def entry_of(doc: dict[str, Any], n: int) -> results.ResultEntry:
    meta = results.blob_metadata({"records": [doc]})
    [entry] = results.entries(f"b/r{1900000000000 + n}-{n:08x}.json", meta, WRITTEN)
    return results.ResultEntry(**{**entry.__dict__, "blob": f"blob-{n:03d}"})


def chosen_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records that count (`results.newest`), one per lineage, each merged with the older records of its
    lineage where the chunk's copies recorded apart (`result_store.list_counted`, `read_chosen`)."""
    found = [entry_of(doc, n) for n, doc in enumerate(docs)]
    by_blob = {e.blob: doc for e, doc in zip(found, docs, strict=True)}
    apart = results.apart(found)
    out = []
    for e in results.newest(found):
        older = [by_blob[o.blob] for o in results.older(found, e)] if apart else []
        out.append(results.merged([*older, by_blob[e.blob]]))
    return out


def as_counted(docs: list[dict[str, Any]], size: int) -> tuple[dict[str, int], Counter[str]]:
    """What the status route counts of one chunk's records (`result_store.list_counted`), and what the export's
    lines say."""
    found = [entry_of(doc, n) for n, doc in enumerate(docs)]
    chosen = results.newest(found)
    if results.apart(found):
        chosen = results.told(chosen, chosen_docs(docs))
    [counts] = results.settled_counts(chosen, 1, [size]).values() or [dict.fromkeys(results.KINDS, 0)]
    return counts, counted_by_position(chosen_docs(docs), size)


def test_seed_420s_records_export_what_the_status_route_counts() -> None:
    docs = [r.to_json("t") for r in seed_420("b")]
    counts, lines = as_counted(docs, 2)
    assert (counts["ok"], counts["failed"]) == (2, 0)
    assert lines == Counter({"ok": 2}), "the items the newer generation 2 settled are not parked by generation 3"


@st.composite
def two_copies(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    """The records of a chunk of `n` items whose two copies each walk their generations: at each delivery every
    item still carried succeeds, fails for good or is retried (failed at the copy's last attempt); a copy may
    find its lineage recorded by the other and carry on without a record of its own."""
    n = draw(st.integers(1, 5))
    docs: list[dict[str, Any]] = []
    for _copy in range(draw(st.integers(1, 2))):
        carried, gen, attempt = list(range(n)), 0, 1
        while carried:  # a copy's walk ends: its last attempt (4) parks what it still carries
            # the other copy's record of this generation: carried on without a record of its own
            if attempt < 4 and draw(st.booleans()) and any(d["gen"] == gen for d in docs):
                mine = [d for d in docs if d["gen"] == gen][-1]
                carried = [p for p in carried if p not in results.settled_positions(mine)]  # `left_unsettled`'s rule
            else:
                kinds = {p: draw(st.sampled_from(["ok", "failed", "retrying"])) for p in carried}
                kinds = {p: ("failed" if k == "retrying" and attempt >= 4 else k) for p, k in kinds.items()}
                of = {k: [p for p in carried if kinds[p] == k] for k in ("ok", "failed", "retrying")}
                rec = ResultRecord("b", 0, gen, attempt, [(p, p) for p in of["ok"]],
                                   [Failure(p, "no") for p in of["failed"]], of["retrying"])  # fmt: skip
                docs.append(rec.to_json("t"))
                carried = of["retrying"]
            gen, attempt = gen + 1, attempt + draw(st.integers(1, 2))
    return n, docs


@settings(max_examples=400, deadline=None)
@given(two_copies())
def test_the_export_says_of_each_item_what_a_record_holds_and_what_the_status_route_counts(
    case: tuple[int, list[dict[str, Any]]],
) -> None:
    n, docs = case
    chosen = chosen_docs(docs)
    outcomes = results.item_outcomes(chosen, n)
    for position, (kind, _) in outcomes.items():
        assert any(position in kind_positions(doc, kind) for doc in chosen), "each line as a counted record says"
    counts, lines = as_counted(docs, n)
    assert {k: lines[k] for k in results.KINDS} == {k: counts[k] for k in results.KINDS}
    assert len(outcomes) == n, "every copy's walk ended: no item is left pending"


def kind_positions(doc: dict[str, Any], kind: str) -> set[int]:
    if kind == "failed":
        return {f["i"] for f in doc["failed"]}
    if kind == "ok":
        return {p for p, _ in results.successes(doc)}
    return set(doc.get(kind) or [])


@pytest.mark.timeout(60)
async def test_the_export_and_the_status_route_agree_on_a_chunk_whose_copies_walked_apart(configure) -> None:
    """On the real Azurite, through the export and the status route."""
    services = configure(CHUNK_MAX_ITEMS="2")
    batch_id = await submit_ids(services, ["a", "b"])
    container = await services.storage.ensure_container(services.settings.results_container)
    for record in seed_420(batch_id):  # each its own blob, as the copies' drainers wrote them
        await ResultWriter(container).write(record)

    status = await read_batch_status(services, batch_id)
    manifest, _, entries = await lifecycle.read(services, batch_id)
    lines = [line async for line in lifecycle.export(services, manifest, entries, status=None, start=0, limit=10)]
    assert (status["items"]["succeeded"], status["items"]["failed"]) == (2, 0)
    assert [(line["status"], line.get("value")) for line in lines] == [("succeeded", {"n": 0}), ("succeeded", {"n": 1})]


@pytest.mark.timeout(60)
async def test_a_chunk_whose_copies_recorded_one_generation_apart_counts_what_each_copy_settled(configure) -> None:
    """Found by the property above: copy 1 recorded items 0-2 and 4 ok and item 3 retrying, then its generation
    1 recorded item 3 ok; copy 2 (the newer record of generation 0) recorded items 0-3 ok and item 4 retrying.
    The listing's counts said 5 of 5 by a generation 1 that settled item 3 in item 4's place; taking the newer
    record alone would leave item 4 pending until copy 2's retry of it. Each item counts as the newest record
    that settled it says (`results.merged`): all five succeeded, and copy 2's retry, failing item 4 later,
    changes nothing (an outcome once recorded never changes)."""
    services = configure(CHUNK_MAX_ITEMS="5")
    batch_id = await submit_ids(services, [f"c-{i}" for i in range(5)])
    container = await services.storage.ensure_container(services.settings.results_container)

    def ok(gen: int, positions: list[int], retrying: list[int]) -> ResultRecord:
        return ResultRecord(batch_id, 0, gen, gen + 1, [(p, {"n": p}) for p in positions], [], retrying)

    for record in (ok(0, [0, 1, 2, 4], [3]), ok(1, [3], []), ok(0, [0, 1, 2, 3], [4])):
        await ResultWriter(container).write(record)

    async def agreed() -> dict[str, Any]:
        status = await read_batch_status(services, batch_id)
        [listed] = (await read_batch_page(services, 10, None))["batches"]
        manifest, _, entries = await lifecycle.read(services, batch_id)
        lines = [line async for line in lifecycle.export(services, manifest, entries, status=None, start=0, limit=9)]
        assert (listed["status"], listed["items"]["succeeded"]) == (status["status"], status["items"]["succeeded"])
        assert [(line["position"], line["status"]) for line in lines] == [(p, "succeeded") for p in range(5)]
        return status

    status = await agreed()
    assert (status["status"], status["items"]["succeeded"], status["items"]["pending"]) == ("completed", 5, 0)
    await ResultWriter(container).write(ResultRecord(batch_id, 0, 1, 2, [], [Failure(4, "no")], []))
    assert (await agreed())["status"] == "completed"
