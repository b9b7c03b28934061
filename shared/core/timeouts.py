"""The function timeout the host applies, and the drain budget it must leave room under (pure): checked once at
start by the composition root (`shared.runtime`), which reads host.json and the app setting that overrides it."""

from __future__ import annotations

from shared.core.errors import SettingsError

# The drain must stop taking messages this long before the function times out, at least: chunks in flight
# settle, the lease is released and the follow-up published (the real host ends the whole worker process at
# the timeout, every invocation with it).
MIN_TIMEOUT_MARGIN_S = 30.0


def function_timeout_s(raw: str | None) -> float | None:
    """host.json's `functionTimeout` ("hh:mm:ss" or "d.hh:mm:ss") in seconds; None when unbounded ("-1") or
    unset here (the plan's default then applies, and is checked where it is known)."""
    if raw is None or raw.strip() in ("", "-1"):
        return None
    head, _, rest = raw.strip().partition(":")
    days, _, hours_text = head.rpartition(".")
    parts = [hours_text, *rest.split(":")]
    if len(parts) != 3:
        raise SettingsError("functionTimeout", f"{raw!r} is not a timespan like 00:05:00")
    try:
        hours, minutes, seconds = int(parts[0]), int(parts[1]), float(parts[2])
        whole_days = int(days) if days else 0
    except ValueError:
        raise SettingsError("functionTimeout", f"{raw!r} is not a timespan like 00:05:00") from None
    return whole_days * 86_400 + hours * 3_600 + minutes * 60 + seconds


def check_drain_budget(budget_s: float, timeout_s: float | None) -> None:
    """Refuse a DRAIN_BUDGET_S that leaves no margin under functionTimeout (pure)."""
    if timeout_s is None:
        return
    margin = max(MIN_TIMEOUT_MARGIN_S, timeout_s / 10)
    if budget_s + margin > timeout_s:
        raise SettingsError(
            "DRAIN_BUDGET_S",
            f"{budget_s:g} s leaves {timeout_s - budget_s:g} s under functionTimeout ({timeout_s:g} s); "
            f"at most {timeout_s - margin:g} s, so that chunks in flight settle before the host ends the worker",
        )
