"""The asyncio client: the same calls as `Client`, awaited; carries out the core's flows with httpx.AsyncClient
and asyncio.sleep."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterable, Mapping
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


class AsyncClient:
    """`AsyncClient(url, key=None, *, token=None, timeout_s=60, max_retries=2)`: as `Client`, each call awaited;
    `async with` it, or `await aclose()`."""

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
        self._http = httpx.AsyncClient(base_url=self.url, headers=common.base_headers(key, token), **httpx_options)

    def with_options(self, *, timeout_s: float | None = None, max_retries: int | None = None) -> Self:
        """This client with other options, for a call or a few (the connection pool is shared)."""
        other = copy.copy(self)
        other.options = core.Options(
            self.options.timeout_s if timeout_s is None else timeout_s,
            self.options.max_retries if max_retries is None else max_retries,
        )
        return other

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _run(self, flow: core.Flow[T]) -> T:
        reply: core.Reply = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply = await self._step(step)

    async def _step(self, step: core.Step) -> core.Reply:
        if isinstance(step, core.Sleep):
            await self._sleep(step.seconds)
            return None
        r = step.request
        try:
            return await self._http.request(
                r.method, r.path, content=r.content, headers=r.headers, params=r.params, timeout=step.timeout_s
            )
        except httpx.TransportError as e:
            return e

    async def _json(self, method: str, path: str, params: Mapping[str, str] | None = None) -> Any:
        return await self._run(core.json_call(common.Request(method, path, params=params or {}), self.options))

    async def submit(
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
        """As `Client.submit`: an Idempotency-Key of its own unless given, the same on each retry."""
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
        return common.batch_of(await self._run(core.call(request, self.options)), key)

    async def status(self, batch_id: str) -> BatchStatus:
        status: BatchStatus = await self._json("GET", common.batch_path(batch_id))
        return status

    async def wait(
        self,
        batch_id: str,
        *,
        timeout_s: float = 3600.0,
        every_s: float = core.WAIT_FIRST_S,
        max_every_s: float = core.WAIT_MAX_S,
        progress: bool = False,
    ) -> BatchStatus:
        """As `Client.wait`: reads back off from `every_s` to `max_every_s`; WaitTimeout after `timeout_s`."""
        loop = asyncio.get_running_loop()
        with shown(batch_id, progress) as show:
            flow = core.wait(
                batch_id,
                self.options,
                timeout_s=timeout_s,
                every_s=every_s,
                max_every_s=max_every_s,
                now=loop.time,
                show=show,
            )
            return await self._run(flow)

    async def result_pages(
        self, batch_id: str, *, status: str | None = None, limit: int | None = None
    ) -> AsyncIterator[ResultsPage]:
        """As `Client.result_pages`: each page with the batch's status when it was read."""
        continuation = None
        while True:
            page = await self._run(
                core.results_page(batch_id, self.options, status=status, limit=limit, continuation=continuation)
            )
            yield page
            if page.continuation is None:
                return
            continuation = page.continuation

    async def results(
        self, batch_id: str, *, status: str | None = None, wait: bool = True, timeout_s: float = 3600.0
    ) -> AsyncIterator[ResultLine]:
        """As `Client.results`: a final batch's outcomes (waits for final; `wait=False` raises NotFinal)."""
        if wait:
            await self.wait(batch_id, timeout_s=timeout_s)
        async for page in self.result_pages(batch_id, status=status):
            for line in core.final_page(page, batch_id).lines:
                yield line

    async def cancel(self, batch_id: str) -> BatchStatus:
        status: BatchStatus = await self._json("POST", common.batch_path(batch_id, "/cancel"))
        return status

    async def batches(
        self,
        *,
        page: int = 20,
        status: str | None = None,
        tenant: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> AsyncIterator[BatchSummary]:
        continuation = None
        while True:
            doc = await self._json(
                "GET", "/api/batches", common.list_params(page, status, tenant, since, until, continuation)
            )
            for batch in doc["batches"]:
                yield batch
            continuation = doc.get("continuation")
            if not continuation:
                return

    async def queues(self) -> Queues:
        found: Queues = await self._json("GET", "/api/queues")
        return found

    async def poison(self) -> PoisonListing:
        parked: PoisonListing = await self._json("GET", "/api/poison")
        return parked

    async def poison_detail(self, message_id: str) -> dict[str, Any]:
        detail: dict[str, Any] = await self._json("GET", f"/api/poison/{message_id}")
        return detail

    async def replay(
        self,
        *,
        batch_id: str | None = None,
        message_ids: Iterable[str] | None = None,
        all: bool = False,
        limit: int | None = None,
        rate: float | None = None,
    ) -> Replayed:
        request = common.replay_request(batch_id, message_ids, all, limit, rate, background=False)
        replayed: Replayed = await self._run(core.json_call(request, self.options))
        return replayed

    async def start_replay(
        self,
        *,
        batch_id: str | None = None,
        message_ids: Iterable[str] | None = None,
        all: bool = False,
        limit: int | None = None,
        rate: float | None = None,
    ) -> ReplayJob:
        request = common.replay_request(batch_id, message_ids, all, limit, rate, background=True)
        job: ReplayJob = await self._run(core.json_call(request, self.options))
        return job

    async def replay_job(self, job_id: str) -> ReplayJob:
        job: ReplayJob = await self._json("GET", f"/api/poison/replay/{job_id}")
        return job
