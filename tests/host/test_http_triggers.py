"""HTTP triggers through a real host process: routing, request and response mapping, errors, timeouts."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from tests.host.conftest import HostLauncher, RunningHost

HOST_API_REASON = "Reason='This function was programmatically called via the host APIs.'"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


async def fetch(method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
    async with aiohttp.ClientSession() as session, session.request(method, url, data=data, headers=headers) as r:
        return Reply(r.status, r.headers, await r.read())


@pytest.fixture(scope="module")
def http_host(module_hosts: HostLauncher) -> RunningHost:
    return module_hosts.start("http_app", env={"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT": "1024"})


async def test_an_http_round_trip_carries_route_query_headers_and_body_both_ways(http_host: RunningHost) -> None:
    url = f"{http_host.base_url}/api/echo/bob?a=1&a=2&b=x"
    reply = await fetch("POST", url, data=b"hello", headers={"X-Test": "hi"})
    assert reply.status == 201
    assert reply.headers["X-Echo"] == "yes"
    assert reply.headers["Content-Type"] == "application/json; charset=utf-8"
    payload = json.loads(reply.body)
    assert payload["method"] == "POST"
    assert payload["name"] == "bob"
    assert payload["query"] == {"a": "1,2", "b": "x"}
    assert payload["header"] == "hi"
    assert payload["body"] == "hello"
    assert payload["url"].endswith("/api/echo/bob?a=1&a=2&b=x")
    assert payload["function_name"] == "echo"
    log = http_host.wait_for_log("Executed 'Functions.echo' (Succeeded")
    assert f"Executing 'Functions.echo' ({HOST_API_REASON}, Id={payload['invocation_id']})" in log


async def test_route_constraints_and_literal_precedence_pick_the_right_function(http_host: RunningHost) -> None:
    numbered = await fetch("GET", f"{http_host.base_url}/api/items/12")
    assert (numbered.status, numbered.body) == (200, b"item 12 on thread")
    literal = await fetch("GET", f"{http_host.base_url}/api/items/latest")
    assert (literal.status, literal.body) == (200, b"latest")
    assert (await fetch("GET", f"{http_host.base_url}/api/items/twelve")).status == 404
    assert (await fetch("GET", f"{http_host.base_url}/API/Items/7")).status == 200


async def test_unknown_routes_are_404_and_wrong_methods_are_405(http_host: RunningHost) -> None:
    assert (await fetch("GET", f"{http_host.base_url}/api/nothing-here")).status == 404
    assert (await fetch("GET", f"{http_host.base_url}/items/12")).status == 404  # outside the route prefix
    wrong_method = await fetch("DELETE", f"{http_host.base_url}/api/items/12")
    assert wrong_method.status == 405
    assert wrong_method.headers["Allow"] == "GET"
    assert wrong_method.headers["Content-Type"].startswith("application/json"), "a JSON answer, not an empty one"
    error = json.loads(wrong_method.body)["error"]
    assert error["code"] == "method_not_allowed"
    assert "GET" in error["message"]
    assert (await fetch("GET", f"{http_host.base_url}/api/echo/bob")).status == 405


async def test_a_request_line_over_8_kb_is_a_json_414_and_one_within_it_is_served(http_host: RunningHost) -> None:
    url = f"{http_host.base_url}/api/items/12?pad="
    line = len("GET ") + len(url) - len(http_host.base_url) + len(" HTTP/1.1")  # without its CRLF
    fits = await fetch("GET", url + "x" * (8192 - line))
    assert fits.status == 200, "a request line of exactly 8,192 bytes is served"
    long = await fetch("GET", url + "x" * (8193 - line))
    assert long.status == 414, (long.status, long.body[:200])
    assert long.headers["Content-Type"].startswith("application/json"), "a JSON answer, not an empty 400"
    error = json.loads(long.body)["error"]
    assert error["code"] == "uri_too_long"
    assert "8192" in error["message"]
    assert (await fetch("GET", url + "x" * 60_000)).status == 414, "far past it too"


async def test_a_body_over_the_configured_limit_is_refused_with_413(http_host: RunningHost) -> None:
    assert (await fetch("POST", f"{http_host.base_url}/api/echo/big", data=b"x" * 1025)).status == 413
    assert (await fetch("POST", f"{http_host.base_url}/api/echo/fits", data=b"x" * 1024)).status == 201


async def test_an_exception_is_a_500_and_logged_with_the_apps_traceback(http_host: RunningHost) -> None:
    assert (await fetch("GET", f"{http_host.base_url}/api/boom")).status == 500
    log = http_host.wait_for_log("Exception while executing function: Functions.boom. RuntimeError: boom on purpose")
    assert "Executed 'Functions.boom' (Failed" in log
    assert 'function_app.py", line' in log
    assert 'raise RuntimeError("boom on purpose")' in log


async def test_function_timeout_cancels_an_async_invocation(http_host: RunningHost) -> None:
    assert (await fetch("GET", f"{http_host.base_url}/api/slow/10?tag=t1")).status == 500
    log = http_host.wait_for_log("Executed 'Functions.slow' (Failed")
    assert "Timeout value of 00:00:02 exceeded by function 'Functions.slow'" in log
    assert (http_host.markers / "slow-t1").read_text() == "cancelled"


async def test_function_timeout_stops_waiting_for_a_sync_invocation_and_says_its_thread_runs_on(
    http_host: RunningHost,
) -> None:
    assert (await fetch("GET", f"{http_host.base_url}/api/slow-sync/3?tag=t2")).status == 500
    log = http_host.wait_for_log("Timeout value of 00:00:02 exceeded by function 'Functions.slow_sync'")
    assert "its thread cannot be stopped and runs on" in log
    assert not (http_host.markers / "slow-sync-t2").exists()
    await asyncio.sleep(1.5)
    assert (http_host.markers / "slow-sync-t2").read_text() == "finished"


async def test_sync_functions_run_concurrently_on_the_thread_pool(http_host: RunningHost) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    replies = await asyncio.gather(*(fetch("GET", f"{http_host.base_url}/api/slow-sync/1?tag=c{i}") for i in range(4)))
    assert [r.status for r in replies] == [200] * 4
    assert loop.time() - started < 1.9


async def test_the_admin_status_endpoint_reports_running(http_host: RunningHost) -> None:
    reply = await fetch("GET", f"{http_host.base_url}/admin/host/status")
    assert reply.status == 200
    assert json.loads(reply.body)["state"] == "Running"


def test_the_start_banner_lists_urls_and_says_auth_is_not_enforced(http_host: RunningHost) -> None:
    log = http_host.log()
    assert f"echo: [POST,PUT] {http_host.base_url}/api/echo/{{name}}" in log
    assert f"item: [GET] {http_host.base_url}/api/items/{{id:int}}" in log
    assert "Auth levels (function, admin) are not enforced by the local host" in log


async def test_a_function_timeout_ends_every_invocation_in_flight_as_the_real_hosts_worker_restart_does(
    http_host: RunningHost,
) -> None:
    """The real host restarts the language worker when a function times out, which ends every invocation in
    flight. One invocation that will time out (2 s) and one, started a second later, that would have finished
    at 3.5 s: both end at the timeout."""
    first = asyncio.create_task(fetch("GET", f"{http_host.base_url}/api/slow/10?tag=r1"))
    await asyncio.sleep(1.0)
    second = asyncio.create_task(fetch("GET", f"{http_host.base_url}/api/slow/2.5?tag=r2"))
    answers = await asyncio.gather(first, second)

    assert [a.status for a in answers] == [500, 500]
    log = http_host.wait_for_log("Restarting the language worker")
    assert "ending 1 other invocation(s) in flight" in log
    assert (http_host.markers / "slow-r1").read_text() == "cancelled"
    assert (http_host.markers / "slow-r2").read_text() == "cancelled", "ended with the worker, not finished"


async def test_a_function_that_blocks_the_event_loop_is_named_in_the_log_with_how_long(http_host: RunningHost) -> None:
    """The local host runs the app in its own loop; its loop watch logs a block past 100 ms with the figure."""
    fine = await fetch("GET", f"{http_host.base_url}/api/block/0.01")
    blocked = await fetch("GET", f"{http_host.base_url}/api/block/0.4")

    assert (fine.status, blocked.status) == (200, 200)
    log = http_host.wait_for_log("The event loop was blocked for")
    figures = [int(ms) for ms in re.findall(r"The event loop was blocked for (\d+) ms", log)]
    assert any(300 <= ms <= 2000 for ms in figures), figures


async def test_the_loop_watch_tells_computing_on_the_loop_from_waiting_on_it(http_host: RunningHost) -> None:
    """The figure after the delay is the loop thread's CPU time within it: 0.4 s of computing shows there (at
    least 0.3 s, however busy the machine), 0.4 s of a blocking sleep does not."""
    ran = re.compile(r"The event loop was blocked for (\d+) ms \(more than \d+ ms\); its thread ran for (\d+) ms")
    seen = len(ran.findall(http_host.log()))
    slept = await fetch("GET", f"{http_host.base_url}/api/block/0.4")
    spun = await fetch("GET", f"{http_host.base_url}/api/spin/0.4")

    assert (slept.status, spun.status) == (200, 200)
    log = http_host.wait_for_log("its thread ran for", count=seen + 2)
    figures = [(int(wall), int(cpu)) for wall, cpu in ran.findall(log)[seen:]]
    assert any(wall >= 300 and cpu < 100 for wall, cpu in figures), f"the sleep: {figures}"
    assert any(wall >= 300 and cpu >= 300 for wall, cpu in figures), f"the spin: {figures}"
