"""queue-drain's client: submit a batch, follow it, read its results, cancel it (sync `Client`, async
`AsyncClient`). Every error of the API is an exception named for its JSON error code (`queue_drain_client.errors`).

    from queue_drain_client import Client
    with Client("https://my-app.azurewebsites.net", key="...", token="<bearer token>") as qd:
        batch = qd.submit([{"id": 1}, {"id": 2}], tenant="acme")
        print(qd.wait(batch.batch_id, progress=True)["status"])
        for result in qd.results(batch.batch_id): ...
"""

from queue_drain_client import errors, notices
from queue_drain_client._async import AsyncClient
from queue_drain_client._common import DEFAULT_URL, FINAL, Batch
from queue_drain_client._sync import Client
from queue_drain_client.errors import ApiError, ConnectionFailed, QueueDrainError, WaitTimeout

__all__ = [
    "DEFAULT_URL",
    "FINAL",
    "ApiError",
    "AsyncClient",
    "Batch",
    "Client",
    "ConnectionFailed",
    "QueueDrainError",
    "WaitTimeout",
    "errors",
    "notices",
]
