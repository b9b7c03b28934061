"""The handler limits' arithmetic (`shared.engine.limits`), by hand cases; tests/faults/test_limits.py holds them on two
real hosts."""

from __future__ import annotations

import pytest

from shared.engine.limits import Claim, Pacer, claim_for, in_flight_share


@pytest.mark.parametrize("limit", [1, 2, 7, 16])
@pytest.mark.parametrize("drainers", [1, 2, 3, 5, 20])
def test_in_flight_shares_add_up_to_the_limit(limit: int, drainers: int) -> None:
    shares = [in_flight_share(limit, drainers, rank) for rank in range(drainers)]
    assert sum(shares) == limit
    assert max(shares) - min(shares) <= 1


def test_a_drainer_that_joins_takes_only_the_room_nobody_claims() -> None:
    # a holds all 4 places and the whole rate; b has just leased its slot.
    claims = {"leases/q/0": Claim(4, 100.0)}
    b = claim_for("leases/q/1", ["leases/q/0", "leases/q/1"], claims, in_flight=4, items_per_s=100.0, busy=0)
    assert b == Claim(0, 0.0)
    # a counts again with 3 chunks in flight: down to its fair share for the rate, to what it holds for chunks.
    a = claim_for("leases/q/0", ["leases/q/0", "leases/q/1"], claims, in_flight=4, items_per_s=100.0, busy=3)
    assert a == Claim(3, 50.0)
    claims["leases/q/0"] = a
    b = claim_for("leases/q/1", ["leases/q/0", "leases/q/1"], claims, in_flight=4, items_per_s=100.0, busy=0)
    assert b == Claim(1, 50.0)
    claims["leases/q/1"] = b
    assert sum(c.chunks for c in claims.values()) <= 4
    # a's chunks finish: it gives up the place it held beyond its share, and b takes its fair share next.
    claims["leases/q/0"] = claim_for("leases/q/0", list(claims), claims, in_flight=4, items_per_s=100.0, busy=0)
    assert claims["leases/q/0"] == Claim(2, 50.0)
    assert claim_for("leases/q/1", list(claims), claims, in_flight=4, items_per_s=100.0, busy=1) == Claim(2, 50.0)


def test_a_released_lease_claims_nothing_and_one_drainer_takes_everything() -> None:
    claims = {"leases/q/0": Claim(1, 50.0), "leases/q/1": Claim(1, 50.0)}
    alone = claim_for(
        "leases/q/1", ["leases/q/1"], {"leases/q/1": claims["leases/q/1"]}, in_flight=2, items_per_s=100.0, busy=1
    )
    assert alone == Claim(2, 100.0)
    # Only the limits that are set are claimed.
    assert claim_for("leases/q/1", [], {}, in_flight=None, items_per_s=100.0, busy=0) == Claim(0, 100.0)


def test_the_pacer_spaces_starts_by_the_items_each_one_carries() -> None:
    now = [10.0]
    pacer = Pacer(lambda: now[0])
    assert pacer.reserve(50, rate=100) == 0  # the first starts at once
    assert pacer.reserve(10, rate=100) == pytest.approx(0.5)  # after the first one's 50 items
    assert pacer.reserve(10, rate=100) == pytest.approx(0.6)
    now[0] = 20.0  # idle for a while: no credit saved up beyond starting at once
    assert pacer.reserve(100, rate=100) == 0
    assert pacer.ahead(rate=100, horizon_s=5, items_per_chunk=100) == 4  # the next may start in 1 s
