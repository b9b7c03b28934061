"""6-field NCRONTAB schedules (`second minute hour day month day-of-week`), pure.

Like the NCrontab library the Functions host uses, a time matches only when *both* day and
day-of-week match (cron's "either" rule does not apply). Times are taken in the zone of `after`.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta

from emulators.functions.errors import ScheduleError

MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
DAY_NAMES = {name: i for i, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
SEARCH_LIMIT_YEARS = 8  # long enough for 29 February on a given weekday


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


FIELDS = (
    Field("second", 0, 59, {}),
    Field("minute", 0, 59, {}),
    Field("hour", 0, 23, {}),
    Field("day", 1, 31, {}),
    Field("month", 1, 12, MONTH_NAMES),
    Field("day-of-week", 0, 7, DAY_NAMES),  # 0 and 7 are both Sunday
)


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday

    def matches(self, when: datetime) -> bool:
        return (
            when.second in self.seconds
            and when.minute in self.minutes
            and when.hour in self.hours
            and self._day_matches(when)
        )

    def _day_matches(self, when: datetime) -> bool:
        return when.month in self.months and when.day in self.days and _weekday(when) in self.weekdays

    def next_occurrence(self, after: datetime) -> datetime:
        """The first matching time strictly after `after` (whole seconds, same tzinfo)."""
        day = after.replace(hour=0, minute=0, second=0, microsecond=0)
        floor = after.replace(microsecond=0)
        for _ in range(SEARCH_LIMIT_YEARS * 366):
            if self._day_matches(day):
                found = self._first_time_in_day(day, floor)
                if found is not None:
                    return found
            day = _next_day(day)
        raise ScheduleError(f"schedule {self.expression!r} never occurs")

    def _first_time_in_day(self, day: datetime, floor: datetime) -> datetime | None:
        """The earliest matching time on `day` that is later than `floor`."""
        for hour in self.hours:
            for minute in self.minutes:
                if day.replace(hour=hour, minute=minute, second=59) <= floor:
                    continue
                for second in self.seconds:
                    candidate = day.replace(hour=hour, minute=minute, second=second)
                    if candidate > floor:
                        return candidate
        return None


def _weekday(when: datetime) -> int:
    return (when.weekday() + 1) % 7


def _next_day(day: datetime) -> datetime:
    # Calendar arithmetic on the wall clock, so a DST change cannot shift midnight.
    following = (day.replace(tzinfo=None) + timedelta(days=1)).replace(tzinfo=day.tzinfo)
    return following


def parse(expression: str) -> CronSchedule:
    """Parse `second minute hour day month day-of-week`; lists, ranges, steps, `*` and names."""
    parts = expression.split()
    if len(parts) != len(FIELDS):
        raise ScheduleError(
            f"{expression!r} is not a 6-field NCRONTAB expression ({{second}} {{minute}} {{hour}} {{day}} "
            f"{{month}} {{day-of-week}}); got {len(parts)} fields"
        )
    values = [parse_field(part, field, expression) for part, field in zip(parts, FIELDS, strict=True)]
    seconds, minutes, hours, days, months, weekdays = values
    return CronSchedule(
        expression=expression,
        seconds=tuple(sorted(seconds)),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(day % 7 for day in weekdays),
    )


def parse_field(text: str, field: Field, expression: str) -> set[int]:
    result: set[int] = set()
    for item in text.split(","):
        result |= _parse_item(item, field, expression)
    return result


def _parse_item(item: str, field: Field, expression: str) -> set[int]:
    base, _, step_text = item.partition("/")
    step = _parse_number(step_text, field, expression) if step_text else 1
    if step < 1:
        raise ScheduleError(f"{expression!r}: step {step_text!r} in the {field.name} field must be positive")
    if base == "*":
        low, high = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _parse_value(first, field, expression), _parse_value(last, field, expression)
    else:
        low = _parse_value(base, field, expression)
        high = field.high if step_text else low
    if low > high:
        raise ScheduleError(f"{expression!r}: range {base!r} in the {field.name} field runs backwards")
    return set(range(low, high + 1, step))


def _parse_value(text: str, field: Field, expression: str) -> int:
    number = field.names.get(text.upper())
    if number is None:
        number = _parse_number(text, field, expression)
    if not field.low <= number <= field.high:
        raise ScheduleError(f"{expression!r}: {text!r} is outside {field.low}-{field.high} in the {field.name} field")
    return number


def _parse_number(text: str, field: Field, expression: str) -> int:
    if not text.isdigit():
        raise ScheduleError(f"{expression!r}: {text!r} is not a number in the {field.name} field")
    return int(text)
