"""SIGTERM stops the host gracefully: no new requests, in-flight work finishes, exit code 0."""

from __future__ import annotations

import asyncio
import signal

import aiohttp

from tests.host.conftest import StartHost


async def test_sigterm_lets_an_in_flight_request_finish_then_exits_cleanly(start_host: StartHost) -> None:
    host = start_host("http_app", grace_s=10)
    async with aiohttp.ClientSession() as session:
        request = asyncio.ensure_future(session.get(f"{host.base_url}/api/slow/1.5?tag=graceful"))
        await asyncio.sleep(0.5)
        host.process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        response = await request
        assert response.status == 200
        assert await response.text() == "done"
    exit_code = await asyncio.to_thread(host.process.proc.wait, 15)  # type: ignore[union-attr]
    assert exit_code == 0
    log = host.log()
    assert "SIGTERM received: shutting down" in log
    assert log.index("Executed 'Functions.slow' (Succeeded") < log.index("Host stopped")
    assert (host.markers / "slow-graceful").read_text() == "finished"


async def test_after_sigterm_the_host_takes_no_new_requests(start_host: StartHost) -> None:
    host = start_host("http_app", grace_s=10)
    async with aiohttp.ClientSession() as session:
        in_flight = asyncio.ensure_future(session.get(f"{host.base_url}/api/slow/1.5?tag=keep"))
        await asyncio.sleep(0.5)
        host.process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        await asyncio.sleep(0.3)
        try:
            async with session.get(f"{host.base_url}/api/items/1") as late:
                late_status = late.status
        except aiohttp.ClientConnectionError:
            late_status = None
        assert late_status is None or late_status == 503
        assert (await in_flight).status == 200
