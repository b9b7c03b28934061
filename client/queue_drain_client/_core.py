"""The one core under `Client` and `AsyncClient`: every call as a flow (a generator) that yields the I/O it needs,
a `Transmit` (one HTTP attempt) or a `Sleep`, and returns the answer. Retries, back-off, `Retry-After`, the
idempotency key kept across attempts, wait()'s polling and the results' pages are written once, here; the sync and
async faces only carry out the steps (`time.sleep` or `asyncio.sleep`, httpx's Client or AsyncClient)."""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from queue_drain_client import _common as common
from queue_drain_client._retry import delay_s
from queue_drain_client.errors import ConnectionFailed, NotFinal, WaitTimeout, error_for
from queue_drain_client.types import FINAL, BatchStatus, ResultsPage

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
WAIT_FIRST_S = 0.5
WAIT_MAX_S = 15.0


@dataclass(frozen=True)
class Options:
    """Per client, and per call through `with_options()`: each HTTP attempt's timeout, and how many times a
    retryable failure is tried again."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError(f"timeout_s must be positive and max_retries at least 0: {self}")


@dataclass(frozen=True)
class Transmit:
    request: common.Request
    timeout_s: float


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Transmit | Sleep
# What a step gives back: a Transmit its response or the transport error it met; a Sleep None.
Reply = httpx.Response | httpx.TransportError | None
Flow = Generator[Step, Reply, T]


def call(request: common.Request, options: Options, jitter: Callable[[], float] = random.random) -> Flow[Any]:
    """One request, retried as `_retry` says; the answer, or the most specific exception."""
    retry = 0
    while True:
        outcome = yield Transmit(request, options.timeout_s)
        assert outcome is not None
        wait = delay_s(outcome, retry, options.max_retries, safe=request.safe, jitter=jitter())
        if wait is None:
            return answered(outcome, request)
        retry += 1
        yield Sleep(wait)


def answered(outcome: httpx.Response | httpx.TransportError, request: common.Request) -> httpx.Response:
    if isinstance(outcome, httpx.TransportError):
        raise ConnectionFailed(
            f"cannot reach {origin(outcome)} ({request.method} {request.path}): {outcome}"
        ) from outcome
    if outcome.status_code >= 400:
        raise error_for(outcome)
    return outcome


def origin(error: httpx.TransportError) -> str:
    try:
        url = error.request.url
    except RuntimeError:  # an error raised without its request (a test's transport)
        return "the app"
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


def json_call(request: common.Request, options: Options) -> Flow[Any]:
    response = yield from call(request, options)
    return response.json()


def wait(
    batch_id: str,
    options: Options,
    *,
    timeout_s: float,
    every_s: float,
    max_every_s: float,
    now: Callable[[], float],
    show: Callable[[BatchStatus], None] | None = None,
) -> Flow[BatchStatus]:
    """Read the batch's status until it is final: every `every_s`, doubling to `max_every_s`; WaitTimeout once
    `timeout_s` has passed (each read costs the app about three storage transactions: a completion notice,
    `callback_url`, costs none)."""
    deadline = now() + timeout_s
    pause = every_s
    while True:
        status: BatchStatus = yield from json_call(common.Request("GET", common.batch_path(batch_id)), options)
        if show is not None:
            show(status)
        if status["status"] in FINAL:
            return status
        left = deadline - now()
        if left <= 0:
            raise WaitTimeout(f"batch {batch_id} not final within {timeout_s:g} s ({status['status']})", status)
        yield Sleep(min(pause, left))
        pause = min(pause * 2, max_every_s)


def results_page(
    batch_id: str, options: Options, *, status: str | None, limit: int | None, continuation: str | None
) -> Flow[ResultsPage]:
    response = yield from call(common.results_request(batch_id, status, limit, continuation), options)
    return common.results_page(response)


def final_page(page: ResultsPage, batch_id: str) -> ResultsPage:
    """The page, or NotFinal if the batch is still running (its export would be partial)."""
    if not page.final:
        raise NotFinal(
            f"batch {batch_id} is {page.batch_status or 'not final'}: its results are partial until it is final "
            "(wait=True waits for it; result_pages() gives each page with the batch's status)",
            page.batch_status,
        )
    return page
