"""queue-drain: push-driven, cost-aware draining of Azure Storage queues.

Each function decodes its trigger input, calls one thing in `shared`, and encodes the answer.
"""

from __future__ import annotations

import logging

import azure.functions as func

from shared import api, runtime
from shared.core.errors import MalformedEvent
from shared.core.events import TriggerEvent
from shared.ops import notice_sweep, replay_takeover
from shared.ops.dashboard import page as dashboard_page
from shared.router import route
from shared.telemetry import tracing
from shared.watch.fallback import epoch_ms, poll

log = logging.getLogger("queue_drain")

runtime.load_settings()  # a bad app setting fails the host at start, naming the variable
runtime.start_telemetry()  # Application Insights, OTLP, the local trace file, or nothing

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)


def http_response(result: api.ApiResponse) -> func.HttpResponse:
    return func.HttpResponse(
        body=result.encoded(), status_code=result.status, headers=dict(result.headers), mimetype=result.media_type
    )


def headers_of(req: func.HttpRequest) -> dict[str, str]:
    return {k.lower(): v for k, v in req.headers.items()}


@app.function_name("submit_batch")
@app.route(route="batches", methods=["POST"])
async def submit_batch(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.submit_batch(req.get_body(), headers_of(req), dict(req.params), req.url))


@app.function_name("batch_list")
@app.route(route="batches", methods=["GET"])
async def batch_list(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.batch_list(dict(req.params), headers_of(req)))


@app.function_name("batch_status")
@app.route(route="batches/{batch_id}", methods=["GET"])
async def batch_status(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.batch_status(req.route_params.get("batch_id", ""), headers_of(req)))


@app.function_name("batch_cancel")
@app.route(route="batches/{batch_id}/cancel", methods=["POST"])
async def batch_cancel(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.cancel_batch(req.route_params.get("batch_id", ""), headers_of(req)))


@app.function_name("batch_results")
@app.route(route="batches/{batch_id}/results", methods=["GET"])
async def batch_results(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(
        await api.batch_results(req.route_params.get("batch_id", ""), dict(req.params), headers_of(req))
    )


@app.function_name("queue_status")
@app.route(route="queues", methods=["GET"])
async def queue_status(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.queue_status(headers_of(req)))


@app.function_name("poison_list")
@app.route(route="poison", methods=["GET"])
async def poison_list(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.poison_list(dict(req.params), headers_of(req)))


@app.function_name("poison_detail")
@app.route(route="poison/{message_id}", methods=["GET"])
async def poison_detail(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.poison_detail(req.route_params.get("message_id", ""), headers_of(req)))


@app.function_name("poison_replay")
@app.route(route="poison/replay", methods=["POST"])
async def poison_replay(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.poison_replay(req.get_body(), headers_of(req)))


@app.function_name("replay_status")
@app.route(route="poison/replay/{job_id}", methods=["GET"])
async def replay_status(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.replay_status(req.route_params.get("job_id", ""), headers_of(req)))


@app.function_name("probe")
@app.route(route="probes", methods=["POST", "GET"])
async def probe(req: func.HttpRequest) -> func.HttpResponse:
    # One function for both methods: each HTTP function's keys cost reads at every Flex start (bench.idle_sources).
    if req.method == "POST":
        return http_response(await api.probe_start())
    return http_response(await api.probe_status(req.params.get("id", "")))


@app.function_name("dashboard")
@app.route(route="dashboard", methods=["GET"])
async def dashboard(req: func.HttpRequest) -> func.HttpResponse:
    refused = await api.operator_page(headers_of(req))
    if refused is not None:
        return http_response(refused)
    page = dashboard_page()
    return func.HttpResponse(body=page.body, headers=dict(page.headers), mimetype="text/html", charset="utf-8")


@app.function_name("openapi")
@app.route(route="openapi.json", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def openapi(req: func.HttpRequest) -> func.HttpResponse:
    return http_response(await api.openapi())


@app.function_name("drain")
@app.service_bus_queue_trigger(arg_name="msg", queue_name="%TRIGGER_QUEUE%", connection="ServiceBusConnection")
async def drain(msg: func.ServiceBusMessage) -> None:
    try:
        event = TriggerEvent.decode(msg.get_body())
        await route(runtime.services(), event, tracing.from_event(msg.application_properties))
    except MalformedEvent as e:
        # Raised on purpose: Service Bus redelivers it and dead-letters it after MaxDeliveryCount.
        log.error("malformed trigger event %s (delivery %s): %s", msg.message_id, msg.delivery_count, e)
        raise


@app.function_name("fallback_poll")
# No schedule monitor: it would write a status blob at every tick (1,440 writes a day at one a minute), and a
# missed tick of a safety-net poller needs no catching up: the next one comes within the minute.
@app.timer_trigger(arg_name="timer", schedule="%FALLBACK_SCHEDULE%", run_on_startup=False, use_monitor=False)
async def fallback_poll(timer: func.TimerRequest) -> None:
    outcomes = await poll(runtime.services())
    acted = [o.as_dict(epoch_ms()) for o in outcomes if o.action != "not-due"]
    if acted or timer.past_due:
        log.info("fallback poll (past due: %s): %s", timer.past_due, acted)
    await replay_takeover.take_over(runtime.services())  # replays that died between their claim and their send
    await notice_sweep.sweep(runtime.services())  # final batches without a notice; notices whose event was lost
