"""The real Service Bus publisher with an identity-based connection: each reconnect closes what it opened.

No Azure here: the namespace cannot be reached, so every publish fails (after PUBLISH_TIMEOUT_S at most)
and the publisher resets its link. The credential is the real `DefaultAzureCredential`; only its `close` is
observed (wrapped, then called through).
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.identity.aio import DefaultAzureCredential

from shared.bus.publisher import ServiceBusPublisher
from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import Settings

IDENTITY = {
    "TRIGGER_QUEUE": "t",
    "FALLBACK_SCHEDULE": "0 */5 * * * *",
    "AzureWebJobsStorage__accountName": "prodacct",
    "ServiceBusConnection__fullyQualifiedNamespace": "queue-drain-test.invalid",
    "PUBLISH_TIMEOUT_S": "1",
}


async def test_a_reconnect_closes_the_credential_of_the_failed_client(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[int] = []
    real_close = DefaultAzureCredential.close

    async def observed_close(self: DefaultAzureCredential, *args: Any, **kwargs: Any) -> None:
        closed.append(id(self))
        await real_close(self, *args, **kwargs)

    monkeypatch.setattr(DefaultAzureCredential, "close", observed_close)
    publisher = ServiceBusPublisher(Settings.from_env(IDENTITY))
    event = TriggerEvent("prodacct", "work-items", Reason.SUBMITTED)
    for _ in range(2):
        with pytest.raises(TriggerUnavailable):
            await publisher.publish(event)
    await publisher.close()

    assert len(closed) == 2, "each failed connection's credential is closed when the link is reset"
    assert len(set(closed)) == 2, "a reconnect makes a new credential; the old one is not reused once closed"
