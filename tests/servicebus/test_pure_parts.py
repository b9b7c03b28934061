"""Config parsing, SAS token checks and message sections, tested directly."""

from __future__ import annotations

import datetime

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import BatchMessage
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from hypothesis import given
from hypothesis import strategies as st

from emulators.servicebus import codec
from emulators.servicebus.cbs import Grant, put_token, sign_sas_token, verify_sas_token
from emulators.servicebus.config import parse_config, parse_duration_ms
from emulators.servicebus.errors import ConfigError, MessageSizeExceededError, UnauthorizedError
from emulators.servicebus.messages import MessageState, QueueMessage, QueueProperties

KEYS = {"RootManageSharedAccessKey": "SAS_KEY_VALUE"}
NOW_S = 1_700_000_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [("PT1M", 60_000), ("PT0.25S", 250), ("P1DT2H", 93_600_000), ("PT1H30M5S", 5_405_000), ("P2W", 1_209_600_000)],
)
def test_iso_durations_parse_to_milliseconds(text: str, ms: int) -> None:
    assert parse_duration_ms(text, "f") == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "1M", "PT-1S", "PT0S", 60, None])
def test_malformed_or_empty_durations_are_refused_with_the_field_name(text: object) -> None:
    with pytest.raises(ConfigError, match=r"^Queue\.LockDuration: "):
        parse_duration_ms(text, "Queue.LockDuration")


def test_the_sample_config_shape_gives_the_documented_properties_and_defaults() -> None:
    config = parse_config(
        {
            "UserConfig": {
                "Namespaces": [
                    {
                        "Name": "sbemulatorns",
                        "Queues": [
                            {"Name": "full", "Properties": {"MaxDeliveryCount": 3, "LockDuration": "PT5S"}},
                            {"Name": "bare"},
                        ],
                        "Topics": [],
                    }
                ],
                "Logging": {"Type": "File"},
            }
        }
    )
    assert config.name == "sbemulatorns"
    assert config.queues["full"] == QueueProperties(max_delivery_count=3, lock_duration_ms=5_000)
    assert config.queues["bare"] == QueueProperties()
    assert QueueProperties() == QueueProperties(10, 60_000, None, False, False, 600_000)


def test_a_token_signed_with_the_development_key_grants_its_entity_only() -> None:
    token = sign_sas_token("sb://localhost:5672/orders", "RootManageSharedAccessKey", "SAS_KEY_VALUE", NOW_S + 60)
    grant = verify_sas_token(token, NOW_S, KEYS)
    assert grant == Grant("orders", NOW_S + 60)
    assert grant.covers("orders", NOW_S)
    assert grant.covers("orders/$DeadLetterQueue", NOW_S)
    assert not grant.covers("orders-2", NOW_S)
    assert not grant.covers("orders", NOW_S + 60)
    assert Grant("", NOW_S + 60).covers("anything", NOW_S)


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (sign_sas_token("sb://h/q", "RootManageSharedAccessKey", "other-key", NOW_S + 60), "InvalidSignature"),
        (sign_sas_token("sb://h/q", "RootManageSharedAccessKey", "SAS_KEY_VALUE", NOW_S - 1), "ExpiredToken"),
        (sign_sas_token("sb://h/q", "SomeoneElse", "SAS_KEY_VALUE", NOW_S + 60), "Unknown shared access key name"),
        ("Bearer eyJ0eXAi", "Malformed token"),
        ("SharedAccessSignature sr=sb%3A%2F%2Fh%2Fq&se=1", "missing sig, skn"),
    ],
)
def test_bad_tokens_are_refused_with_a_reason(token: str, why: str) -> None:
    with pytest.raises(UnauthorizedError, match=why):
        verify_sas_token(token, NOW_S, KEYS)


def test_put_token_accepts_the_sdk_token_types_only() -> None:
    token = sign_sas_token("sb://h/q", "RootManageSharedAccessKey", "SAS_KEY_VALUE", NOW_S + 60)
    for token_type in ("jwt", "servicebus.windows.net:sastoken"):
        assert put_token({"operation": "put-token", "type": token_type}, token, NOW_S, KEYS).path == "q"
    with pytest.raises(UnauthorizedError):
        put_token({"operation": "put-token", "type": "aad"}, token, NOW_S, KEYS)


def sdk_bytes(message: ServiceBusMessage) -> bytes:
    """What the SDK puts on the wire for one message."""
    out = bytearray()
    encode_payload(out, PyamqpTransport.to_outgoing_amqp_message(message.raw_amqp_message))
    return bytes(out)


def test_an_sdk_batch_is_unpacked_into_its_messages_and_a_single_message_is_not() -> None:
    batch = ServiceBusMessageBatch(max_size_in_bytes=256 * 1024)
    for i in range(3):
        batch.add_message(ServiceBusMessage(f"b{i}", message_id=f"id{i}"))
    out = bytearray()
    encode_payload(out, BatchMessage(*batch._message))
    members = codec.parse_transfer(bytes(out))
    assert [m.message_id for m in members] == ["id0", "id1", "id2"]
    single = sdk_bytes(ServiceBusMessage(b"\x00Su\xa0\x01x"))  # a body that looks like a data section
    assert len(codec.parse_transfer(single)) == 1


def test_ttl_schedule_and_message_id_are_read_from_the_sdk_encoding() -> None:
    message = ServiceBusMessage("x", message_id="m-1", time_to_live=datetime.timedelta(seconds=90))
    message.scheduled_enqueue_time_utc = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    [incoming] = codec.parse_transfer(sdk_bytes(message))
    assert (incoming.message_id, incoming.ttl_ms) == ("m-1", 90_000)
    assert incoming.scheduled_ms == 1_893_456_000_000


def test_a_transfer_over_256_kb_is_refused() -> None:
    with pytest.raises(MessageSizeExceededError):
        codec.parse_transfer(sdk_bytes(ServiceBusMessage(b"x" * 262_145)))


@given(
    body=st.binary(max_size=2_000),
    properties=st.dictionaries(
        st.text(min_size=1, max_size=10), st.integers(-(2**31), 2**31 - 1) | st.text(max_size=20), max_size=5
    ),
    count=st.integers(min_value=0, max_value=50),
)
def test_rendering_keeps_body_and_properties_and_writes_the_broker_fields(
    body: bytes, properties: dict[str, object], count: int
) -> None:
    from azure.servicebus._pyamqp._decode import decode_payload

    payload = sdk_bytes(ServiceBusMessage(body, application_properties=properties or None))
    stored = QueueMessage(7, payload, 1_000, delivery_count=count, locked_until_ms=2_000, state=MessageState.DEFERRED)
    decoded = decode_payload(memoryview(codec.render(stored)))
    assert b"".join(decoded.data) == body
    assert decoded.header.delivery_count == count  # written even when zero
    annotations = decoded.message_annotations
    assert annotations[b"x-opt-sequence-number"] == 7
    assert annotations[b"x-opt-enqueued-time"] == 1_000
    assert annotations[b"x-opt-locked-until"] == 2_000
    assert annotations[b"x-opt-message-state"] == 1
    if properties:
        assert {
            k.decode(): v.decode() if isinstance(v, bytes) else v for k, v in decoded.application_properties.items()
        } == properties
