"""Another tenant's batch is answered as an unknown id, at the same storage cost (real Azurite): the tenant check
comes right after the manifest read, before anything else is read."""

from __future__ import annotations

import pytest

from shared.access import replay_scope
from shared.core.errors import RequestError
from shared.core.identity import Caller
from shared.core.lanes import Lane
from shared.intake.submit import submit
from shared.ops import lifecycle, reports
from shared.telemetry import metering
from tests.app.conftest import RecordingPublisher

UNKNOWN = "e" * 32


@pytest.mark.parametrize(
    "read",
    [
        lambda services, batch_id, who: reports.read_batch_status(services, batch_id, who),
        lambda services, batch_id, who: lifecycle.read(services, batch_id, who),
        lambda services, batch_id, who: lifecycle.cancel(services, batch_id, who),
        lambda services, batch_id, who: replay_scope(services, who, {"batch_id": batch_id}),
    ],
    ids=["status", "results", "cancel", "replay"],
)
async def test_another_tenants_batch_costs_what_an_unknown_id_costs_and_says_the_same(configure, read) -> None:
    services = configure(publisher=RecordingPublisher())
    await services.storage.ensure_container(services.settings.batches_container)
    done = await submit(services, b'{"a":1}\n', content_type="application/x-ndjson", content_encoding=None,
                        idempotency_key=None, lane=Lane("", "alpha"))  # fmt: skip
    alpha_batch, beta = done.manifest.batch_id, Caller("beta")

    async def refused(batch_id: str) -> tuple[dict[str, int], dict[str, object]]:
        with metering.tally() as counted:
            with pytest.raises(RequestError) as caught:
                await read(services, batch_id, beta)
        assert caught.value.status == 404
        return dict(counted), caught.value.body()

    other_cost, other_body = await refused(alpha_batch)
    unknown_cost, unknown_body = await refused(UNKNOWN)
    assert other_cost == unknown_cost == {"blob.GetBlob": 1}
    assert str(other_body).replace(alpha_batch, "X") == str(unknown_body).replace(UNKNOWN, "X")
    assert (await reports.read_batch_status(services, alpha_batch, Caller("alpha")))["batch_id"] == alpha_batch
