"""Completion notices' pure parts: the signature a Standard Webhooks library accepts, the callback URLs a submit
may name, the retry schedule, and the settings that refuse a notice without a secret."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from shared.core import webhooks
from shared.core.errors import SettingsError
from shared.core.settings import Settings
from tests.receiver import new_secret

ORIGINS = frozenset(
    {("https", "hooks.example.com", 443), ("https", "hooks.example.com", 8443), ("http", "127.0.0.1", 9)}
)


def test_a_notice_signed_here_is_verified_by_the_standardwebhooks_package_and_a_changed_body_is_not() -> None:
    secret = new_secret()
    body = webhooks.body({"status": "completed", "batch_id": "b"}, "2026-01-01T00:00:00+00:00")
    headers = webhooks.headers(secret, "msg_b", int(time.time()), body)
    assert Webhook(secret).verify(body, headers)["type"] == "batch.completed"
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"completed", b"cancelled"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/done",
        "https://HOOKS.example.com:8443/x?token=1",
        "http://127.0.0.1:9/h",
        "https://hooks.example.com:443/a%2fb%41?x=1&x=2;y",
    ],
)
def test_allowed_callback_urls_pass_as_given(url: str) -> None:
    assert webhooks.checked_callback_url(url, origins=ORIGINS, allow_http_loopback=True) == url


@pytest.mark.parametrize(
    ("url", "loopback", "says"),
    [
        ("http://hooks.example.com/done", True, "must be https"),
        ("http://127.0.0.1/done", False, "must be https"),
        ("https://other.example.com/done", True, "not one of CALLBACK_ALLOWED_HOSTS"),
        ("https://hooks.example.com.evil.net/", True, "not one of CALLBACK_ALLOWED_HOSTS"),
        ("https://hooks.example.com:22/", True, "origin https://hooks.example.com:22 is not one of"),
        ("http://127.0.0.1:10000/devstoreaccount1", True, "origin http://127.0.0.1:10000 is not one of"),
        ("https://127.0.0.1:9/", True, "origin https://127.0.0.1:9 is not one of"),
        ("https://hooks.example.com/%ZZ", True, "% not followed by two hex digits"),
        ("https://hooks.example.com/a%2", True, "% not followed by two hex digits"),
        ("https://hooks.example.com/a|b", True, "must percent-encode"),
        ("https://hooks.example.com/{x}", True, "must percent-encode"),
        ("https://hooks.example.com", True, "must have a path"),
        ("https://hooks.example.com?x=1", True, "must have a path"),
        ("https://hooks.example.com/#", True, "fragment"),
        ("https://u:p@hooks.example.com/", True, "credentials"),
        ("https://hooks.example.com/#frag", True, "fragment"),
        ("https://hooks.example.com:99999/", True, "not a valid URL"),
        ("https://hooks.example.com/" + "a" * 3000, True, "2048"),
        ("file:///etc/passwd", True, "must be an https URL"),
        ("", True, "printable"),
    ],
)
def test_other_callback_urls_are_refused_saying_why(url: str, loopback: bool, says: str) -> None:
    with pytest.raises(ValueError, match="callback_url") as refused:
        webhooks.checked_callback_url(url, origins=ORIGINS, allow_http_loopback=loopback)
    assert says in str(refused.value)


def test_no_allowed_host_refuses_every_callback() -> None:
    with pytest.raises(ValueError, match="names no host"):
        webhooks.checked_callback_url("https://hooks.example.com/", origins=frozenset(), allow_http_loopback=True)


@given(attempt=st.integers(1, 200), u=st.floats(0, 1, exclude_max=True))
def test_a_retry_waits_between_half_and_all_of_its_doubled_delay_never_past_the_cap(attempt: int, u: float) -> None:
    delay = webhooks.next_delay_s(attempt, base_s=30, max_s=3600, u=u)
    full = min(3600, 30 * 2 ** min(attempt - 1, 40))
    assert full / 2 <= delay <= full


def settings(**values: str) -> Settings:
    environ = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "ServiceBusConnection": "Endpoint=sb://x/;"}
    return Settings.from_env(environ | {"TRIGGER_QUEUE": "t", "FALLBACK_SCHEDULE": "0 * * * * *"} | values)


def test_allowed_hosts_without_a_secret_or_with_a_bad_one_stop_the_app_naming_the_setting() -> None:
    with pytest.raises(SettingsError, match="CALLBACK_SECRET"):
        settings(CALLBACK_ALLOWED_HOSTS="hooks.example.com")
    with pytest.raises(SettingsError, match="CALLBACK_SECRET"):
        settings(CALLBACK_ALLOWED_HOSTS="hooks.example.com", CALLBACK_SECRET="whsec_short")
    with pytest.raises(SettingsError, match="CALLBACK_ALLOWED_HOSTS"):
        settings(CALLBACK_ALLOWED_HOSTS="https://hooks.example.com/", CALLBACK_SECRET=new_secret())
    found = settings(
        CALLBACK_ALLOWED_HOSTS=" Hooks.Example.com , hooks.example.com:8443,http://127.0.0.1:9",
        CALLBACK_ALLOW_HTTP_LOOPBACK="true",
        CALLBACK_SECRET=new_secret(),
    )
    assert found.callback_origins() == ORIGINS


@pytest.mark.parametrize(
    ("hosts", "loopback", "says"),
    [
        ("https://hooks.example.com/x", True, "no path"),
        ("ftp://hooks.example.com", True, "not an origin"),
        ("hooks.example.com:99999", True, "not an origin"),
        ("http://hooks.example.com", True, "plain http only to loopback"),
        ("http://127.0.0.1:9", False, "CALLBACK_ALLOW_HTTP_LOOPBACK"),
        ("u:p@hooks.example.com", True, "credentials"),
    ],
)
def test_an_allowed_origin_that_is_not_one_stops_the_app_naming_the_setting(hosts: str, loopback: bool, says: str):
    with pytest.raises(SettingsError, match="CALLBACK_ALLOWED_HOSTS") as refused:
        settings(CALLBACK_ALLOWED_HOSTS=hosts, CALLBACK_ALLOW_HTTP_LOOPBACK=str(loopback), CALLBACK_SECRET=new_secret())
    assert says in str(refused.value)


def test_an_allowed_host_allows_its_https_port_only_and_host_port_that_port_only() -> None:
    found = settings(CALLBACK_ALLOWED_HOSTS="hooks.example.com,api.example.com:8443", CALLBACK_SECRET=new_secret())
    ok = {"https://hooks.example.com/a", "https://hooks.example.com:443/a", "https://api.example.com:8443/a"}
    refused = {"https://hooks.example.com:8443/a", "https://api.example.com/a", "https://hooks.example.com:22/a"}
    for url in ok | refused:
        try:
            webhooks.checked_callback_url(url, origins=found.callback_origins(), allow_http_loopback=False)
            passed = True
        except ValueError:
            passed = False
        assert passed == (url in ok), url


@given(attempt=st.integers(1, 60), timeouts=st.integers(1, 60), u=st.floats(0, 1, exclude_max=True))
def test_a_wait_after_timeouts_is_four_times_longer_per_timeout_up_to_four_times_the_cap(
    attempt: int, timeouts: int, u: float
) -> None:
    delay = webhooks.next_delay_s(attempt, base_s=30, max_s=3600, u=u, timeouts=timeouts)
    full = min(4 * 3600, 30 * 2 ** min(attempt - 1 + 2 * timeouts, 40))
    assert full / 2 <= delay <= full
    assert delay >= webhooks.next_delay_s(attempt, base_s=30, max_s=3600, u=u)
