"""End to end through function_app.py's registered functions, the real Azurite and the real Service Bus
stand-in: HTTP submit -> trigger event on Service Bus -> the Service Bus-triggered drain -> status.

Trigger events are received from the broker with the azure-servicebus SDK and handed to the `drain`
function as `azure.functions` ServiceBusMessage objects, the way the host does it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.functions.servicebus import ServiceBusMessage as FunctionsMessage
from azure.servicebus.aio import ServiceBusClient

from shared.batch import results
from shared.bus.publisher import ServiceBusPublisher
from shared.core.errors import MalformedEvent
from shared.core.events import Reason, TriggerEvent
from shared.store.result_store import read_records
from tests.app.conftest import http_request


def as_function_message(received: Any) -> FunctionsMessage:
    return FunctionsMessage(
        body=b"".join(received.body),
        message_id=str(received.message_id),
        delivery_count=received.delivery_count,
        enqueued_time_utc=received.enqueued_time_utc,
        application_properties={},
        user_properties={},
    )


async def serve_trigger_queue(connection: str, queue: str, drain: Any, *, idle_s: float = 1.0) -> list[dict[str, Any]]:
    """Deliver trigger events to `drain` until none arrives for `idle_s`: complete on return, abandon on raise."""
    seen = []
    async with ServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_receiver(queue, max_wait_time=idle_s) as receiver:
            while True:
                batch = await receiver.receive_messages(max_message_count=10, max_wait_time=idle_s)
                if not batch:
                    return seen
                for received in batch:
                    seen.append(json.loads(b"".join(received.body)))
                    try:
                        await drain(as_function_message(received))
                    except Exception:
                        await receiver.abandon_message(received)
                        raise
                    await receiver.complete_message(received)


async def call(app_functions: Any, name: str, request: Any) -> tuple[int, Any]:
    response = await app_functions[name](request)
    return response.status_code, json.loads(response.get_body())


async def result_records(services: Any, batch_id: str) -> list[dict[str, Any]]:
    return await read_records(services.storage.container(services.settings.results_container), batch_id)


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_ten_thousand_items_flow_from_http_through_service_bus_and_each_result_is_recorded_once(
    configure, app_functions, servicebus_service
):
    services = configure(servicebus=servicebus_service.connection_string)
    sales = [
        {"id": f"e2e-{i}", "amount": f"{1 + i % 997}.{i % 100:02d}", "currency": ("EUR", "USD", "JPY")[i % 3]}
        for i in range(10_000)
    ]
    for sale in sales:
        sale |= {"author": f"au-{len(sale['id']) % 7}", "distributor": "shop"}
        if sale["currency"] == "JPY":
            sale["amount"] = sale["amount"].split(".")[0]
    body = "\n".join(json.dumps(s) for s in sales).encode()

    code, accepted = await call(
        app_functions,
        "submit_batch",
        http_request("POST", "/api/batches", body=body, headers={"Content-Type": "application/x-ndjson"}),
    )
    assert code == 202, accepted
    assert accepted["trigger"] == "published"
    assert accepted["items"] == 10_000
    assert accepted["status_url"] == f"/api/batches/{accepted['batch_id']}"

    events = await serve_trigger_queue(
        servicebus_service.connection_string, services.settings.trigger_queue, app_functions["drain"]
    )
    assert events[0]["reason"] == "submitted"
    assert events[0]["batch_id"] == accepted["batch_id"]

    code, status = await call(
        app_functions, "batch_status", http_request("GET", accepted["status_url"], batch_id=accepted["batch_id"])
    )
    assert code == 200
    assert status["status"] == "completed"
    assert status["items"] == {"total": 10_000, "succeeded": 10_000, "failed": 0, "pending": 0}
    assert status["chunks"]["done"] == status["chunks"]["total"] == accepted["chunks"]

    records = await result_records(services, accepted["batch_id"])
    starts = [0]
    for size in [len(r["ok"]) for r in sorted(records, key=lambda r: r["chunk"])]:
        starts.append(starts[-1] + size)
    seen_ids = [sales[starts[r["chunk"]] + p]["id"] for r in records for p, _ in results.successes(r)]
    assert sorted(seen_ids) == sorted(s["id"] for s in sales), "every item's result, exactly once"
    by_id = {sales[starts[r["chunk"]] + p]["id"]: v for r in records for p, v in results.successes(r)}
    assert by_id["e2e-1"]["currency"] == "USD"
    assert by_id["e2e-1"]["id"] == "e2e-1"


async def test_status_of_unknown_and_odd_batch_ids_is_a_json_404(configure, app_functions):
    configure()
    for batch_id in ("0" * 32, "../../etc/passwd", "A" * 32, "x" * 500, ""):
        code, body = await call(app_functions, "batch_status", http_request("GET", "/api/batches/x", batch_id=batch_id))
        assert code == 404, batch_id
        assert body["error"]["code"] == "not_found"


async def test_queue_status_shows_depth_poison_backoff_and_counted_transactions(configure, app_functions):
    services = configure()
    body = b'{"items":[{"id":"q-1","amount":"1","currency":"EUR","author":"a","distributor":"d"}]}'
    await call(
        app_functions,
        "submit_batch",
        http_request("POST", "/api/batches", body=body, headers={"Content-Type": "application/json"}),
    )

    code, view = await call(app_functions, "queue_status", http_request("GET", "/api/queues"))

    assert code == 200
    [partition] = view["partitions"]
    assert partition["queue"] == services.settings.work_queue
    assert partition["depth"] == 1
    assert partition["poison_depth"] == 0
    assert partition["active_drainers"] == 0
    assert partition["fallback_backoff"]["interval_ms"] == services.settings.backoff_floor_ms
    assert view["storage_transactions"]["by_operation"]["queue.PutMessage"] >= 1


async def test_a_malformed_trigger_event_is_logged_and_raised_so_service_bus_dead_letters_it(
    configure, app_functions, caplog
):
    configure()
    message = FunctionsMessage(body=b"{not json", message_id="m-1", application_properties={}, user_properties={})
    with caplog.at_level(logging.ERROR), pytest.raises(MalformedEvent):
        await app_functions["drain"](message)
    assert "malformed trigger event m-1" in caplog.text


async def test_an_event_for_a_queue_that_is_not_the_apps_is_refused(configure, app_functions):
    services = configure()
    event = TriggerEvent(services.settings.account_name, "someone-elses-queue", Reason.SUBMITTED)
    message = FunctionsMessage(body=event.encode(), message_id="m-2", application_properties={}, user_properties={})
    with pytest.raises(MalformedEvent, match="not one of this app's work queues"):
        await app_functions["drain"](message)


@pytest.mark.slow
async def test_the_publisher_sends_schedules_and_cancels_on_the_real_broker(configure, servicebus_service):
    services = configure(servicebus=servicebus_service.connection_string)
    publisher = ServiceBusPublisher(services.settings)
    event = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.SUBMITTED)
    try:
        assert await publisher.publish(event) is None
        later = datetime.now(timezone.utc) + timedelta(minutes=5)
        kept = await publisher.publish(TriggerEvent(event.account, event.queue, Reason.WATCHDOG), at=later)
        dropped = await publisher.publish(TriggerEvent(event.account, event.queue, Reason.RETRY_DUE), at=later)
        assert kept is not None
        assert dropped is not None
        await publisher.cancel(dropped)
    finally:
        await publisher.close()

    async with ServiceBusClient.from_connection_string(servicebus_service.connection_string) as client:
        async with client.get_queue_receiver(services.settings.trigger_queue) as receiver:
            peeked = await receiver.peek_messages(max_message_count=10)
            received = await receiver.receive_messages(max_message_count=10, max_wait_time=2)
            for m in received:
                await receiver.complete_message(m)
    assert [TriggerEvent.decode(b"".join(m.body)).reason for m in received] == [Reason.SUBMITTED]
    scheduled = [TriggerEvent.decode(b"".join(m.body)).reason for m in peeked if m.scheduled_enqueue_time_utc]
    assert Reason.WATCHDOG in scheduled
    assert Reason.RETRY_DUE not in scheduled


@pytest.mark.slow
async def test_concurrent_first_publishes_on_a_cold_publisher_all_reach_the_broker(configure, servicebus_service):
    # A submit and the fallback can publish at the same moment; the SDK's lazily opened sender once failed
    # both (and the batch was accepted as "deferred" with the broker up).
    services = configure(servicebus=servicebus_service.connection_string)
    publisher = ServiceBusPublisher(services.settings)
    event = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.SUBMITTED)
    try:
        await asyncio.gather(*(publisher.publish(event) for _ in range(8)))
    finally:
        await publisher.close()
    async with ServiceBusClient.from_connection_string(servicebus_service.connection_string) as client:
        async with client.get_queue_receiver(services.settings.trigger_queue) as receiver:
            peeked = await receiver.peek_messages(max_message_count=20)
    assert len(peeked) == 8


async def test_an_unreachable_broker_still_accepts_the_batch_with_a_deferred_trigger(configure, app_functions, caplog):
    configure()  # ServiceBusConnection points at a closed port
    body = b'{"items":[{"id":"d-1","amount":"1","currency":"EUR","author":"a","distributor":"d"}]}'
    with caplog.at_level(logging.WARNING):
        code, accepted = await call(
            app_functions,
            "submit_batch",
            http_request("POST", "/api/batches", body=body, headers={"Content-Type": "application/json"}),
        )
    assert code == 202
    assert accepted["trigger"] == "deferred"
    assert "the fallback covers it if this process dies first" in caplog.text
    assert "SharedAccessKey" not in caplog.text, "no secret in a log line"
