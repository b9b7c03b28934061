"""The NCRONTAB parser against a brute-force oracle (hypothesis) and known schedules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.functions import ncrontab
from emulators.functions.errors import ScheduleError

MOMENTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)


def field_text(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    single = number.map(str)
    span = st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}")
    stepped = st.tuples(st.sampled_from(["*", str(low)]), st.integers(1, high - low + 1)).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    item = st.one_of(st.just("*"), single, span, stepped)
    return st.lists(item, min_size=1, max_size=3).map(",".join)


EXPRESSIONS = st.tuples(
    field_text(0, 59), field_text(0, 59), field_text(0, 23), field_text(1, 31), field_text(1, 12), field_text(0, 7)
).map(" ".join)


def oracle_next(schedule: ncrontab.CronSchedule, after: datetime) -> datetime | None:
    """Day by day, then every (hour, minute, second) of a matching day: slow, obviously right."""
    day = after.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(366 * 8):
        weekday = (day.weekday() + 1) % 7
        if day.month in schedule.months and day.day in schedule.days and weekday in schedule.weekdays:
            for h in sorted(schedule.hours):
                for m in sorted(schedule.minutes):
                    for s in sorted(schedule.seconds):
                        candidate = day.replace(hour=h, minute=m, second=s)
                        if candidate > after:
                            return candidate
        day += timedelta(days=1)
    return None


@settings(max_examples=300, deadline=None)
@given(expression=EXPRESSIONS, after=MOMENTS)
def test_next_occurrence_is_the_first_matching_second_after_the_given_time(expression: str, after: datetime) -> None:
    schedule = ncrontab.parse(expression)
    expected = oracle_next(schedule, after)
    if expected is None:
        with pytest.raises(ScheduleError):
            schedule.next_occurrence(after)
        return
    found = schedule.next_occurrence(after)
    assert found == expected
    assert found > after
    assert schedule.matches(found)


@settings(max_examples=200, deadline=None)
@given(expression=EXPRESSIONS, after=MOMENTS)
def test_the_occurrence_after_an_occurrence_is_strictly_later(expression: str, after: datetime) -> None:
    schedule = ncrontab.parse(expression)
    try:
        first = schedule.next_occurrence(after)
    except ScheduleError:
        return
    assert schedule.next_occurrence(first) > first


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 */5 * * * *", "2024-01-01T10:03:07", "2024-01-01T10:05:00"),
        ("*/1 * * * * *", "2024-01-01T10:03:07.5", "2024-01-01T10:03:08"),
        ("0 30 9 * * MON-FRI", "2024-01-05T10:00:00", "2024-01-08T09:30:00"),
        ("0 0 0 29 FEB *", "2023-03-01T00:00:00", "2024-02-29T00:00:00"),
        ("0 0 0 * * 7", "2024-01-01T00:00:00", "2024-01-07T00:00:00"),
        ("5/15 0 0 1 jan *", "2024-01-01T00:00:05", "2024-01-01T00:00:20"),
        ("0 0 12 1 1 *", "2024-12-31T23:59:59", "2025-01-01T12:00:00"),
    ],
)
def test_known_schedules(expression: str, after: str, expected: str) -> None:
    moment = datetime.fromisoformat(after).replace(tzinfo=UTC)
    assert ncrontab.parse(expression).next_occurrence(moment) == datetime.fromisoformat(expected).replace(tzinfo=UTC)


def test_day_and_day_of_week_must_both_match_as_in_ncrontab() -> None:
    friday_13th = ncrontab.parse("0 0 0 13 * FRI")
    found = friday_13th.next_occurrence(datetime(2024, 1, 1, tzinfo=UTC))
    assert found == datetime(2024, 9, 13, tzinfo=UTC)


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "* * * * * * *",
        "60 * * * * *",
        "* * 24 * * *",
        "* * * 0 * *",
        "* * * * 13 *",
        "*/0 * * * * *",
        "5-1 * * * * *",
        "x * * * * *",
        "* * * * * FUNDAY",
    ],
)
def test_malformed_expressions_are_rejected_with_a_schedule_error(expression: str) -> None:
    with pytest.raises(ScheduleError):
        ncrontab.parse(expression)


def test_a_schedule_that_never_occurs_says_so() -> None:
    with pytest.raises(ScheduleError, match="never occurs"):
        ncrontab.parse("0 0 0 31 2 *").next_occurrence(datetime(2024, 1, 1, tzinfo=UTC))
