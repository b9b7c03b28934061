"""Properties of the pure parts around the work: the billing handler's amounts and revenue split, the storage operations
Azure bills, secrets masked in free text, and the fast JSON decoder agreeing with the standard library."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core import fastjson
from shared.handlers.billing import InvalidItem, parse_amount, split
from shared.telemetry.metering import classify

# -- billing ---------------------------------------------------------------------------------------------------------


shares = st.decimals(min_value=0, max_value=1, places=3)


@given(st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1e9"), places=2), shares, shares)
def test_the_revenue_split_always_sums_to_the_amount_and_never_goes_negative(amount, a, d):
    if a + d > 1:
        a, d = a / 2, d / 2
    parts = split(amount, author_share=a, distributor_share=d, exponent=2)
    assert sum(parts.values()) == amount
    assert all(v >= 0 for v in parts.values())
    assert all(v == v.quantize(Decimal("0.01")) for v in parts.values())
    assert abs(parts["author"] - amount * a) <= Decimal("0.005")


canonical_amounts = st.builds(
    lambda whole, frac: f"{whole}.{frac}" if frac else str(whole),
    st.integers(1, 10**11),
    st.one_of(st.just(""), st.from_regex(r"[0-9]{1,2}", fullmatch=True)),
)

ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
FULLWIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))

# Ways to write one amount that Decimal() takes but a ledger must not: each names a different rule.
DISGUISES = [
    lambda a: f" {a} ",
    lambda a: f"+{a}",
    lambda a: f"0{a}",
    lambda a: a.replace("1", "_1", 1) if "1" in a[1:] else f"{a[0]}_{a[1:]}" if len(a) > 1 else f"1_{a}",
    lambda a: a.translate(ARABIC_INDIC),
    lambda a: a.translate(FULLWIDTH),
    lambda a: f"{a}0" if "." in a and len(a.split(".")[1]) == 2 else f"{a}.001",
    lambda a: f"{Decimal(a):E}",
]


@given(canonical_amounts, st.sampled_from(range(len(DISGUISES))))
def test_only_canonical_ascii_amounts_are_booked_and_every_disguise_fails_by_the_rule(amount, disguise):
    assert parse_amount(amount, 2) == Decimal(amount)
    disguised = DISGUISES[disguise](amount)
    if disguised == amount:
        return
    with pytest.raises(InvalidItem, match="canonical decimal string"):
        parse_amount(disguised, 2)


@pytest.mark.parametrize(
    "raw",
    [" 19.99 ", "1_000.00", "19.99".translate(ARABIC_INDIC), "19.99".translate(FULLWIDTH), 19.99, 20, "19.", "-5"],
)
def test_the_billing_handler_fails_a_non_canonical_amount_permanently_naming_the_rule(raw):
    from types import SimpleNamespace

    from shared.handlers.billing import handle

    sale = {"id": "s-1", "amount": raw, "currency": "EUR", "author": "a", "distributor": "d"}
    context = SimpleNamespace(
        settings=SimpleNamespace(billing_author_share=Decimal("0.7"), billing_distributor_share=Decimal("0.2"))
    )
    (outcome,) = handle([sale], context).outcomes  # type: ignore[arg-type]
    assert not outcome.ok
    assert not outcome.retryable
    assert "canonical decimal string" in (outcome.reason or "")


# -- metering, redaction, fast JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "method", "url", "headers", "operation"),
    [
        ("queue", "GET", "http://h/acct/q/messages?numofmessages=32&visibilitytimeout=30", {}, "queue.GetMessages"),
        ("queue", "GET", "http://h/acct/q/messages?numofmessages=1&peekonly=true", {}, "queue.PeekMessages"),
        ("queue", "POST", "http://h/acct/q/messages", {}, "queue.PutMessage"),
        ("queue", "DELETE", "http://h/acct/q/messages/abc?popreceipt=x", {}, "queue.DeleteMessage"),
        ("queue", "PUT", "http://h/acct/q/messages/abc?popreceipt=x&visibilitytimeout=0", {}, "queue.UpdateMessage"),
        ("queue", "GET", "https://a.queue.core.windows.net/q?comp=metadata", {}, "queue.GetQueueMetadata"),
        ("queue", "PUT", "https://a.queue.core.windows.net/q", {}, "queue.CreateQueue"),
        ("blob", "PUT", "http://h/acct/c/b.json", {}, "blob.PutBlob"),
        ("blob", "GET", "http://h/acct/c/b.json", {}, "blob.GetBlob"),
        ("blob", "PUT", "http://h/acct/c/l?comp=lease", {"x-ms-lease-action": "renew"}, "blob.LeaseBlob.Renew"),
        ("blob", "GET", "http://h/acct/c?restype=container&comp=list&prefix=x", {}, "blob.ListBlobs"),
        ("blob", "PUT", "http://h/acct/c?restype=container", {}, "blob.CreateContainer"),
    ],
)
def test_storage_requests_are_classified_as_the_operations_azure_bills(service, method, url, headers, operation):
    assert classify(service, method, url, headers) == operation


@pytest.mark.parametrize(
    "text",
    [
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFl==;BlobEndpoint=x",
        "Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey=abc/def+ghi=;EntityPath=q",
        "GET https://a.blob.core.windows.net/c/b?sv=2021&se=2030&sig=AbCd%2Fef%3D&sp=r failed",
        "Authorization: Bearer eyJ0eXAiOiJKV1QiLCJhbGciOi.payload.signature",
    ],
)
def test_secrets_are_masked_in_free_text(text):
    from shared.core.redact import redact

    masked = redact(text)
    for secret in ("Eby8vdM02xNOcqFl", "abc/def+ghi", "AbCd%2Fef", "eyJ0eXAiOiJKV1Qi"):
        assert secret not in masked
    assert "***" in masked


any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()  # NaN and the infinities too: json writes them, msgspec refuses them
    | st.text(st.characters(codec=None, categories=None), max_size=20),  # with surrogates: msgspec cannot encode them
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def assert_decodes_alike(data: str | bytes) -> None:
    try:
        expected = repr(json.loads(data))  # repr: NaN is not equal to itself, -0.0 equals 0.0
    except ValueError as e:
        with pytest.raises(type(e)):
            fastjson.loads(data)
        return
    assert repr(fastjson.loads(data)) == expected


@given(any_json, st.booleans(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_fast_json_decodes_every_text_to_what_the_standard_library_does(value, ascii_only, as_bytes):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert_decodes_alike(text.encode("utf-8", "surrogatepass") if as_bytes else text)


EDGES = ['{"a":1,"a":2}', "[1e400]", '["\\ud800"]', '["\ud800"]', "\ufeff[1]", '{"a":', "[NaN]", b'"\xff"']


@pytest.mark.parametrize("text", EDGES)
def test_fast_json_agrees_on_the_edges(text):
    assert_decodes_alike(text)
