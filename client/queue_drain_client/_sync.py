"""The blocking client."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from queue_drain_client import _common as common
from queue_drain_client._progress import Bar
from queue_drain_client.errors import ConnectionFailed, WaitTimeout


class Client:
    """`Client(url, key=None, token=None)`: a queue-drain app (`key`: a function key, sent as x-functions-key;
    `token`: the caller's bearer token, where the app identifies callers). Use it as a
    context manager, or `close()` it."""

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
        self._http = httpx.Client(
            base_url=self.url, headers=common.base_headers(key, token), timeout=timeout_s, **httpx_options
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, request: common.Request) -> httpx.Response:
        try:
            response = self._http.request(
                request.method, request.path, content=request.content, headers=request.headers, params=request.params
            )
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.url}: {e}") from e
        return common.checked(response)

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return self._send(common.Request("GET", path, params=params or {})).json()

    def submit(
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
        return common.batch_of(self._send(request))

    def status(self, batch_id: str) -> dict[str, Any]:
        status: dict[str, Any] = self._get(common.batch_path(batch_id))
        return status

    def wait(
        self, batch_id: str, *, timeout_s: float = 3600.0, every_s: float = 0.5, progress: bool = False
    ) -> dict[str, Any]:
        """Poll until the batch is final (completed, completed_with_failures, cancelled, expired, failed); its
        last status. `progress`: draw a bar (rich). Raises WaitTimeout after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        bar = Bar(batch_id) if progress else None
        try:
            if bar is not None:
                bar.__enter__()
            while True:
                status = self.status(batch_id)
                if bar is not None:
                    bar.show(status)
                if common.is_final(status):
                    return status
                if time.monotonic() > deadline:
                    raise WaitTimeout(f"batch {batch_id} not final within {timeout_s:g} s ({status['status']})", status)
                time.sleep(every_s)
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)

    def results(self, batch_id: str, **params: str) -> Iterator[Any]:
        """Every item's outcome, as the results route gives them, one at a time (pages followed)."""
        query = dict(params)
        while True:
            response = self._send(common.Request("GET", common.batch_path(batch_id, "/results"), params=query))
            found, continuation = common.results_page(response.headers, response.content)
            yield from found
            if not continuation:
                return
            query["continuation"] = continuation

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the app to stop the batch; its answer."""
        answer: dict[str, Any] = self._send(common.Request("POST", common.batch_path(batch_id, "/cancel"))).json()
        return answer

    def batches(self, *, page: int = 20) -> Iterator[dict[str, Any]]:
        """Recent batches, newest first, pages followed."""
        params = {"limit": str(page)}
        while True:
            doc = self._get("/api/batches", params)
            yield from doc["batches"]
            if not doc.get("continuation"):
                return
            params["continuation"] = doc["continuation"]

    def poison(self) -> dict[str, Any]:
        """The parked chunks of every partition."""
        parked: dict[str, Any] = self._get("/api/poison")
        return parked

    def poison_detail(self, message_id: str) -> dict[str, Any]:
        detail: dict[str, Any] = self._get(f"/api/poison/{message_id}")
        return detail

    def replay(
        self,
        *,
        batch_id: str | None = None,
        message_ids: Iterable[str] | None = None,
        all: bool = False,
        background: bool = False,
    ) -> dict[str, Any]:
        """Put parked chunks back on their queue: a batch's, the named ones, or with `all=True` every one (what to
        replay is always named: with none of the three it raises ValueError, never replaying everything)."""
        body = common.replay_body(batch_id, message_ids, background, everything=all)
        request = common.Request("POST", "/api/poison/replay", body, {"content-type": "application/json"})
        answer: dict[str, Any] = self._send(request).json()
        return answer
