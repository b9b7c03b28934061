"""The deployment's roles cover every storage operation the app performs (issue 14).

The operations are not listed by hand: the app runs its whole life against the real Azurite (submit with a
claim-check chunk, drain with retries and parking, status and list reads, poison inspect and replay, the
fallback), and its own metering policy (`shared.telemetry.metering`, which names each request's billable operation)
records what it did. Each operation must be allowed by a role that infra/modules/roles.bicep assigns on the
storage account, by the permissions table in tests/infra/roles.py.
"""

from __future__ import annotations

import json

import azure.functions as func
from azure.functions.timer import TimerRequest

from shared.core.events import Reason
from shared.intake.submit import submit
from shared.router import route
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.infra import roles
from tests.infra.test_templates import assigned_roles

ITEMS = [{"id": f"d-{i}", "amount": "2.50", "currency": "EUR", "author": "a", "distributor": "d"} for i in range(30)]
BIG = [{**ITEMS[0], "id": f"big-{i}", "note": "x" * 2000} for i in range(60)]


def probe_read(probe_id: str) -> func.HttpRequest:
    url = f"http://localhost:7071/api/probes?id={probe_id}"
    return func.HttpRequest("GET", url, headers={}, params={"id": probe_id}, route_params={}, body=b"")


async def test_the_assigned_roles_allow_every_storage_operation_the_app_performs(configure, app_functions):
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:fail_sevens",
        MAX_DEQUEUE_COUNT="2",
        CHUNK_MAX_ITEMS="60",
        RETRY_BASE_DELAY_MS="0",
        RETRY_MAX_DELAY_MS="0",
    )
    before = services.counter.totals()
    small = "\n".join(json.dumps(i) for i in ITEMS).encode()
    big = "\n".join(json.dumps(i) for i in BIG).encode()  # about 120 KB in one chunk: a claim-check blob
    for body in (small, big):
        await submit(services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None)
    await drain_all(services)
    for name, request in [
        ("batch_list", http_request("GET", "/api/batches")),
        ("queue_status", http_request("GET", "/api/queues")),
        ("poison_list", http_request("GET", "/api/poison")),
    ]:
        assert (await app_functions[name](request)).status_code == 200, name
    services.handler = handlers.record
    replay = http_request("POST", "/api/poison/replay", body=b'{"all": true}')
    assert (await app_functions["poison_replay"](replay)).status_code == 200
    await drain_all(services)
    await app_functions["fallback_poll"](TimerRequest(past_due=False))
    # The deployment's probe (the smoke test's path): sent, received by the drain function, read back.
    assert (await app_functions["probe"](http_request("POST", "/api/probes"))).status_code == 202
    probe = next(event for event, _ in reversed(services.publisher.events) if event.reason is Reason.PROBE)
    await route(services, probe)
    seen = await app_functions["probe"](probe_read(probe.token or ""))
    assert json.loads(seen.get_body())["status"] == "seen"

    after = services.counter.totals()
    performed = {op for op, n in after.items() if n > before.get(op, 0)}
    # The run did reach the operations that matter, so the check below has something to check.
    assert {"queue.PutMessage", "queue.GetMessages", "queue.UpdateMessage", "queue.DeleteMessage"} <= performed
    assert {"blob.PutBlob", "blob.GetBlob", "blob.ListBlobs", "blob.LeaseBlob.Acquire"} <= performed
    unknown = performed - set(roles.STORAGE_OPERATIONS)
    assert unknown == set(), f"add {sorted(unknown)} to tests/infra/roles.py with the roles that allow them"
    granted = assigned_roles({"account"})
    refused = sorted(op for op in performed if not roles.STORAGE_OPERATIONS[op] & granted)
    assert refused == [], f"no role assigned on the storage account allows {refused}"
