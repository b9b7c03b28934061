"""queue-drain's client: submit a batch, follow it, read its results, cancel it, replay parked chunks (sync
`Client`, async `AsyncClient`, one core under both). Failed requests are retried (429, 5xx, 408, connection
errors: twice by default, honouring `Retry-After`); every error of the API is an exception named for its JSON error
code (`queue_drain_client.errors`); answers are typed (`queue_drain_client.types`).

    from queue_drain_client import Client
    with Client("https://my-app.azurewebsites.net", key="...", token="<bearer token>") as qd:
        batch = qd.submit(sales, tenant="acme")
        print(qd.wait(batch.batch_id, progress=True)["status"])
        for outcome in qd.results(batch.batch_id): ...
"""

from queue_drain_client import errors, notices, types
from queue_drain_client._async import AsyncClient
from queue_drain_client._common import DEFAULT_URL
from queue_drain_client._sync import Client
from queue_drain_client._version import __version__
from queue_drain_client.errors import (
    ApiError,
    ConnectionFailed,
    NotFinal,
    QueueDrainError,
    RetryableError,
    WaitTimeout,
)
from queue_drain_client.types import FINAL, Batch, BatchStatus, ResultsPage

__all__ = [
    "DEFAULT_URL",
    "FINAL",
    "ApiError",
    "AsyncClient",
    "Batch",
    "BatchStatus",
    "Client",
    "ConnectionFailed",
    "NotFinal",
    "QueueDrainError",
    "ResultsPage",
    "RetryableError",
    "WaitTimeout",
    "__version__",
    "errors",
    "notices",
    "types",
]
