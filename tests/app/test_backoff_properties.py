"""Properties of the pure timing rules: back-off, retry delays and poll intervals, drainers per queue depth, wake-ups
for what is left behind, and how long a chunk of a batch still submitting is hidden."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.backoff import (
    PollPolicy,
    capped_exponential_ms,
    decreased_ms,
    jittered_ms,
    randomized_exponential_ms,
    retry_delay_ms,
)
from shared.core.settings import Decrease
from shared.engine.scaling import drainers_for_depth, wakeup_for

unit = st.floats(min_value=0, max_value=1, exclude_max=True)

# -- back-off --------------------------------------------------------------------------------------------------------


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


# -- scaling ---------------------------------------------------------------------------------------------------------


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


# -- put-backs -------------------------------------------------------------------------------------------------------


def test_a_chunk_of_a_batch_still_submitting_is_hidden_1_s_first_then_twice_as_long_each_time_up_to_a_minute():
    from shared.engine.settling import MAX_WAIT_DELAY_S, wait_delay_s

    assert [wait_delay_s(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert MAX_WAIT_DELAY_S == 60
