"""Hostile requests against the real app in the local host: each is refused with a 4xx JSON error that
names the problem, nothing is stored or enqueued, and the host keeps answering."""

from __future__ import annotations

import pytest

from tests.hostile.cases import CATEGORIES, NDJSON, TRAVERSALS, Bad
from tests.hostile.conftest import HostileStack, json_error

pytestmark = pytest.mark.hostile


def refusal_problem(hostile: HostileStack, case: Bad) -> str | None:
    """What is wrong with the answer to `case`, or None if it was refused as it must be."""
    reply = hostile.request(case.method, case.path, case.body, case.headers)
    if reply.status != case.status:
        return f"{case.name}: {reply.status} (wanted {case.status}) {reply.body[:200]!r}"
    try:
        error = json_error(reply)
    except (AssertionError, ValueError) as e:
        return f"{case.name}: not a JSON error: {e} {reply.body[:200]!r}"
    said = f"{error['message']} {error.get('limit', '')}".lower()
    if case.names.lower() not in said:
        return f"{case.name}: the error does not name {case.names!r}: {error}"
    return None


@pytest.mark.parametrize("category", sorted(CATEGORIES))
def test_hostile_requests_are_refused_by_name_and_store_nothing(hostile: HostileStack, category: str) -> None:
    hostile.wait_drained()
    depth, blobs = hostile.work_depth(), hostile.batch_blobs()
    cases = CATEGORIES[category]()
    problems = [p for p in (refusal_problem(hostile, case) for case in cases) if p]
    assert not problems, "\n".join(problems)
    assert hostile.work_depth() == depth == hostile.scheduled_chunks(), "a refused request enqueued a chunk"
    assert hostile.batch_blobs() == blobs, "a refused request stored a manifest or a claim check"
    assert hostile.alive(), f"the host stopped answering after {category}:\n{hostile.stack.tails()}"


def test_the_catalogue_holds_at_least_200_hostile_requests() -> None:
    counts = {name: len(make()) for name, make in CATEGORIES.items()}
    assert sum(counts.values()) + len(TRAVERSALS) >= 200, counts


@pytest.mark.parametrize("tail", TRAVERSALS)
def test_path_traversal_never_reaches_a_function_or_a_file(hostile: HostileStack, tail: str) -> None:
    reply = hostile.request("GET", f"/api/batches/{tail}")
    assert reply.status == 404, (reply.status, reply.body[:200])
    assert reply.body == b"" or json_error(reply)["code"] == "not_found", reply.body[:200]
    assert hostile.alive()


def test_ndjson_strings_may_hold_unicode_line_separators(hostile: HostileStack) -> None:
    lines = ['{"id": "sep-1", "s": "a\u2028b"}', '{"id": "sep-2", "s": "c\u0085d\u2029e"}']
    reply = hostile.request("POST", "/api/batches", "\n".join(lines).encode(), NDJSON)
    assert reply.status == 202, reply.body[:300]
    assert reply.json()["items"] == 2, "JSON strings may hold U+2028/U+0085/U+2029: they do not end a line"
    hostile.wait_drained()
