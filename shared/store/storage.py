"""Azure Storage access (aio clients) and the translation of SDK errors into the project's own."""

from __future__ import annotations

import itertools
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import ContentSettings
from azure.storage.blob.aio import BlobServiceClient, ContainerClient
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from shared.core import fastjson
from shared.core.errors import (
    PopReceiptMismatch,
    PreconditionFailed,
    ResourceConflict,
    ResourceMissing,
    StorageError,
    StorageUnavailable,
)
from shared.core.proxies import env_proxies
from shared.core.redact import redact
from shared.core.settings import Settings, StorageConnection
from shared.telemetry.metering import TransactionCounter

log = logging.getLogger(__name__)

# Work and poison messages never expire on their own (the service's default is 7 days): a parked chunk or a
# backlog older than a week must not vanish, leaving its batch "processing" for ever.
NEVER_EXPIRES = -1
JSON_CONTENT = ContentSettings(content_type="application/json")
GZIP_CONTENT = ContentSettings(content_type="application/json", content_encoding="gzip")
# The storage SDK's own retry waits 15 s, 18 s, 24 s; a drainer would rather hand over (a delayed `continue`)
# than sit out an outage, so: three retries after about 2.5, 4.5 and 8.5 s (the SDK adds increment_base**n,
# n from 1, to initial_backoff): an outage of more than about 16 s reaches the drainer.
CLIENT_OPTIONS: dict[str, Any] = {
    "retry_total": 3,
    "initial_backoff": 0.5,
    "increment_base": 2,
    "random_jitter_range": 0.5,
    "connection_timeout": 10,
    # No environment lookups on each request (`shared.core.proxies`): `configured` resolves the proxy once.
    "use_env_settings": False,
}

Client = TypeVar("Client", QueueServiceClient, BlobServiceClient, QueueClient)

_REQUEST_PREFIX = secrets.token_hex(8)
_requests = itertools.count()


def request_id() -> str:
    """A client request id (`x-ms-client-request-id`) for a call made once per message: unique within the process
    by its counter and across processes by its random prefix. Without one the SDK makes `str(uuid.uuid1())` for
    every request (StorageHeadersPolicy), about 27 us of CPU each on this machine against well under 1 us here."""
    return f"{_REQUEST_PREFIX}-{next(_requests):x}"


def configured(make: Callable[..., Client]) -> Client:
    """A storage client built with CLIENT_OPTIONS, and with the environment's proxy for its endpoint if it sets one."""
    client = make(**CLIENT_OPTIONS)
    proxies = env_proxies(client.url)
    return make(**CLIENT_OPTIONS, proxies=proxies) if proxies else client


@asynccontextmanager
async def translated(operation: str) -> AsyncIterator[None]:
    """Translate Azure SDK exceptions raised inside into the project's error tree."""
    try:
        yield
    except ResourceNotFoundError as e:
        raise ResourceMissing(operation, _message(e), status=404, code=_code(e)) from e
    except ResourceModifiedError as e:
        raise PreconditionFailed(operation, _message(e), status=412, code=_code(e)) from e
    except ResourceExistsError as e:
        raise ResourceConflict(operation, _message(e), status=409, code=_code(e)) from e
    except ClientAuthenticationError as e:
        raise StorageError(operation, _message(e), status=e.status_code, code=_code(e)) from e
    except HttpResponseError as e:
        if e.status_code == 412:
            raise PreconditionFailed(operation, _message(e), status=412, code=_code(e)) from e
        if e.status_code == 409:
            raise ResourceConflict(operation, _message(e), status=409, code=_code(e)) from e
        if e.status_code == 400 and _code_value(e) == "PopReceiptMismatch":
            raise PopReceiptMismatch(operation, _message(e), status=400, code=_code(e)) from e
        if e.status_code in {500, 502, 503, 504}:
            raise StorageUnavailable(operation, _message(e), status=e.status_code, code=_code(e)) from e
        raise StorageError(operation, _message(e), status=e.status_code, code=_code(e)) from e
    except (ServiceRequestError, ServiceResponseError, OSError) as e:
        raise StorageUnavailable(operation, _message(e)) from e
    except AzureError as e:
        raise StorageError(operation, _message(e)) from e


def _code(e: Exception) -> str | None:
    code = getattr(e, "error_code", None)
    return str(code) if code is not None else None


def _code_value(e: Exception) -> str | None:
    """The service's error code as it answered it (the SDK wraps known codes in an enum)."""
    code = getattr(e, "error_code", None)
    return None if code is None else str(getattr(code, "value", code))


def _message(e: Exception) -> str:
    # The first line only: SDK messages carry request ids and headers, never needed by callers.
    return redact((str(e).strip().splitlines() or [type(e).__name__])[0][:300])


def credential_for(conn: StorageConnection) -> Any:
    # Only with a managed identity: azure.identity takes about 30 ms to load, which a connection string never needs.
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential(managed_identity_client_id=conn.client_id)


@dataclass
class Storage:
    """The app's storage clients (one set per event loop) with created-once queues and containers."""

    settings: Settings
    counter: TransactionCounter
    queues: QueueServiceClient = field(init=False)
    blobs: BlobServiceClient = field(init=False)
    _ready: set[str] = field(default_factory=set, init=False)
    _credential: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        conn = self.settings.storage
        queue_hook, blob_hook = self.counter.hook("queue"), self.counter.hook("blob")
        if conn.connection_string is not None:
            connection = conn.connection_string
            self.queues = configured(
                partial(QueueServiceClient.from_connection_string, connection, raw_request_hook=queue_hook)
            )
            self.blobs = configured(
                partial(BlobServiceClient.from_connection_string, connection, raw_request_hook=blob_hook)
            )
        else:
            assert conn.queue_url is not None
            assert conn.blob_url is not None
            self._credential = credential = credential_for(conn)
            self.queues = configured(
                partial(QueueServiceClient, conn.queue_url, credential=credential, raw_request_hook=queue_hook)
            )
            self.blobs = configured(
                partial(BlobServiceClient, conn.blob_url, credential=credential, raw_request_hook=blob_hook)
            )

    def queue(self, name: str) -> QueueClient:
        return self.queues.get_queue_client(name)

    def container(self, name: str) -> ContainerClient:
        return self.blobs.get_container_client(name)

    async def ensure_queue(self, name: str) -> QueueClient:
        """The queue, created on first use in this process (one transaction per process and queue)."""
        client = self.queue(name)
        await self._create_once(f"create queue {name}", client.create_queue)
        return client

    async def ensure_container(self, name: str) -> ContainerClient:
        client = self.container(name)
        await self._create_once(f"create container {name}", client.create_container)
        return client

    async def _create_once(self, what: str, create: Callable[[], Awaitable[object]]) -> None:
        if what in self._ready:
            return
        try:
            async with translated(what):
                await create()
        except ResourceConflict:
            pass  # it exists: what we wanted
        self._ready.add(what)

    async def close(self) -> None:
        await self.queues.close()
        await self.blobs.close()
        if self._credential is not None:
            await self._credential.close()


async def read_json(container: ContainerClient, name: str) -> tuple[Any, str]:
    """A JSON blob and its ETag; `ResourceMissing` if absent."""
    async with translated(f"read blob {name}"):
        downloader = await container.download_blob(name)
        data = await downloader.readall()
        etag = downloader.properties.etag
    return json.loads(data), str(etag)


async def write_json(
    container: ContainerClient,
    name: str,
    value: Any,
    *,
    etag: str | None = None,
    create_only: bool = False,
    metadata: dict[str, str] | None = None,
    plain: bool = False,
) -> str:
    """Write a JSON blob; with `etag`, only over that version; with `create_only`, only if absent. `plain`: the
    value holds no float (`fastjson.dumps_plain` writes it, about ten times faster)."""
    conditions: dict[str, Any] = {}
    if create_only:
        conditions["if_none_match"] = "*"
    elif etag is not None:
        conditions = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
    async with translated(f"write blob {name}"):
        result = await container.get_blob_client(name).upload_blob(
            fastjson.dumps_plain(value) if plain else json.dumps(value, separators=(",", ":")).encode("utf-8"),
            overwrite=not create_only,
            content_settings=JSON_CONTENT,
            metadata=metadata,
            **conditions,
        )
    return str(result["etag"])


async def write_bytes(container: ContainerClient, name: str, data: bytes, *, gzip_json: bool = False) -> None:
    async with translated(f"write blob {name}"):
        await container.get_blob_client(name).upload_blob(
            data, overwrite=True, content_settings=GZIP_CONTENT if gzip_json else JSON_CONTENT
        )


async def read_bytes(container: ContainerClient, name: str) -> bytes:
    async with translated(f"read blob {name}"):
        # Raw bytes: a gzip claim check must not be inflated on the way by content-encoding handling.
        downloader = await container.download_blob(name, decompress=False)
        return bytes(await downloader.readall())
