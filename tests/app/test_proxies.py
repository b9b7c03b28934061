"""The storage clients read proxy settings from the environment once, when built, never per request (real Azurite).

The environment is changed only for each test (monkeypatch): a netrc naming Azurite's host, a proxy that answers
400 and records the request line it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from shared.core.errors import StorageError
from shared.core.proxies import env_proxies

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_a_proxy_is_chosen_by_the_endpoints_scheme(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert env_proxies("https://acct.queue.core.windows.net") == {"https": "http://proxy.example:3128"}
    assert env_proxies("http://127.0.0.1:10001/devstoreaccount1") is None, "no HTTP_PROXY"


def test_no_proxy_exempts_a_host_and_no_setting_means_no_proxy(monkeypatch):
    assert env_proxies("https://acct.queue.core.windows.net") is None
    monkeypatch.setenv("https_proxy", "http://user:secret@proxy.example:3128")
    monkeypatch.setenv("no_proxy", "localhost,.core.windows.net")
    assert env_proxies("https://acct.queue.core.windows.net") is None
    assert env_proxies("https://elsewhere.example") == {"https": "http://user:secret@proxy.example:3128"}


def netrc_for(tmp_path: Path, connection_string: str) -> Path:
    host = urlsplit(QueueServiceClient.from_connection_string(connection_string).url).hostname
    path = tmp_path / "netrc"
    path.write_text(f"machine {host} login someone password something\n")
    path.chmod(0o600)
    return path


async def test_a_netrc_entry_for_the_storage_host_is_not_read_per_request(
    configure, storage_connection_string, tmp_path, monkeypatch
):
    monkeypatch.setenv("NETRC", str(netrc_for(tmp_path, storage_connection_string)))
    # The SDK's default client reads it on each request and cannot send both logins: the test's control.
    async with QueueClient.from_connection_string(storage_connection_string, "netrc-control") as default:
        with pytest.raises(ValueError, match="AUTHORIZATION"):
            await default.create_queue()
    services = configure()
    queue = await services.storage.ensure_queue(services.settings.work_queue)
    await queue.send_message("hello")
    assert [m.content for m in await queue.peek_messages()] == ["hello"]


@contextlib.asynccontextmanager
async def refusing_proxy() -> AsyncIterator[tuple[int, list[str]]]:
    """A proxy on 127.0.0.1 that records each request line and answers 400 (not retried by the SDK)."""
    lines: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines.append((await reader.readline()).decode("latin-1").strip())
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], lines
    finally:
        server.close()
        await server.wait_closed()


async def test_the_environments_proxy_is_used_unless_no_proxy_exempts_the_host(configure, monkeypatch):
    async with refusing_proxy() as (port, lines):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        services = configure()
        with pytest.raises((StorageError, HttpResponseError)):
            await services.storage.ensure_queue(services.settings.work_queue)
        assert lines, "the request went through the proxy"
        assert lines[0].startswith("PUT http://"), lines
        await services.storage.close()

        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        services = configure()
        queue = await services.storage.ensure_queue(services.settings.work_queue)
        await queue.send_message("direct")
        assert len(lines) == 1, "nothing more reached the proxy"
