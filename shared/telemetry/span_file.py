"""The local trace file: each finished span as one JSON line (`TRACES_FILE`, read by `python -m shared.cli trace`).

`shared.telemetry.export` chooses it when `TRACES_FILE` is set and no other sink is.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from shared.core.errors import SettingsError
from shared.core.settings import Settings

log = logging.getLogger(__name__)


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One span as the trace file keeps it."""
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(span.parent.span_id, "016x") if span.parent is not None else None,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": format(link.context.trace_id, "032x"), "span_id": format(link.context.span_id, "016x")}
            for link in span.links
        ],
    }


def file_exporter(settings: Settings) -> JsonLinesExporter:
    """The trace file's exporter; a path that cannot be written fails at start, naming TRACES_FILE."""
    try:
        return JsonLinesExporter(Path(settings.traces_file), settings.traces_file_max_bytes)
    except OSError as e:
        raise SettingsError("TRACES_FILE", f"cannot write spans to {settings.traces_file}: {e.strerror or e}") from None


class JsonLinesExporter(SpanExporter):
    """Appends each span as one JSON line; past `max_bytes` the file becomes `<name>.1` and a new one starts."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):  # writable now, or a clear error at start
            pass

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), separators=(",", ":"), default=str) + "\n" for s in spans)
        with self._lock:
            try:
                if self.path.exists() and self.path.stat().st_size + len(lines) > self.max_bytes:
                    self.path.replace(self.path.with_name(self.path.name + ".1"))
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(lines)
            except OSError as e:
                log.warning("trace file %s: %s", self.path, e)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
