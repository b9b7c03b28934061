"""The default handler, the billing scenario the design comes from.

Each item is a sale `{id, amount, currency, author, distributor}`. Its amount is split between the
author, the distributor and the service by configured shares, in exact decimal arithmetic in the
currency's minor unit; the three parts always sum to the amount. Invalid items fail permanently
(retrying cannot make them valid), with the reason. The chunk summary totals each currency.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome

# ISO 4217 minor units for the currencies this handler accepts.
MINOR_UNITS: Mapping[str, int] = {
    "EUR": 2, "USD": 2, "GBP": 2, "CHF": 2, "CAD": 2, "AUD": 2, "SEK": 2, "NOK": 2, "DKK": 2, "PLN": 2,
    "CZK": 2, "RUB": 2, "CNY": 2, "INR": 2, "BRL": 2, "MXN": 2, "ZAR": 2, "HKD": 2, "SGD": 2, "NZD": 2,
    "JPY": 0, "KRW": 0, "ISK": 0, "HUF": 2, "KWD": 3, "BHD": 3, "JOD": 3, "OMR": 3, "TND": 3,
}  # fmt: skip
MAX_AMOUNT = Decimal("1e12")
# Per minor-unit exponent: no sign, ASCII digits only (re's \d would match any script's digits), no leading
# zeros, at most `exponent` fraction digits.
CANONICAL_AMOUNT = {
    e: re.compile(r"(0|[1-9][0-9]*)" + (rf"(\.[0-9]{{1,{e}}})?" if e else ""), re.ASCII)
    for e in set(MINOR_UNITS.values())
}
MAX_TEXT = 256


class InvalidItem(ValueError):
    """Raised (and turned into a permanent failure) when an item is not a valid sale."""


def split(amount: Decimal, *, author_share: Decimal, distributor_share: Decimal, exponent: int) -> dict[str, Decimal]:
    """Split `amount` exactly: author and author+distributor are rounded, the parts are their differences."""
    unit = Decimal(1).scaleb(-exponent)
    author = (amount * author_share).quantize(unit, rounding=ROUND_HALF_EVEN)
    author_and_distributor = (amount * (author_share + distributor_share)).quantize(unit, rounding=ROUND_HALF_EVEN)
    return {
        "author": author,
        "distributor": author_and_distributor - author,
        "service": amount - author_and_distributor,
    }


def parse_sale(item: Any) -> tuple[str, Decimal, str, int]:
    if not isinstance(item, dict):
        raise InvalidItem("item is not an object")
    for key in ("id", "author", "distributor"):
        value = item.get(key)
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
            raise InvalidItem(f"{key!r} must be a non-empty string of at most {MAX_TEXT} characters")
    currency = item.get("currency")
    if not isinstance(currency, str) or currency not in MINOR_UNITS:
        raise InvalidItem(f"currency {str(currency)[:8]!r} is not supported")
    exponent = MINOR_UNITS[currency]
    amount = parse_amount(item.get("amount"), exponent)
    return item["id"], amount, currency, exponent


def amount_rule(exponent: int) -> str:
    fraction = f", then optionally '.' and 1 to {exponent} digits" if exponent else ", with no fraction"
    return (
        "amount must be a canonical decimal string: ASCII digits 0-9 without sign, spaces, separators, "
        f"exponent or leading zeros{fraction} (the currency's minor unit)"
    )


def parse_amount(raw: Any, exponent: int) -> Decimal:
    """A canonical ASCII decimal string only: `Decimal()` alone would take " 19.99 ", "1_000.00",
    Arabic-Indic or fullwidth digits, "+5", "1e3" and JSON numbers (binary floats), each a way for one
    amount to be written several ways, or for a typo to be booked."""
    if not isinstance(raw, str):
        raise InvalidItem(f"{amount_rule(exponent)}; got a JSON {type(raw).__name__}")
    pattern = CANONICAL_AMOUNT[exponent]
    if len(raw) > 32 or not pattern.fullmatch(raw):
        raise InvalidItem(f"{amount_rule(exponent)}; got {raw[:32]!r}")
    amount = Decimal(raw)
    if amount <= 0 or amount > MAX_AMOUNT:
        raise InvalidItem("amount must be positive and at most 1e12")
    return amount.quantize(Decimal(1).scaleb(-exponent))


def handle(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    settings = context.settings
    outcomes: list[ItemOutcome] = []
    totals: dict[str, dict[str, Decimal]] = {}
    for item in items:
        try:
            sale_id, amount, currency, exponent = parse_sale(item)
        except InvalidItem as e:
            outcomes.append(ItemOutcome.failure(str(e), retryable=False))
            continue
        parts = split(
            amount,
            author_share=settings.billing_author_share,
            distributor_share=settings.billing_distributor_share,
            exponent=exponent,
        )
        outcomes.append(
            ItemOutcome.success({"id": sale_id, "currency": currency, **{k: str(v) for k, v in parts.items()}})
        )
        total = totals.setdefault(
            currency, dict.fromkeys(("amount", "author", "distributor", "service", "items"), Decimal(0))
        )
        total["amount"] += amount
        total["items"] += 1
        for key, value in parts.items():
            total[key] += value
    summary = {
        "totals": {
            currency: {k: (int(v) if k == "items" else str(v)) for k, v in total.items()}
            for currency, total in sorted(totals.items())
        }
    }
    return ChunkResult(outcomes, summary)
