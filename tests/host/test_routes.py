"""Route templates as the Functions host matches them (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulators.functions.errors import RouteError
from emulators.functions.routes import MethodNotAllowed, RouteMatch, RouteTable, compile_route

SEGMENT_TEXT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=12)


@given(value=SEGMENT_TEXT)
def test_a_plain_parameter_takes_any_one_segment(value: str) -> None:
    assert compile_route("batches/{batch_id}").match(f"batches/{value}") == {"batch_id": value}


@given(number=st.integers(-(2**31), 2**31 - 1))
def test_an_int_constraint_accepts_32_bit_integers(number: int) -> None:
    assert compile_route("items/{id:int}").match(f"items/{number}") == {"id": str(number)}


@pytest.mark.parametrize("value", ["x", "1.5", "", "2147483648", "12a"])
def test_an_int_constraint_rejects_everything_else(value: str) -> None:
    assert compile_route("items/{id:int}").match(f"items/{value}") is None


@pytest.mark.parametrize(
    ("template", "path", "values"),
    [
        ("batches", "batches", {}),
        ("batches", "BATCHES/", {}),
        ("batches", "batches/x", None),
        ("files/{*path}", "files/a/b/c.txt", {"path": "a/b/c.txt"}),
        ("files/{*path}", "files", {}),
        ("reports/{year?}", "reports", {}),
        ("reports/{year?}", "reports/2024", {"year": "2024"}),
        ("pages/{n=1}", "pages", {"n": "1"}),
        ("docs/{name}.json", "docs/readme.json", {"name": "readme"}),
        ("docs/{name}.json", "docs/readme.xml", None),
        (
            "users/{id:guid}",
            "users/6f1c5a2e-4a8b-4c9a-9a57-0a1f0d7e5c11",
            {"id": "6f1c5a2e-4a8b-4c9a-9a57-0a1f0d7e5c11"},
        ),
        ("users/{id:guid}", "users/nope", None),
        ("flags/{on:bool}", "flags/True", {"on": "True"}),
        ("flags/{on:bool}", "flags/yes", None),
        ("names/{n:alpha:maxlength(3)}", "names/abc", {"n": "abc"}),
        ("names/{n:alpha:maxlength(3)}", "names/abcd", None),
        ("pages/{n:int:min(1)}", "pages/0", None),
        ("pages/{n:range(1,5)}", "pages/5", {"n": "5"}),
        ("codes/{c:regex(^[a-z]{{2}}$)}", "codes/ab", {"c": "ab"}),
        ("", "", {}),
    ],
)
def test_templates_match_like_the_host(template: str, path: str, values: dict[str, str] | None) -> None:
    assert compile_route(template).match(path) == values


@pytest.mark.parametrize(
    "template", ["a/{*rest}/b", "a/{x?}/b", "a/{x:nosuch}", "a/{x}/{x}", "a/{x", "a/{1x}", "a/{x:min(y)}"]
)
def test_invalid_templates_are_rejected(template: str) -> None:
    with pytest.raises(RouteError):
        compile_route(template)


def test_the_table_prefers_literals_over_parameters_whatever_the_order_of_registration() -> None:
    table: RouteTable[str] = RouteTable()
    table.add("items/{id}", ["GET"], "by-id")
    table.add("items/{id:int}", ["GET"], "by-number")
    table.add("items/latest", ["GET"], "latest")
    assert table.resolve("GET", "items/latest") == RouteMatch("latest", {})
    assert table.resolve("GET", "items/7") == RouteMatch("by-number", {"id": "7"})
    assert table.resolve("GET", "items/x") == RouteMatch("by-id", {"id": "x"})


def test_the_table_answers_405_with_the_allowed_methods_and_none_for_no_route() -> None:
    table: RouteTable[str] = RouteTable()
    table.add("batches", ["POST"], "submit")
    table.add("batches/{id}", ["GET"], "status")
    table.add("anything", None, "any")
    assert table.resolve("get", "batches") == MethodNotAllowed(("POST",))
    assert table.resolve("PATCH", "anything") == RouteMatch("any", {})
    assert table.resolve("GET", "nothing") is None
