"""The asyncio client: the same calls as `Client`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from queue_drain_client import _common as common
from queue_drain_client._progress import Bar
from queue_drain_client.errors import ConnectionFailed, WaitTimeout


class AsyncClient:
    """`AsyncClient(url, key=None, token=None)`; `async with` it, or `await aclose()`."""

    def __init__(
        self,
        url: str = common.DEFAULT_URL,
        key: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 60.0,
        **httpx_options: Any,
    ) -> None:
        self.url = common.checked_url(url)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=common.base_headers(key, token), timeout=timeout_s, **httpx_options
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, request: common.Request) -> httpx.Response:
        try:
            response = await self._http.request(
                request.method, request.path, content=request.content, headers=request.headers, params=request.params
            )
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.url}: {e}") from e
        return common.checked(response)

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return (await self._send(common.Request("GET", path, params=params or {}))).json()

    async def submit(
        self,
        items: Iterable[Any] | None = None,
        *,
        file: str | Path | None = None,
        tenant: str | None = None,
        priority: str | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        options: Mapping[str, common.Option] | None = None,
    ) -> common.Batch:
        """Submit `items` (any JSON values) or a `file`; `options`: further submit options by name."""
        request = common.submit_request(
            items,
            file,
            tenant=tenant,
            priority=priority,
            idempotency_key=idempotency_key,
            callback_url=callback_url,
            options=options,
        )
        return common.batch_of(await self._send(request))

    async def status(self, batch_id: str) -> dict[str, Any]:
        status: dict[str, Any] = await self._get(common.batch_path(batch_id))
        return status

    async def wait(
        self, batch_id: str, *, timeout_s: float = 3600.0, every_s: float = 0.5, progress: bool = False
    ) -> dict[str, Any]:
        """Poll until the batch is final; its last status. Raises WaitTimeout after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        bar = Bar(batch_id) if progress else None
        try:
            if bar is not None:
                bar.__enter__()
            while True:
                status = await self.status(batch_id)
                if bar is not None:
                    bar.show(status)
                if common.is_final(status):
                    return status
                if loop.time() > deadline:
                    raise WaitTimeout(f"batch {batch_id} not final within {timeout_s:g} s ({status['status']})", status)
                await asyncio.sleep(every_s)
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)

    async def results(self, batch_id: str, **params: str) -> AsyncIterator[Any]:
        """Every item's outcome, one at a time (pages followed)."""
        query = dict(params)
        while True:
            response = await self._send(common.Request("GET", common.batch_path(batch_id, "/results"), params=query))
            found, continuation = common.results_page(response.headers, response.content)
            for result in found:
                yield result
            if not continuation:
                return
            query["continuation"] = continuation

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = (
            await self._send(common.Request("POST", common.batch_path(batch_id, "/cancel")))
        ).json()
        return answer

    async def batches(self, *, page: int = 20) -> AsyncIterator[dict[str, Any]]:
        params = {"limit": str(page)}
        while True:
            doc = await self._get("/api/batches", params)
            for batch in doc["batches"]:
                yield batch
            if not doc.get("continuation"):
                return
            params["continuation"] = doc["continuation"]
