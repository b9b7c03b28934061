"""Quotas per tenant: the rule (pure) and what checking it costs a submit (real Azurite)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.core.errors import QuotaExceeded
from shared.core.lanes import Lane
from shared.intake.submit import submit
from shared.store.quotas import Limits, Use, admitted
from shared.telemetry import metering
from tests.app.conftest import RecordingPublisher

MINUTE_S = 29_000_000 * 60.0


def test_the_submits_of_a_minute_are_counted_and_the_next_minute_starts_afresh() -> None:
    limits = Limits(max_submits_per_min=2)
    use = Use("acme")
    for n in range(2):
        use = admitted(use, f"b{n}", 1, limits, MINUTE_S + 10)
    with pytest.raises(QuotaExceeded) as refused:
        admitted(use, "b2", 1, limits, MINUTE_S + 45.5)
    assert refused.value.details["limit"] == "TENANT_MAX_SUBMITS_PER_MIN"
    assert refused.value.retry_after_s == 15  # to the minute's end, rounded up
    assert admitted(use, "b2", 1, limits, MINUTE_S + 60).submits == 1


@given(st.lists(st.integers(1, 50), min_size=1, max_size=20), st.integers(1, 200))
def test_pending_items_never_pass_the_limit_and_a_batch_reserved_again_counts_once(sizes: list[int], most: int) -> None:
    limits, use = Limits(max_pending_items=most), Use("acme")
    for n, size in enumerate(sizes):
        if use.pending_items + size > most:
            with pytest.raises(QuotaExceeded, match="TENANT_MAX_PENDING_ITEMS"):
                admitted(use, f"b{n}", size, limits, MINUTE_S)
        else:
            use = admitted(use, f"b{n}", size, limits, MINUTE_S)
        assert use.pending_items <= most
        if use.pending:
            again = next(iter(use.pending))
            assert admitted(use, again, use.pending[again], limits, MINUTE_S).pending_items == use.pending_items


async def test_a_quota_costs_a_submit_one_read_and_one_write_whatever_its_items(configure) -> None:
    items = b"".join(b'{"i":%d}\n' % i for i in range(2000))

    async def cost(**quota: str) -> dict[str, int]:
        services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="100", **quota)
        await services.storage.ensure_container(services.settings.state_container)
        await submit(services, b'{"warm":1}\n', content_type="application/x-ndjson", content_encoding=None,
                     idempotency_key=None, lane=Lane("", "acme"))  # fmt: skip
        with metering.tally() as counted:
            await submit(services, items, content_type="application/x-ndjson", content_encoding=None,
                         idempotency_key=None, lane=Lane("", "acme"))  # fmt: skip
        return dict(counted)

    without = cost()
    with_quota = cost(TENANT_MAX_PENDING_ITEMS="100000", TENANT_MAX_SUBMITS_PER_MIN="100")
    plain, quota = await without, await with_quota
    extra = {op: quota.get(op, 0) - plain.get(op, 0) for op in set(plain) | set(quota)}
    assert {op: n for op, n in extra.items() if n} == {"blob.GetBlob": 1, "blob.PutBlob": 1}
