"""The blocking client: carries out the core's flows with httpx.Client and time.sleep."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from queue_drain_client import _common as common
from queue_drain_client import _core as core
from queue_drain_client._progress import shown
from queue_drain_client.types import (
    Batch,
    BatchStatus,
    BatchSummary,
    PoisonListing,
    Queues,
    Replayed,
    ReplayJob,
    ResultLine,
    ResultsPage,
)

T = TypeVar("T")


class Client:
    """`Client(url, key=None, *, token=None, timeout_s=60, max_retries=2)`: a queue-drain app (`key`: a function
    key, sent as x-functions-key; `token`: the caller's bearer token, where the app identifies callers). Failed
    requests are retried (429, 5xx, 408, connection errors; `max_retries` times, honouring `Retry-After`); per call,
    `client.with_options(timeout_s=..., max_retries=...)`. Use it as a context manager, or `close()` it. Further
    keyword arguments go to httpx.Client (`transport=`, `verify=`...)."""

    def __init__(
        self,
        url: str = common.DEFAULT_URL,
        key: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = core.DEFAULT_TIMEOUT_S,
        max_retries: int = core.DEFAULT_MAX_RETRIES,
        **httpx_options: Any,
    ) -> None:
        self.url = common.checked_url(url)
        self.options = core.Options(timeout_s, max_retries)
        self._http = httpx.Client(base_url=self.url, headers=common.base_headers(key, token), **httpx_options)

    def with_options(self, *, timeout_s: float | None = None, max_retries: int | None = None) -> Self:
        """This client with other options, for a call or a few (the connection pool is shared)."""
        other = copy.copy(self)
        other.options = core.Options(
            self.options.timeout_s if timeout_s is None else timeout_s,
            self.options.max_retries if max_retries is None else max_retries,
        )
        return other

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _run(self, flow: core.Flow[T]) -> T:
        reply: core.Reply = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply = self._step(step)

    def _step(self, step: core.Step) -> core.Reply:
        if isinstance(step, core.Sleep):
            self._sleep(step.seconds)
            return None
        r = step.request
        try:
            return self._http.request(
                r.method, r.path, content=r.content, headers=r.headers, params=r.params, timeout=step.timeout_s
            )
        except httpx.TransportError as e:
            return e

    def _json(self, method: str, path: str, params: Mapping[str, str] | None = None) -> Any:
        return self._run(core.json_call(common.Request(method, path, params=params or {}), self.options))

    def submit(
        self,
        items: Iterable[Any] | None = None,
        *,
        file: str | Path | None = None,
        tenant: str | None = None,
        priority: str | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        expires_in_s: int | None = None,
        not_before: datetime | int | None = None,
        max_failed_fraction: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Batch:
        """Submit `items` (any JSON values) or a `file`. Sends an Idempotency-Key of its own (a new one per call,
        the same on each retry of it: a retry after a lost answer finds the first batch) unless you give one.
        `expires_in_s`, `not_before` (an aware datetime, or a delay in seconds) and `max_failed_fraction`: the
        batch lifecycle (docs/api.md); `callback_url`: where its completion notice goes (cheaper than wait())."""
        key = idempotency_key or common.new_idempotency_key()
        request = common.submit_request(
            items,
            file,
            idempotency_key=key,
            tenant=tenant,
            priority=priority,
            callback_url=callback_url,
            expires_in_s=expires_in_s,
            not_before=not_before,
            max_failed_fraction=max_failed_fraction,
            metadata=metadata,
        )
        return common.batch_of(self._run(core.call(request, self.options)), key)

    def status(self, batch_id: str) -> BatchStatus:
        status: BatchStatus = self._json("GET", common.batch_path(batch_id))
        return status

    def wait(
        self,
        batch_id: str,
        *,
        timeout_s: float = 3600.0,
        every_s: float = core.WAIT_FIRST_S,
        max_every_s: float = core.WAIT_MAX_S,
        progress: bool = False,
    ) -> BatchStatus:
        """Read the status until the batch is final; its last status. Reads every `every_s`, doubling up to
        `max_every_s`; WaitTimeout after `timeout_s`. `progress`: draw a bar (rich). A completion notice
        (`submit(callback_url=...)`) tells you without polling."""
        with shown(batch_id, progress) as show:
            flow = core.wait(
                batch_id,
                self.options,
                timeout_s=timeout_s,
                every_s=every_s,
                max_every_s=max_every_s,
                now=time.monotonic,
                show=show,
            )
            return self._run(flow)

    def result_pages(
        self, batch_id: str, *, status: str | None = None, limit: int | None = None
    ) -> Iterator[ResultsPage]:
        """The results route's pages as they are, each with the batch's status when it was read (`page.final`):
        a running batch's pages hold only the items settled so far."""
        continuation = None
        while True:
            page = self._run(
                core.results_page(batch_id, self.options, status=status, limit=limit, continuation=continuation)
            )
            yield page
            if page.continuation is None:
                return
            continuation = page.continuation

    def results(
        self, batch_id: str, *, status: str | None = None, wait: bool = True, timeout_s: float = 3600.0
    ) -> Iterator[ResultLine]:
        """Every item's outcome of a final batch, one at a time (pages followed). Waits for the batch to be final
        first (`wait=False`: raises NotFinal instead if it is not); `status`: only succeeded, failed, cancelled or
        expired items."""
        if wait:
            self.wait(batch_id, timeout_s=timeout_s)
        for page in self.result_pages(batch_id, status=status):
            yield from core.final_page(page, batch_id).lines

    def cancel(self, batch_id: str) -> BatchStatus:
        """Ask the app to stop the batch; its status (`cancelling` until no handler call of it runs)."""
        status: BatchStatus = self._json("POST", common.batch_path(batch_id, "/cancel"))
        return status

    def batches(
        self,
        *,
        page: int = 20,
        status: str | None = None,
        tenant: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[BatchSummary]:
        """Recent batches, newest first, pages followed; filters: `status`, `tenant` (another's: the operator's),
        `since` and `until` (accepted at or after, before: aware datetimes)."""
        continuation = None
        while True:
            doc = self._json(
                "GET", "/api/batches", common.list_params(page, status, tenant, since, until, continuation)
            )
            yield from doc["batches"]
            continuation = doc.get("continuation")
            if not continuation:
                return

    def queues(self) -> Queues:
        """Each partition's depth, poison depth and drainers, storage transactions by operation, tenants' use."""
        found: Queues = self._json("GET", "/api/queues")
        return found

    def poison(self) -> PoisonListing:
        """The parked chunks of every partition."""
        parked: PoisonListing = self._json("GET", "/api/poison")
        return parked

    def poison_detail(self, message_id: str) -> dict[str, Any]:
        """One parked chunk with its items and why each failed."""
        detail: dict[str, Any] = self._json("GET", f"/api/poison/{message_id}")
        return detail

    def replay(
        self,
        *,
        batch_id: str | None = None,
        message_ids: Iterable[str] | None = None,
        all: bool = False,
        limit: int | None = None,
        rate: float | None = None,
    ) -> Replayed:
        """Put parked chunks back on their queue: a batch's, the named ones, or every one (`all=True`: named, never
        implied; with none of the three it raises ValueError), for at most 60 s (`more` then says to call again)."""
        request = common.replay_request(batch_id, message_ids, all, limit, rate, background=False)
        replayed: Replayed = self._run(core.json_call(request, self.options))
        return replayed

    def start_replay(
        self,
        *,
        batch_id: str | None = None,
        message_ids: Iterable[str] | None = None,
        all: bool = False,
        limit: int | None = None,
        rate: float | None = None,
    ) -> ReplayJob:
        """The same replay as a background job; follow it with `replay_job(job.job_id)`."""
        request = common.replay_request(batch_id, message_ids, all, limit, rate, background=True)
        job: ReplayJob = self._run(core.json_call(request, self.options))
        return job

    def replay_job(self, job_id: str) -> ReplayJob:
        job: ReplayJob = self._json("GET", f"/api/poison/replay/{job_id}")
        return job
