"""A batch's lifecycle past its submit: a deadline, a start time, a failure tolerance, and ending it early (pure).

A submit may ask for `expires_in_s` (its unfinished items are recorded `expired` after it), `not_before`
(nothing of it is handled before then) and `max_failed_fraction` (once more than that share of its items
have failed for good, the batch ends `failed` and the rest is cancelled). The first two ride in every chunk
message's header (`shared.batch.envelope`), so a drainer judges them with no storage read. A batch is
ended early (cancelled, or failed by its tolerance) in its manifest and by a marker blob that every drainer
lists at most every `ENDED_CHECK_S` (`shared.store.ended`): no handler call of an ended batch starts later
than `ENDED_CHECK_S` after the manifest said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from shared.batch.batches import Admission, Manifest
from shared.batch.envelope import ChunkHeader

# How stale a drainer's knowledge of ended batches may be when it starts a handler call: the bound after a
# cancel's answer beyond which no handler call of that batch starts. Its cost: one listing of the ended
# markers per drainer process every ENDED_CHECK_S while it drains (none while idle).
ENDED_CHECK_S = 5.0
# Listings of the ended markers a chunk waits for when each answers later than ENDED_CHECK_S after it began,
# before it is left for redelivery rather than run on knowledge older than the bound.
ENDED_LISTINGS_MAX = 3
# Storage queues hide a message for at most 7 days: a start later than that cannot be kept without a poller.
MAX_NOT_BEFORE_S = 7 * 24 * 3600 - 60
MAX_EXPIRES_IN_S = 30 * 24 * 3600
# RFC 3339's date-time (section 5.6): full-date "T" full-time, its offset required; ASCII digits only.
RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d{1,9})?"
    r"(?P<offset>[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)
CLOCK_SKEW_S = 1.0  # between the hosts' clocks, allowed for where two of them are compared

CANCELLED = "cancelled"  # ended on request
FAILED = "failed"  # ended by max_failed_fraction


@dataclass(frozen=True)
class Options:
    expires_at: datetime | None = None
    not_before: datetime | None = None
    max_failed_fraction: float | None = None
    # As the request gave them, for binding an Idempotency-Key to them (a delay's not_before moves with the clock).
    expires_in_s: int | None = None
    not_before_asked: str | None = None
    # The batch's labels (`shared.batch.labels`): not its lifecycle, but given and bound with it.
    metadata: dict[str, str] | None = None

    def asked(self) -> tuple[int | None, str | None, float | None]:
        """expires_in_s, not_before and max_failed_fraction as the request gave them (`batches.bound`)."""
        return self.expires_in_s, self.not_before_asked, self.max_failed_fraction

    def header_fields(self) -> dict[str, int | float | None]:
        """What every chunk message of the batch carries (`ChunkHeader`)."""
        return {
            "expires_ms": epoch_ms(self.expires_at) if self.expires_at else None,
            "not_before_ms": epoch_ms(self.not_before) if self.not_before else None,
            "max_failed": self.max_failed_fraction,
        }


def epoch_ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def checked_expires_in_s(text: str | None) -> int | None:
    if text is None:
        return None
    # Its length is checked before it is parsed: Python refuses int() of more than 4,300 digits (issue 26 item 3).
    digits = text.lstrip("0") or "0"
    short = len(digits) <= len(str(MAX_EXPIRES_IN_S))
    if not (text.isascii() and text.isdigit() and short and 1 <= int(digits) <= MAX_EXPIRES_IN_S):
        raise ValueError(f'"expires_in_s" must be a whole number of seconds from 1 to {MAX_EXPIRES_IN_S} (30 days)')
    return int(digits)


def checked_not_before(text: str | None, now: datetime) -> datetime | None:
    """A delay in whole seconds, or an RFC 3339 date-time (with its offset); at most MAX_NOT_BEFORE_S ahead.
    Nothing else that Python's ISO 8601 reader takes (week or ordinal dates, the basic format, a date alone,
    a trailing NUL): a time the caller wrote one way must not be read another."""
    if text is None:
        return None
    problem = (
        '"not_before" must be a delay in whole seconds or an RFC 3339 date-time with its offset '
        f"(e.g. 2030-01-01T00:00:00Z), at most {MAX_NOT_BEFORE_S} s (7 days less a minute) ahead: "
        "a storage queue hides a message for at most 7 days"
    )
    if text.isascii() and text.isdigit():
        when = now + timedelta(seconds=int(text)) if len(text) <= 8 else None
    else:
        when = rfc3339(text)
    if when is None or (when - now).total_seconds() > MAX_NOT_BEFORE_S:
        raise ValueError(problem)
    return max(when.astimezone(timezone.utc), now)


def rfc3339(text: str) -> datetime | None:
    """An RFC 3339 date-time with its offset, or None for any other text (or a day or an hour that does not exist:
    2030-02-30, 24:00, a leap second)."""
    found = RFC3339.fullmatch(text)
    if found is None:
        return None
    fraction = (found["fraction"] or "")[:7]  # to the microsecond: the point and six digits
    offset = found["offset"].upper().replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(f"{found['date']}T{found['time']}{fraction}{offset}")
    except ValueError:
        return None


def checked_fraction(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1 or text.strip() != text or not text.isascii():
        raise ValueError('"max_failed_fraction" must be a number from 0 (any failure ends it) to below 1')
    return value


def options(
    expires_in_s: int | None, not_before: datetime | None, max_failed_fraction: float | None, now: datetime
) -> Options:
    """The lifecycle asked for; its deadline counts from its start when it has one."""
    start = not_before or now
    expires_at = start + timedelta(seconds=expires_in_s) if expires_in_s is not None else None
    return Options(
        expires_at, not_before if not_before and not_before > now else None, max_failed_fraction, expires_in_s
    )


def judged(header: ChunkHeader, now_ms: int) -> Admission:
    """A chunk of a committed batch, by the lifecycle its header carries."""
    if header.expires_ms is not None and now_ms >= header.expires_ms:
        return Admission.EXPIRED
    if header.not_before_ms is not None and now_ms < header.not_before_ms:
        return Admission.EARLY
    return Admission.PROCESS


def before_start(not_before: str | None, now: datetime | None) -> bool:
    """A batch whose not_before has not come yet (`scheduled` in the status route and the batch list)."""
    return not_before is not None and now is not None and now < datetime.fromisoformat(not_before)


def tripped(failed: int, items: int, fraction: float | None) -> bool:
    """More than `fraction` of the batch's items failed for good."""
    return fraction is not None and failed > fraction * items


def never_started(manifest: Manifest) -> bool:
    """Ended so long before its not_before that no drainer could have started a handler call of it."""
    if manifest.ended_at is None or manifest.not_before is None:
        return False
    ended = datetime.fromisoformat(manifest.ended_at)
    return ended + timedelta(seconds=ENDED_CHECK_S + CLOCK_SKEW_S) <= datetime.fromisoformat(manifest.not_before)


def expired(manifest: Manifest, now: datetime) -> bool:
    return manifest.expires_at is not None and now >= datetime.fromisoformat(manifest.expires_at)
