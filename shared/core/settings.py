"""One typed settings object, built once from the environment (app settings / local.settings.json).

Nothing else in the app reads `os.environ`. A bad value fails at start with the variable's name.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any
from urllib.parse import urlparse

from shared.core import origins
from shared.core.errors import SettingsError
from shared.core.identity import ROLES_CLAIM, TenantFrom
from shared.core.lanes import LANE_SUFFIX_MAX

QUEUE_NAME_MAX = 63
QUEUE_NAME = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
CONTAINER_NAME = QUEUE_NAME
SERVICEBUS_ENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,259}$")
HANDLER_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

# A queue message holds 64 KiB; the design keeps inline chunks under the base64-inflated size.
QUEUE_MESSAGE_MAX_BYTES = 64 * 1024
INLINE_MAX_BYTES = QUEUE_MESSAGE_MAX_BYTES * 3 // 4
STAGING_MARGIN_S = 30.0  # a submit's commit write after its deadline check, and clocks that disagree
# Resolved by the Functions host from app settings (%NAME% in bindings), so they cannot default here.
BINDING_SETTINGS = ("TRIGGER_QUEUE", "FALLBACK_SCHEDULE")


class Decrease(str, Enum):
    """What the fallback's interval does when it finds work."""

    RESET = "reset"
    HALVE = "halve"


@dataclass(frozen=True)
class StorageConnection:
    """Either a connection string or identity-based service URIs (`<name>__queueServiceUri` ...)."""

    setting: str
    connection_string: str | None = None
    queue_url: str | None = None
    blob_url: str | None = None
    client_id: str | None = None

    @property
    def uses_identity(self) -> bool:
        return self.connection_string is None


@dataclass(frozen=True)
class ServiceBusConnection:
    """Either a connection string or `<name>__fullyQualifiedNamespace` with a managed identity."""

    setting: str
    connection_string: str | None = None
    namespace: str | None = None
    client_id: str | None = None


def env(name: str, *, minimum: float | None = None, maximum: float | None = None) -> dict[str, Any]:
    return {"env": name, "min": minimum, "max": maximum}


@dataclass(frozen=True)
class Settings:
    storage: StorageConnection
    servicebus: ServiceBusConnection
    trigger_queue: str = field(default="queue-drain-trigger", metadata=env("TRIGGER_QUEUE"))
    fallback_schedule: str = field(default="0 0 */6 * * *", metadata=env("FALLBACK_SCHEDULE"))
    work_queue: str = field(default="work-items", metadata=env("WORK_QUEUE"))
    partitions: int = field(default=1, metadata=env("WORK_QUEUE_PARTITIONS", minimum=1, maximum=64))
    batches_container: str = field(default="queue-drain-batches", metadata=env("BATCHES_CONTAINER"))
    results_container: str = field(default="queue-drain-results", metadata=env("RESULTS_CONTAINER"))
    state_container: str = field(default="queue-drain-state", metadata=env("STATE_CONTAINER"))
    # intake limits
    max_body_bytes: int = field(default=64 * 2**20, metadata=env("MAX_BODY_BYTES", minimum=1024))
    max_items: int = field(default=250_000, metadata=env("MAX_ITEMS", minimum=1))
    max_item_bytes: int = field(default=256 * 1024, metadata=env("MAX_ITEM_BYTES", minimum=64))
    max_json_depth: int = field(default=32, metadata=env("MAX_JSON_DEPTH", minimum=2, maximum=512))
    max_gzip_ratio: int = field(default=200, metadata=env("MAX_GZIP_RATIO", minimum=2))
    # chunking
    chunk_max_items: int = field(default=250, metadata=env("CHUNK_MAX_ITEMS", minimum=1, maximum=100_000))
    chunk_max_bytes: int = field(default=4 * 2**20, metadata=env("CHUNK_MAX_BYTES", minimum=1024))
    # draining
    receive_batch: int = field(default=32, metadata=env("RECEIVE_BATCH", minimum=1, maximum=32))
    receivers: int = field(default=4, metadata=env("RECEIVERS", minimum=1, maximum=64))
    chunk_concurrency: int = field(default=16, metadata=env("CHUNK_CONCURRENCY", minimum=1, maximum=1024))
    visibility_timeout_s: int = field(default=30, metadata=env("VISIBILITY_TIMEOUT_S", minimum=1, maximum=7 * 86400))
    drain_budget_s: float = field(default=240.0, metadata=env("DRAIN_BUDGET_S", minimum=1))
    lease_s: int = field(default=30, metadata=env("LEASE_S", minimum=15, maximum=60))
    max_drainers_per_queue: int = field(
        default=100, metadata=env("MAX_DRAINERS_PER_QUEUE", minimum=1, maximum=1000)
    )  # Flex Consumption's default maximumInstanceCount: one drainer per instance (host.json maxConcurrentCalls 1)
    scale_out_depth: int = field(default=50, metadata=env("SCALE_OUT_DEPTH", minimum=1))
    max_dequeue_count: int = field(default=5, metadata=env("MAX_DEQUEUE_COUNT", minimum=1, maximum=100))
    retry_base_delay_ms: int = field(default=1_000, metadata=env("RETRY_BASE_DELAY_MS", minimum=0))
    retry_max_delay_ms: int = field(default=300_000, metadata=env("RETRY_MAX_DELAY_MS", minimum=0))
    retry_jitter: bool = field(default=True, metadata=env("RETRY_JITTER"))
    # A submit answers within SUBMIT_DEADLINE_S (else a JSON 503: nothing it stored counts); a staging attempt
    # older than STAGING_TTL_S is dead, and a drainer discards its chunks.
    submit_deadline_s: float = field(default=30.0, metadata=env("SUBMIT_DEADLINE_S", minimum=1))
    # Bodies that may decode past 256 KiB are parsed on a thread, this many at once per process (excess: 503).
    max_large_submits: int = field(default=2, metadata=env("MAX_LARGE_SUBMITS", minimum=1, maximum=64))
    staging_ttl_s: int = field(default=120, metadata=env("STAGING_TTL_S", minimum=1))
    # The drain allocates about a thousand objects per message: Python's 700 would collect after each.
    gc_gen0_threshold: int = field(default=20_000, metadata=env("GC_GEN0_THRESHOLD", minimum=0))
    # Spans as JSON lines for `python -m shared.cli trace` when neither Application Insights nor OTLP is set
    # (`make run` sets it); about this many bytes are kept, plus the previous file (shared.telemetry.export).
    traces_file: str = field(default="", metadata=env("TRACES_FILE"))
    traces_file_max_bytes: int = field(default=50 * 2**20, metadata=env("TRACES_FILE_MAX_BYTES", minimum=4096))
    # Handler limits for the whole app, every drainer on every instance together (0: none; shared.engine.limits).
    handler_items_per_s: float = field(default=0.0, metadata=env("HANDLER_ITEMS_PER_S", minimum=0))
    handler_max_in_flight: int = field(default=0, metadata=env("HANDLER_MAX_IN_FLIGHT", minimum=0))
    # Tenants with lanes at most (a submit naming another: a JSON 409). Each tenant has up to two lanes per
    # partition; at most 2,400 keeps a partition's listing one page (5,000 queues), one transaction.
    max_tenants: int = field(default=500, metadata=env("MAX_TENANTS", minimum=1, maximum=2_400))
    # Who the tenant is (shared.core.identity): the caller's principal (Easy Auth) or the request's X-Tenant. Unset:
    # `principal` where App Service Authentication is on (WEBSITE_AUTH_ENABLED), `header` elsewhere.
    tenant_from: TenantFrom = field(default=TenantFrom.HEADER, metadata=env("TENANT_FROM"))
    tenant_claim: str = field(default=ROLES_CLAIM, metadata=env("TENANT_CLAIM"))
    # Quotas per tenant (shared.store.quotas; 0: none): items accepted and not yet final, submits a minute.
    tenant_max_pending_items: int = field(default=0, metadata=env("TENANT_MAX_PENDING_ITEMS", minimum=0))
    tenant_max_submits_per_min: int = field(default=0, metadata=env("TENANT_MAX_SUBMITS_PER_MIN", minimum=0))
    # fallback poller
    backoff_floor_ms: int = field(default=60_000, metadata=env("BACKOFF_FLOOR_MS", minimum=100))
    backoff_ceiling_ms: int = field(default=1_800_000, metadata=env("BACKOFF_CEILING_MS", minimum=100))
    backoff_exponent: float = field(default=2.0, metadata=env("BACKOFF_EXPONENT", minimum=1.0, maximum=10.0))
    backoff_jitter: float = field(default=0.1, metadata=env("BACKOFF_JITTER", minimum=0.0, maximum=0.5))
    backoff_decrease: Decrease = field(default=Decrease.RESET, metadata=env("BACKOFF_DECREASE"))
    # Service Bus publishing
    publish_timeout_s: float = field(default=5.0, metadata=env("PUBLISH_TIMEOUT_S", minimum=0.1))
    # the chunk handler and the default billing handler's revenue shares
    handler: str = field(default="shared.handlers.billing:handle", metadata=env("HANDLER"))
    billing_author_share: Decimal = field(default=Decimal("0.70"), metadata=env("BILLING_AUTHOR_SHARE"))
    billing_distributor_share: Decimal = field(default=Decimal("0.20"), metadata=env("BILLING_DISTRIBUTOR_SHARE"))
    # Completion notices (shared.ops.notices): the hosts a submit's callback_url may name (comma-separated; empty:
    # none, and a submit naming one is a 400), the Standard Webhooks secret that signs them (whsec_<base64>), plain
    # http to a loopback address (tests only), and how long one attempt and all of them may take.
    callback_allowed_hosts: str = field(default="", metadata=env("CALLBACK_ALLOWED_HOSTS"))
    callback_secret: str = field(default="", metadata=env("CALLBACK_SECRET"))
    # The master secret being rotated out: while set, each notice carries a signature under each (webhooks.keys).
    callback_secret_previous: str = field(default="", metadata=env("CALLBACK_SECRET_PREVIOUS"))
    callback_allow_http_loopback: bool = field(default=False, metadata=env("CALLBACK_ALLOW_HTTP_LOOPBACK"))
    callback_timeout_s: float = field(default=10.0, metadata=env("CALLBACK_TIMEOUT_S", minimum=1, maximum=30))
    callback_retry_base_s: float = field(default=30.0, metadata=env("CALLBACK_RETRY_BASE_S", minimum=1, maximum=3600))
    callback_retry_max_s: float = field(default=3600.0, metadata=env("CALLBACK_RETRY_MAX_S", minimum=1, maximum=21600))
    callback_window_s: int = field(default=86_400, metadata=env("CALLBACK_WINDOW_S", minimum=60, maximum=3 * 86_400))

    def __post_init__(self) -> None:
        if self.staging_ttl_s < self.submit_deadline_s + STAGING_MARGIN_S:
            raise SettingsError(
                "STAGING_TTL_S",
                f"{self.staging_ttl_s} s must be at least SUBMIT_DEADLINE_S ({self.submit_deadline_s:g} s) + "
                f"{STAGING_MARGIN_S:g} s: a submit still staging within its deadline must not be judged dead",
            )
        check_name("TRIGGER_QUEUE", self.trigger_queue, SERVICEBUS_ENTITY)
        check_name("WORK_QUEUE", self.work_queue, QUEUE_NAME)
        longest = max(self.partition_queues(), key=len)
        check_name("WORK_QUEUE", longest + "-poison", QUEUE_NAME)
        if len(longest) + LANE_SUFFIX_MAX > QUEUE_NAME_MAX:
            raise SettingsError(
                "WORK_QUEUE",
                f"{longest!r} leaves no room for a tenant's lane (`<queue>-hx-<hash>`, 27 characters): "
                f"at most {QUEUE_NAME_MAX - LANE_SUFFIX_MAX} characters with its partition number",
            )
        for variable in ("BATCHES_CONTAINER", "RESULTS_CONTAINER", "STATE_CONTAINER"):
            check_name(variable, getattr(self, variable.lower()), CONTAINER_NAME)
        check_name("HANDLER", self.handler, HANDLER_REF)
        if len(self.fallback_schedule.split()) != 6:
            raise SettingsError("FALLBACK_SCHEDULE", "must be a 6-field NCRONTAB expression (second first)")
        if self.backoff_ceiling_ms < self.backoff_floor_ms:
            raise SettingsError("BACKOFF_CEILING_MS", "must be >= BACKOFF_FLOOR_MS")
        if self.retry_max_delay_ms < self.retry_base_delay_ms:
            raise SettingsError("RETRY_MAX_DELAY_MS", "must be >= RETRY_BASE_DELAY_MS")
        self.check_callbacks()
        shares = (self.billing_author_share, self.billing_distributor_share)
        if any(s < 0 for s in shares) or sum(shares) > 1:
            raise SettingsError("BILLING_DISTRIBUTOR_SHARE", "shares must be >= 0 and sum to at most 1")

    def check_callbacks(self) -> None:
        if self.callback_retry_max_s < self.callback_retry_base_s:
            raise SettingsError("CALLBACK_RETRY_MAX_S", "must be >= CALLBACK_RETRY_BASE_S")
        for name, secret in (("CALLBACK_SECRET", self.callback_secret), ("CALLBACK_SECRET_PREVIOUS",
                             self.callback_secret_previous)):  # fmt: skip
            if secret and not valid_webhook_secret(secret):
                raise SettingsError(name, "must be whsec_ followed by base64 of at least 24 bytes")
        try:
            allowed = self.callback_origins()
        except ValueError as e:
            raise SettingsError("CALLBACK_ALLOWED_HOSTS", str(e)) from None
        if allowed and not self.callback_secret:
            raise SettingsError("CALLBACK_SECRET", "must be set when CALLBACK_ALLOWED_HOSTS names a host")

    def callback_origins(self) -> frozenset[origins.Origin]:
        """The origins (scheme, host, port) a callback_url may name (`shared.core.origins`)."""
        return origins.allowed_origins(
            self.callback_allowed_hosts, allow_http_loopback=self.callback_allow_http_loopback
        )

    def partition_queues(self) -> list[str]:
        """The storage queues chunks are spread over: the work queue itself, or `<queue>-0..N-1`."""
        if self.partitions == 1:
            return [self.work_queue]
        return [f"{self.work_queue}-{i}" for i in range(self.partitions)]

    @staticmethod
    def poison_queue(queue: str) -> str:
        return f"{queue}-poison"

    @property
    def account_name(self) -> str:
        return storage_account_name(self.storage)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Settings:
        """Build settings from app settings; `overrides` (field names) win, for tests and tools."""
        for name in BINDING_SETTINGS:
            if not environ.get(name, "").strip():
                raise SettingsError(name, "must be set: a trigger binding reads it as %" + name + "%")
        values: dict[str, Any] = {
            "storage": storage_connection(environ, environ.get("STORAGE_CONNECTION", "AzureWebJobsStorage")),
            "servicebus": servicebus_connection(environ, "ServiceBusConnection"),
        }
        for f in dataclasses.fields(cls):
            variable = f.metadata.get("env")
            if variable is not None and environ.get(variable, "").strip() != "":
                values[f.name] = parse_value(variable, environ[variable].strip(), f.type, f.metadata)
        if (
            not environ.get("TENANT_FROM", "").strip()
            and environ.get("WEBSITE_AUTH_ENABLED", "").strip().lower() == "true"
        ):
            values["tenant_from"] = TenantFrom.PRINCIPAL  # the platform validates callers: trust only what it says
        values.update(overrides)
        return cls(**values)


# The parts of an identity-based connection the app reads (`<setting>__<part>`), as storage_connection and
# servicebus_connection below read them.
STORAGE_IDENTITY_PARTS = ("accountName", "queueServiceUri", "blobServiceUri", "clientId")
SERVICEBUS_IDENTITY_PARTS = ("fullyQualifiedNamespace", "clientId")


def setting_names(storage_setting: str = "AzureWebJobsStorage") -> frozenset[str]:
    """Every app setting the app itself reads. A deployment template may set no other name, except the ones
    the Functions host reads (tests/infra checks that)."""
    fields = {str(f.metadata["env"]) for f in dataclasses.fields(Settings) if f.metadata.get("env")}
    storage = {storage_setting, *(f"{storage_setting}__{p}" for p in STORAGE_IDENTITY_PARTS)}
    servicebus = {"ServiceBusConnection", *(f"ServiceBusConnection__{p}" for p in SERVICEBUS_IDENTITY_PARTS)}
    return frozenset({*fields, *storage, *servicebus, "STORAGE_CONNECTION"})


def valid_webhook_secret(secret: str) -> bool:
    """`whsec_` and base64 of at least 24 bytes (Standard Webhooks' format; its libraries take it as is)."""
    if not secret.startswith("whsec_"):
        return False
    try:
        return len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) >= 24
    except ValueError:
        return False


def check_name(variable: str, value: str, pattern: re.Pattern[str]) -> None:
    if not pattern.fullmatch(value):
        raise SettingsError(variable, f"{value!r} is not a valid name (pattern {pattern.pattern})")


def parse_value(variable: str, raw: str, kind: Any, meta: Mapping[str, Any]) -> Any:
    parser = PARSERS.get(str(kind))
    if parser is None:
        raise SettingsError(variable, f"no parser for type {kind}")
    try:
        value = parser(raw)
    except (ValueError, InvalidOperation) as e:
        raise SettingsError(variable, f"{raw!r} is not a valid {kind}") from e
    low, high = meta.get("min"), meta.get("max")
    if low is not None and value < low:
        raise SettingsError(variable, f"{raw} is below the minimum {low}")
    if high is not None and value > high:
        raise SettingsError(variable, f"{raw} is above the maximum {high}")
    return value


def parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(raw)


PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": parse_bool,
    "Decimal": Decimal,
    "Decrease": Decrease,
    "TenantFrom": TenantFrom,
}


def parse_connection_string(raw: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for piece in raw.split(";"):
        if piece.strip():
            key, sep, value = piece.partition("=")
            if not sep:
                raise ValueError("a segment has no '='")  # never echo it: it may be part of a key
            parts[key.strip().lower()] = value.strip()
    return parts


def storage_connection(environ: Mapping[str, str], setting: str) -> StorageConnection:
    raw = environ.get(setting, "").strip()
    if raw:
        try:
            parts = parse_connection_string(raw)
        except ValueError as e:
            raise SettingsError(setting, f"not a connection string ({e})") from None
        if parts.get("usedevelopmentstorage") != "true" and "accountname" not in parts:
            raise SettingsError(setting, "connection string has no AccountName (or UseDevelopmentStorage=true)")
        return StorageConnection(setting, connection_string=raw)
    account = environ.get(f"{setting}__accountName", "").strip()
    queue_url = environ.get(f"{setting}__queueServiceUri", "").strip() or (
        f"https://{account}.queue.core.windows.net" if account else ""
    )
    blob_url = environ.get(f"{setting}__blobServiceUri", "").strip() or (
        f"https://{account}.blob.core.windows.net" if account else ""
    )
    if not (queue_url and blob_url):
        raise SettingsError(
            setting,
            f"set a connection string, or {setting}__accountName, or both "
            f"{setting}__queueServiceUri and {setting}__blobServiceUri",
        )
    for name, url in ((f"{setting}__queueServiceUri", queue_url), (f"{setting}__blobServiceUri", blob_url)):
        if urlparse(url).scheme not in {"http", "https"}:
            raise SettingsError(name, f"{url!r} is not an http(s) URL")
    client_id = environ.get(f"{setting}__clientId", "").strip() or None
    return StorageConnection(setting, queue_url=queue_url, blob_url=blob_url, client_id=client_id)


def servicebus_connection(environ: Mapping[str, str], setting: str) -> ServiceBusConnection:
    raw = environ.get(setting, "").strip()
    if raw:
        try:
            parts = parse_connection_string(raw)
        except ValueError as e:
            raise SettingsError(setting, f"not a connection string ({e})") from None
        if "endpoint" not in parts:
            raise SettingsError(setting, "connection string has no Endpoint")
        return ServiceBusConnection(setting, connection_string=raw)
    namespace = environ.get(f"{setting}__fullyQualifiedNamespace", "").strip()
    if not namespace:
        raise SettingsError(setting, f"set a connection string or {setting}__fullyQualifiedNamespace")
    client_id = environ.get(f"{setting}__clientId", "").strip() or None
    return ServiceBusConnection(setting, namespace=namespace, client_id=client_id)


def storage_account_name(conn: StorageConnection) -> str:
    if conn.connection_string is not None:
        parts = parse_connection_string(conn.connection_string)
        return parts.get("accountname", "devstoreaccount1")
    assert conn.queue_url is not None
    parsed = urlparse(conn.queue_url)
    host = parsed.hostname or ""
    # https://<account>.queue.core.windows.net, or http://127.0.0.1:10001/<account> (emulator style)
    if host.count(".") >= 3:
        return host.split(".", 1)[0]
    return parsed.path.strip("/").split("/", 1)[0] or host
