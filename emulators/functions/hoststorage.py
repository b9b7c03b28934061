"""The host's own blobs in AzureWebJobsStorage (container `azure-webjobs-hosts`): listener leases, timer status."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient, ContainerClient

from emulators.functions.errors import ConfigError

log = logging.getLogger(__name__)

STORAGE_SETTING = "AzureWebJobsStorage"
HOSTS_CONTAINER = "azure-webjobs-hosts"
MIN_LEASE_S, MAX_LEASE_S = 15, 60
MISSING_STORAGE = (
    "Missing value for AzureWebJobsStorage in local.settings.json. This is required for all triggers other "
    "than httpTrigger. Set it to UseDevelopmentStorage=true (Azurite) or a connection string."
)


def listener_lock_blob(host_id: str, function_name: str) -> str:
    return f"locks/{host_id}/Host.Functions.{function_name}.Listener"


def timer_status_blob(host_id: str, function_name: str) -> str:
    return f"timers/{host_id}/Host.Functions.{function_name}/status"


def blob_service(settings: Mapping[str, str]) -> BlobServiceClient:
    """A client for AzureWebJobsStorage: a connection string, or identity-based (`__blobServiceUri`)."""
    connection = settings.get(STORAGE_SETTING)
    if connection:
        return BlobServiceClient.from_connection_string(connection)
    uri = settings.get(f"{STORAGE_SETTING}__blobServiceUri")
    account = settings.get(f"{STORAGE_SETTING}__accountName")
    if not uri and account:
        uri = f"https://{account}.blob.core.windows.net"
    if not uri:
        raise ConfigError(MISSING_STORAGE)
    from azure.identity.aio import DefaultAzureCredential

    return BlobServiceClient(uri, credential=DefaultAzureCredential())


class HostStorage:
    """Leases and small JSON blobs in the hosts container."""

    def __init__(self, service: BlobServiceClient) -> None:
        self._service = service
        self._container: ContainerClient = service.get_container_client(HOSTS_CONTAINER)

    async def ensure_container(self) -> None:
        with contextlib.suppress(ResourceExistsError):
            await self._container.create_container()

    async def try_acquire_lease(self, blob: str, duration_s: float) -> BlobLeaseClient | None:
        """Take the lease on `blob` (created empty if absent); None while another holder has it."""
        seconds = int(min(max(duration_s, MIN_LEASE_S), MAX_LEASE_S))
        client = self._container.get_blob_client(blob)
        lease = BlobLeaseClient(client)
        for _ in range(2):
            try:
                await lease.acquire(lease_duration=seconds)
                return lease
            except ResourceNotFoundError:
                await self._create_empty(blob)
            except HttpResponseError as e:
                if e.status_code == 409:
                    return None
                raise
        return None

    async def _create_empty(self, blob: str) -> None:
        try:
            await self._container.upload_blob(blob, b"", overwrite=False)
        except (ResourceExistsError, HttpResponseError) as e:
            log.debug("lease blob %s appeared meanwhile: %s", blob, e)

    async def renew(self, lease: BlobLeaseClient) -> bool:
        try:
            await lease.renew()
        except HttpResponseError as e:
            log.warning("Renewing lease %s failed: %s", lease.id, e.message)
            return False
        return True

    async def release(self, lease: BlobLeaseClient) -> None:
        try:
            await lease.release()
        except HttpResponseError as e:
            log.warning("Releasing lease %s failed (it expires on its own): %s", lease.id, e.message)

    async def read_json(self, blob: str) -> dict[str, Any] | None:
        try:
            downloader = await self._container.download_blob(blob)
            data = await downloader.readall()
        except ResourceNotFoundError:
            return None
        try:
            doc = json.loads(data)
        except json.JSONDecodeError:
            log.warning("Ignoring unreadable status blob %s", blob)
            return None
        return doc if isinstance(doc, dict) else None

    async def write_json(self, blob: str, doc: Mapping[str, Any]) -> None:
        await self._container.upload_blob(blob, json.dumps(doc).encode(), overwrite=True)

    async def close(self) -> None:
        await self._service.close()
