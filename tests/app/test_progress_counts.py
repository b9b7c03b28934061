"""Items settled, counted beside the batch list: progress counts each item once and is complete exactly when nothing is
pending, and the list and the status route count every set of records alike."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from shared.batch.results import ResultEntry
from shared.ops.progress import batch_progress
from shared.store.batch_index import IndexEntry
from tests.app.listing import ACCEPTED


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 50), st.integers(1, 60_000)), max_size=12),
    st.integers(1, 600),
)
def test_progress_counts_each_item_once_and_is_complete_exactly_when_nothing_is_pending(records, now_s):
    entries = [
        ResultEntry(chunk, 0, n, ok, failed, 0, ACCEPTED + timedelta(milliseconds=ms), blob=f"b{n}")
        for n, (chunk, ok, failed, ms) in enumerate(records)
    ]
    total = sum(ok + failed for _, ok, failed, _ in records) + 5
    batch = IndexEntry("ab" * 16, total, 4, ACCEPTED.isoformat(), ACCEPTED.isoformat())
    view = batch_progress(batch, entries, ACCEPTED + timedelta(seconds=now_s))
    items = view["items"]
    assert items["succeeded"] + items["failed"] + items["pending"] == total
    assert items["pending"] == 5
    assert view["status"] == ("processing" if entries else "accepted")
    assert view["eta_s"] is None or view["eta_s"] > 0
    if entries:
        assert view["wake_ms"] == min(ms for *_, ms in records)
    done = IndexEntry("ab" * 16, total - 5, 4, ACCEPTED.isoformat(), ACCEPTED.isoformat())
    finished = batch_progress(done, entries, ACCEPTED + timedelta(seconds=now_s))
    if total - 5:
        assert finished["status"].startswith("completed")
        assert finished["eta_s"] == 0
        assert finished["completed_at"] == finished["last_result_at"]


def counts_both_ways(sizes: tuple[int, ...], entries: list[ResultEntry]) -> tuple[dict[str, int], dict[str, int]]:
    """The items the status route and the batch list report for the same records."""
    from shared.batch.batches import Manifest, State
    from shared.ops.status import batch_status

    at = ACCEPTED.isoformat()
    manifest = Manifest("ab" * 16, "a", State.ACCEPTED, sum(sizes), sizes, ("q",), "d", at, accepted_at=at)
    listed = IndexEntry("ab" * 16, sum(sizes), len(sizes), at, at)
    now = ACCEPTED + timedelta(minutes=5)
    return batch_status(manifest, entries)["items"], batch_progress(listed, entries, now)["items"]


def test_an_item_replayed_while_its_original_was_redelivered_and_settled_counts_once_in_both_views():
    later = [ACCEPTED + timedelta(seconds=s) for s in range(4)]
    entries = [
        # Chunk 0 (10 items): item 7 failed for good and was parked; a replay moved it to retrying ...
        ResultEntry(0, 0, 0, ok=9, failed=0, retrying=1, written_at=later[0], attempt=1, blob="r1"),
        # ... and its replayed generation succeeded ...
        ResultEntry(0, 1, 7, ok=1, failed=0, retrying=0, written_at=later[1], attempt=1, blob="r2"),
        # ... then the original, still within its redelivery window, was delivered again and settled all ten.
        ResultEntry(0, 0, 0, ok=10, failed=0, retrying=0, written_at=later[2], attempt=2, blob="r3"),
    ]
    status, listed = counts_both_ways((10,), entries)
    assert status == {"total": 10, "succeeded": 10, "failed": 0, "pending": 0}
    assert listed == status


@given(st.data())
def test_the_batch_list_and_the_status_route_count_every_set_of_records_alike(data):
    sizes = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    entries = []
    for chunk, size in enumerate(sizes):
        held = size
        for gen in range(data.draw(st.integers(1, 3))):
            # A second attempt at a generation (a redelivery) may settle what the first left to the next one.
            carried = []
            for attempt in (1, 2)[: data.draw(st.integers(1, 2))]:
                ok = data.draw(st.integers(0, held))
                failed = data.draw(st.integers(0, held - ok))
                retrying = data.draw(st.integers(0, held - ok - failed))
                at = ACCEPTED + timedelta(seconds=gen * 2 + attempt)
                blob = f"b{chunk}.{gen}.{attempt}"
                entries.append(ResultEntry(chunk, gen, 0, ok, failed, retrying, at, attempt, blob))
                carried.append(retrying)
            held = carried[0]
    status, listed = counts_both_ways(sizes, entries)
    assert listed == status
    assert status["succeeded"] + status["failed"] <= status["total"]
