"""Defects in how the HTTP functions refuse a malformed request (`sim.doors.malformed`: a 4xx with a JSON body naming
the problem, and nothing written), caught in the `replay` family: issue 26 items 2-4, fixed by c8e5957."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared import api
from shared.core.errors import MalformedRequest
from shared.intake.body import Limits
from shared.ops.replay_request import replay_request
from sim.doors.malformed import MALFORMED
from sim.mutants.base import Mutant, swap

A_BATCH_ID = "0" * 32  # stands in for what the old check let through, while today's checks the rest


def _relaxed(body: bytes, limits: Limits, relax: str) -> dict[str, Any]:
    """Today's replay_request, but the field `relax` taken as the old code took it."""
    try:
        doc = json.loads(body)
    except ValueError:
        return replay_request(body, limits)
    if not isinstance(doc, dict) or relax not in doc:
        return replay_request(body, limits)
    given = doc[relax]
    if relax == "background" and given is None:  # null read as left out: in the foreground
        return replay_request(json.dumps({k: v for k, v in doc.items() if k != relax}).encode(), limits)
    if relax == "batch_id" and isinstance(given, str):  # any string, not only a batch id
        return replay_request(json.dumps(doc | {relax: A_BATCH_ID}).encode(), limits) | {relax: given}
    if relax == "message_ids" and isinstance(given, list) and all(isinstance(i, str) for i in given):
        out = replay_request(json.dumps(doc | {relax: ["a"] * len(given)}).encode(), limits)
        return out | {relax: set(given)}
    return replay_request(body, limits)


@contextmanager
def _background_null_is_foreground() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 2): `"background": null` is read as left out, so the replay runs in the
    foreground (unbounded then) where the caller may have meant a job; today it is a 400 naming "background"."""
    yield from swap(api, "replay_request", lambda body, limits: _relaxed(body, limits, "background"))


@contextmanager
def _replay_ids_unchecked() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 4): a replay's `batch_id` (and `message_ids`) may be any string: `"../../x"`
    is answered as a replay that found nothing, or stored in a background job; today a 400 naming the field."""

    def unchecked(body: bytes, limits: Limits) -> dict[str, Any]:
        return _relaxed(body, limits, "batch_id" if b"batch_id" in body else "message_ids")

    yield from swap(api, "replay_request", unchecked)


@contextmanager
def _int_parsed_before_its_length() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 3): an integer query parameter is parsed before its length is checked, so
    4,301 digits make `int()` raise a ValueError (Python's integer-string limit) that escapes the 400 path: a 500."""

    def parsed(params: Any, name: str, default: int, low: int, high: int) -> int:
        text = params.get(name)
        if text is None:
            return default
        if not (text.isascii() and text.isdigit() and low <= int(text) <= high):
            raise MalformedRequest(f'"{name}" must be an integer from {low} to {high}')
        return int(text)

    yield from swap(api, "int_param", parsed)


MUTANTS = [
    Mutant("background-null-is-foreground", "c8e5957 (issue 26 item 2)", 'a replay\'s "background": null is read '
           "as left out: a synchronous replay", _background_null_is_foreground, family="replay", expect=MALFORMED,
           invariant="a malformed request gets a 4xx with a JSON body naming the problem and writes nothing "
                     "(`sim.doors.malformed`)"),
    Mutant("replay-ids-unchecked", "c8e5957 (issue 26 item 4)", "a replay's batch_id and message_ids may be any "
           'string ("../../x" stored in a job)', _replay_ids_unchecked, family="replay", expect=MALFORMED,
           invariant="a malformed request gets a 4xx with a JSON body naming the problem and writes nothing "
                     "(`sim.doors.malformed`)"),
    Mutant("int-parsed-before-its-length", "c8e5957 (issue 26 item 3)", "an integer query parameter of 4,301 "
           "digits is parsed before its length is checked: a 500", _int_parsed_before_its_length, family="replay",
           expect=MALFORMED, invariant="a malformed request gets a 4xx with a JSON body naming the problem and "
                                       "writes nothing (`sim.doors.malformed`)"),
]  # fmt: skip
