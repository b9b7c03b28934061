"""Where spans, metrics and logs go: configured once per process, from the environment.

- `APPLICATIONINSIGHTS_CONNECTION_STRING` set: Application Insights, through the Azure Monitor OpenTelemetry
  distro (with Entra ID auth when `APPLICATIONINSIGHTS_AUTHENTICATION_STRING` says `Authorization=AAD`, as
  infra/ deploys it). host.json's `telemetryMode: OpenTelemetry` makes the host export its own the same way.
- else `OTEL_EXPORTER_OTLP_ENDPOINT` set: OTLP over HTTP (the exporter reads the standard OTEL_* variables).
- else `TRACES_FILE` set (`make run` sets it): spans as JSON lines in that file, kept to about
  `TRACES_FILE_MAX_BYTES` (the previous file is kept beside it as `.1`), for `python -m shared.cli trace`.
  Metrics have no local sink: the counters they read are on `/api/queues`.
- else nothing: the OpenTelemetry API stays a no-op, and costs next to nothing.

Sampling is the SDK's (`OTEL_TRACES_SAMPLER`, default parent-based always-on).

Logs (Application Insights and OTLP): once the worker tells the host it exports OpenTelemetry itself
(`PYTHON_ENABLE_OPENTELEMETRY`, as infra/ sets it), the host stops forwarding the worker's log records, so the
app exports them: one handler on the root logger takes every record of the app's own loggers (`shared.*`,
`queue_drain`) and warnings and worse from any other logger (the Azure SDKs, the worker), each exactly once.

Imports: the OpenTelemetry SDK at the top; each sink's own package (the distro, the OTLP exporters, the logging
handler, azure.identity) where its configuration is chosen, because a process uses one sink and each package costs
about 25 to 120 ms to load at a cold start. None of those imports is a way around a circle.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from shared.core.settings import Settings
from shared.telemetry import metrics, span_file
from shared.telemetry.metering import TransactionCounter
from shared.telemetry.tracing import correlate_log_records

log = logging.getLogger(__name__)

_configured: str | None = None
_lock = threading.Lock()

# The loggers the app writes to: `shared` and its modules' `__name__` loggers, and function_app.py's.
APP_LOGGERS = ("shared", "queue_drain")
# From any other logger (the Azure SDKs log every HTTP request at INFO) only this level and worse is exported.
OTHER_LOGGERS_LEVEL = logging.WARNING


def configure(settings: Settings, counter: TransactionCounter, environ: Mapping[str, str] | None = None) -> str:
    """Set up export once per process; returns where telemetry goes: "azure-monitor", "otlp", "file", "off", or
    "already-configured" when something else in the process set an SDK up first (it is used as it is)."""
    global _configured
    env = os.environ if environ is None else environ
    with _lock:
        if _configured is not None:
            return _configured
        _configured = _configure(env, settings)
        correlate_log_records()
        if _configured != "off":
            metrics.register_observers(counter)
            log.info("telemetry: exporting to %s", _configured)
        return _configured


def _configure(env: Mapping[str, str], settings: Settings) -> str:
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return "already-configured"  # by the Functions Python worker, or by the process that embeds the app
    if env.get("APPLICATIONINSIGHTS_CONNECTION_STRING", "").strip():
        from azure.monitor.opentelemetry import configure_azure_monitor

        options = azure_monitor_options(env)
        configure_azure_monitor(**options)
        _install_logs(azure_monitor_log_exporter(env, options))
        return "azure-monitor"
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        _install(env, OTLPSpanExporter(), OTLPMetricExporter())
        _install_logs(OTLPLogExporter())
        return "otlp"
    if settings.traces_file:
        _install(env, span_file.file_exporter(settings), None)
        return "file"
    return "off"


def azure_monitor_options(env: Mapping[str, str]) -> dict[str, Any]:
    """The distro's options: spans and metrics (logs go through `export_logs`, which picks the loggers), and a
    managed identity when the connection is Entra-only."""
    options: dict[str, Any] = {"disable_logging": True}
    given = env.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "")
    auth = dict(part.split("=", 1) for part in given.split(";") if "=" in part)
    if auth.get("Authorization", "").upper() == "AAD":
        from azure.identity import ManagedIdentityCredential

        client_id = auth.get("ClientId") or None
        options["credential"] = ManagedIdentityCredential(client_id=client_id)
    return options


def azure_monitor_log_exporter(env: Mapping[str, str], options: Mapping[str, Any]) -> LogRecordExporter:
    """Application Insights' log exporter with the same connection and credential as the distro's."""
    from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter

    connection = env["APPLICATIONINSIGHTS_CONNECTION_STRING"].strip()
    return AzureMonitorLogExporter(connection_string=connection, credential=options.get("credential"))


class AppLogFilter(logging.Filter):
    """What the exporter gets: every record of the app's own loggers, and warnings and worse from the others."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= OTHER_LOGGERS_LEVEL or is_app_logger(record.name)


def is_app_logger(name: str) -> bool:
    return any(name == app or name.startswith(app + ".") for app in APP_LOGGERS)


def export_logs(provider: LoggerProvider) -> logging.Handler:
    """Send log records to `provider`'s exporters through one handler on the root logger, so a record that
    propagates is exported once whichever logger wrote it; returns the handler (tests remove it)."""
    from opentelemetry.instrumentation.logging.handler import LoggingHandler  # a dependency of the distro

    handler = LoggingHandler(logger_provider=provider)
    handler.addFilter(AppLogFilter())
    logging.getLogger().addHandler(handler)
    return handler


def _install_logs(exporter: LogRecordExporter) -> None:
    """Logs with the same resource (service name, cloud role) as the spans installed just before."""
    spans = trace.get_tracer_provider()
    provider = LoggerProvider(resource=spans.resource) if isinstance(spans, TracerProvider) else LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    set_logger_provider(provider)
    export_logs(provider)


def _install(env: Mapping[str, str], spans: SpanExporter, metric_exporter: Any) -> None:
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "queue-drain"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    if metric_exporter is not None:
        reader = PeriodicExportingMetricReader(metric_exporter)
        otel_metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
