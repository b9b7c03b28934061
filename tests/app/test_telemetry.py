"""The app's metrics and log correlation (issue 15): metrics as an OpenTelemetry SDK reads them after a real
submit and drain on Azurite; log records carrying the trace, span and batch they belong to.

The SDK's in-memory reader stands in for an exporter (Application Insights or OTLP cannot run here); the
instruments, the app code that records them and the storage they count are the real ones.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from shared import runtime
from shared.core.errors import SettingsError
from shared.core.events import Reason, TriggerEvent
from shared.router import route
from shared.telemetry import export as telemetry
from shared.telemetry import metrics, span_file, tracing
from tests.app.conftest import drain_all
from tests.app.sales import submit_ids

_reader: InMemoryMetricReader | None = None


@pytest.fixture
def reader() -> InMemoryMetricReader:
    """One meter provider per process (OpenTelemetry allows setting it once), shared by these tests."""
    global _reader
    if _reader is None:
        _reader = InMemoryMetricReader()
        otel_metrics.set_meter_provider(MeterProvider(metric_readers=[_reader]))
        metrics.register_observers(runtime.COUNTER)
    _reader.get_metrics_data()  # start from here: cumulative sums are compared before and after
    return _reader


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def total(found: dict[str, list[Any]], name: str, **attributes: Any) -> float:
    return sum(p.value for p in found.get(name, []) if all(p.attributes.get(k) == v for k, v in attributes.items()))


@pytest.mark.slow
async def test_a_drain_counts_items_by_outcome_chunks_sessions_wake_latency_and_storage(configure, reader) -> None:
    services = configure(HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="2", CHUNK_MAX_ITEMS="10")
    queue = services.settings.work_queue
    before = points(reader)
    await submit_ids(services, [f"m-{i}" for i in range(20)])  # t-7 style failures: m-7 and m-17
    await drain_all(services)
    after = points(reader)

    def grew(name: str, **attributes: Any) -> float:
        return total(after, name, **attributes) - total(before, name, **attributes)

    assert grew("queue_drain.items", queue=queue, outcome="succeeded") == 18
    assert grew("queue_drain.items", queue=queue, outcome="retried") == 2  # first attempt of m-7 and m-17
    assert grew("queue_drain.items", queue=queue, outcome="parked") == 2  # their second, the last allowed
    assert grew("queue_drain.chunks", queue=queue, outcome="retrying") == 2
    assert grew("queue_drain.chunks", queue=queue, outcome="complete") == 2  # the two retries, settled by parking
    assert grew("queue_drain.drain.sessions", reason="submitted") >= 1
    wake = [p for p in after.get("queue_drain.wake_latency", []) if p.attributes.get("queue") == queue]
    assert wake, "chunk 0 of the batch records how long after acceptance it was handled"
    assert wake[0].count >= 1
    assert grew("queue_drain.storage.transactions", operation="queue.PutMessage") >= 2  # the submit's chunks
    assert grew("queue_drain.storage.transactions", operation="queue.DeleteMessage") >= 2


async def test_log_records_carry_the_trace_the_span_and_the_batch(configure, caplog) -> None:
    configure()  # the app's services: telemetry configured once per process, log correlation with it
    context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
    caplog.set_level(logging.INFO, logger="shared.engine.drainer")
    with trace.use_span(NonRecordingSpan(context)), tracing.about_batch("0123456789abcdef0123456789abcdef"):
        logging.getLogger("shared.engine.drainer").info("inside a chunk's span")
    logging.getLogger("shared.engine.drainer").info("outside any span")
    inside, outside = caplog.records[-2:]
    assert inside.trace_id == "0af7651916cd43dd8448eb211c80319c"  # type: ignore[attr-defined]
    assert inside.span_id == "b7ad6b7169203331"  # type: ignore[attr-defined]
    assert inside.batch_id == "0123456789abcdef0123456789abcdef"  # type: ignore[attr-defined]
    assert (outside.trace_id, outside.span_id, outside.batch_id) == ("", "", "")  # type: ignore[attr-defined]


async def test_a_trace_file_that_cannot_be_written_is_a_settings_error_naming_it(configure, tmp_path) -> None:
    settings = configure().settings
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(SettingsError, match="TRACES_FILE"):
        span_file.file_exporter(replace(settings, traces_file=str(blocker / "traces.jsonl")))
    written = span_file.file_exporter(replace(settings, traces_file=str(tmp_path / "spans" / "traces.jsonl")))
    assert written.path.exists()


# Issue 29: with PYTHON_ENABLE_OPENTELEMETRY the host stops forwarding the worker's log records, so every record
# an operator needs must leave through the app's own exporter. The in-memory exporter stands in for Application
# Insights and OTLP; the handler, its filter and the loggers are the app's.
ROOT = Path(__file__).resolve().parents[2]
GET_LOGGER = re.compile(r"logging\.getLogger\((__name__|\"[\w.]+\")\)")


def loggers_the_app_writes_to() -> set[str]:
    """Every logger named in function_app.py and shared/, read from the code (`__name__` is the module's name)."""
    names = set()
    for path in [ROOT / "function_app.py", *sorted((ROOT / "shared").rglob("*.py"))]:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for found in GET_LOGGER.findall(path.read_text()):
            names.add(module if found == "__name__" else found.strip('"'))
    return names


@pytest.fixture
def exported() -> Iterator[InMemoryLogRecordExporter]:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = telemetry.export_logs(provider)
    try:
        yield exporter
    finally:
        logging.getLogger().removeHandler(handler)


def bodies(exporter: InMemoryLogRecordExporter) -> list[str]:
    return [str(r.log_record.body) for r in exporter.get_finished_logs()]


def test_a_record_from_every_logger_the_app_writes_to_is_exported_once(exported, caplog) -> None:
    names = loggers_the_app_writes_to()
    assert {"queue_drain", "shared.engine.drainer", "shared.telemetry.export"} <= names, names  # the scan finds them
    caplog.set_level(logging.INFO)  # the worker runs the root logger at INFO
    for name in sorted(names):
        logging.getLogger(name).info("info from %s", name)
    assert sorted(bodies(exported)) == sorted(f"info from {name}" for name in names)


def test_warnings_from_other_loggers_are_exported_and_their_info_is_not(exported, caplog) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("azure.core.pipeline.policies.http_logging_policy").info("Request URL: ...")
    logging.getLogger("azure.servicebus").warning("connection lost, retrying")
    logging.getLogger().error("a record on the root logger")
    logging.getLogger("shared_lookalike").info("not the app's logger")
    assert bodies(exported) == ["connection lost, retrying", "a record on the root logger"]


def test_the_malformed_event_error_of_the_drain_function_is_exported(exported, caplog) -> None:
    """The record function_app.py writes when a trigger event cannot be decoded."""
    source = (ROOT / "function_app.py").read_text()
    assert 'log = logging.getLogger("queue_drain")' in source
    assert "log.error(" in source
    caplog.set_level(logging.INFO)
    logging.getLogger("queue_drain").error("malformed trigger event %s (delivery %s): %s", "m-1", 1, "not JSON")
    assert bodies(exported) == ["malformed trigger event m-1 (delivery 1): not JSON"]


def test_application_insights_gets_its_logs_from_the_app_not_from_the_distro() -> None:
    """The distro's own handler would sit on one logger (it was `shared`, losing `queue_drain`); the app's root
    handler replaces it, so the distro must not add a second one (that would export `shared` twice)."""
    options = telemetry.azure_monitor_options({"APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=x"})
    assert options.get("disable_logging") is True
    assert "logger_name" not in options


async def test_a_drain_that_parks_items_sets_the_poison_depth_gauge_the_poison_alert_watches(configure, reader) -> None:
    # infra/modules/alerts.bicep's poison alert is a metric alert on this gauge (kind=poison) above 0.
    services = configure(HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="10")
    queue = services.settings.partition_queues()[0]
    await submit_ids(services, [f"p-{i}" for i in range(10)])  # p-7 fails on its only attempt: parked
    report = await route(services, TriggerEvent(services.settings.account_name, queue, Reason.SUBMITTED))
    assert report.items_failed == 1
    depth = [
        p.value
        for p in points(reader).get("queue_drain.queue.depth", [])
        if p.attributes == {"queue": queue, "kind": "poison"}
    ]
    assert depth == [1]
