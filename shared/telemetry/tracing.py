"""Trace context across the app's own carriers: the Service Bus trigger event and the chunk envelope.

Storage queue messages have no headers, so a consumer of a plain queue loses the producer's trace. This app owns
its envelope: the submit's W3C `traceparent` travels in every chunk it enqueues (`"t"`), and each trigger event
carries the publisher's in its application properties (`traceparent`, and `Diagnostic-Id`, which the Service
Bus SDKs and the Functions host read). A chunk's span is a child of the submit that created it; a drain session
is a child of the event that woke it and links to each batch it serves.

Only the OpenTelemetry API is used here: without a configured SDK (`shared.telemetry.export`) every span is a no-op.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER = trace.get_tracer("queue_drain")
PROPAGATOR = TraceContextTextMapPropagator()
# 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>: what the envelope and the event accept; anything else is
# ignored (an untrusted carrier must not break a drain).
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
EVENT_KEYS = ("traceparent", "Diagnostic-Id")

# The batch a log record is about, for log correlation (`CorrelationFilter`).
current_batch: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_batch", default=None)


def traceparent() -> str | None:
    """The current span's context as a W3C traceparent, or None when nothing is being traced."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier)
    value = carrier.get("traceparent")
    return value if value and TRACEPARENT.match(value) else None


def context_of(value: Any) -> otel_context.Context | None:
    """The remote context a carried traceparent names; None for a missing or malformed one."""
    if not isinstance(value, str) or not TRACEPARENT.match(value):
        return None
    ctx = PROPAGATOR.extract({"traceparent": value})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def link_to(value: Any) -> Link | None:
    ctx = context_of(value)
    return None if ctx is None else Link(trace.get_current_span(ctx).get_span_context())


def event_properties() -> dict[str, str]:
    """Application properties that carry the current context on a Service Bus message."""
    value = traceparent()
    return {} if value is None else dict.fromkeys(EVENT_KEYS, value)


def from_event(properties: Mapping[str, Any] | None) -> str | None:
    """The traceparent a trigger event carries, if any."""
    for key in EVENT_KEYS:
        value = (properties or {}).get(key)
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if isinstance(value, str) and TRACEPARENT.match(value):
            return value
    return None


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: str | None = None,
    links: list[Link] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span, current within the block; `parent` a carried traceparent (else the current context). An exception
    marks it as an error and propagates."""
    ctx = context_of(parent) if parent else None
    with TRACER.start_as_current_span(
        name, context=ctx, kind=kind, links=links, attributes=dict(attributes or {}), record_exception=True
    ) as current:
        yield current


def set_outcome(current: Span, outcome: str, *, ok: bool = True) -> None:
    current.set_attribute("queue_drain.outcome", outcome)
    if not ok:
        current.set_status(Status(StatusCode.ERROR, outcome))


@contextmanager
def about_batch(batch_id: str) -> Iterator[None]:
    token = current_batch.set(batch_id)
    try:
        yield
    finally:
        current_batch.reset(token)


def correlate_log_records() -> None:
    """Every log record from now on carries the current trace id, span id and batch id (as `trace_id`, `span_id`,
    `batch_id`; empty when there is none), whichever logger made it, so a log line can be found from its trace
    and the other way round. Once per process (`shared.telemetry.export.configure`)."""
    make = logging.getLogRecordFactory()

    def correlated(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else ""
        record.span_id = format(ctx.span_id, "016x") if ctx.is_valid else ""
        record.batch_id = current_batch.get() or ""
        return record

    logging.setLogRecordFactory(correlated)
