"""AMQP 1.0 message sections: split what a client sent, rebuild what the broker delivers.

The stored form of a message is the client's encoded bytes. Only the header (delivery count) and the
message annotations (sequence number, times, state) are rewritten on the way out; properties, application
properties and the body travel byte for byte, so nothing is lost to a decode/encode round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proton import Data, DataException, Described, int32, symbol, timestamp, ubyte, uint, ulong

from emulators.servicebus.errors import BadRequestError, MessageSizeExceededError
from emulators.servicebus.messages import QueueMessage

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78
_BODY = (DATA, AMQP_SEQUENCE, AMQP_VALUE)
_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}

# Standard-tier limit; the SDK sizes its batches by the max-message-size the broker announces on attach.
MAX_MESSAGE_BYTES = 256 * 1024

X_OPT_SEQUENCE_NUMBER = symbol("x-opt-sequence-number")
X_OPT_ENQUEUED_TIME = symbol("x-opt-enqueued-time")
X_OPT_LOCKED_UNTIL = symbol("x-opt-locked-until")
X_OPT_MESSAGE_STATE = symbol("x-opt-message-state")
X_OPT_SCHEDULED_ENQUEUE_TIME = symbol("x-opt-scheduled-enqueue-time")
X_OPT_LOCK_TOKEN = symbol("x-opt-lock-token")  # delivery annotation: the lock token, as Service Bus sends it
_BROKER_OWNED = {X_OPT_SEQUENCE_NUMBER, X_OPT_ENQUEUED_TIME, X_OPT_LOCKED_UNTIL, X_OPT_MESSAGE_STATE}


class MalformedMessageError(BadRequestError):
    """Raised when a transfer's payload is not a sequence of AMQP message sections."""

    condition = "amqp:decode-error"


@dataclass(frozen=True)
class Section:
    """One message section as raw bytes; only the small sections the broker reads are ever decoded."""

    code: int
    raw: bytes

    def value(self) -> object:
        data = Data()
        try:
            data.decode(self.raw)
            described = data.get_object()
        except (DataException, ValueError, TypeError, KeyError) as e:
            raise MalformedMessageError(f"undecodable message section 0x{self.code:02x}: {e}") from e
        return owned(described.value) if isinstance(described, Described) else None

    def binary(self) -> bytes:
        """The bytes of a data section, sliced out without decoding (bodies can be large)."""
        start = value_end(memoryview(self.raw), 1)  # past the descriptor
        constructor = self.raw[start]
        if constructor == 0xA0:
            return self.raw[start + 2 :]
        if constructor == 0xB0:
            return self.raw[start + 5 :]
        raise MalformedMessageError("a data section must hold binary")


@dataclass(frozen=True)
class IncomingMessage:
    """One message as a client sent it, with the fields the broker acts on."""

    payload: bytes
    message_id: str | None
    ttl_ms: int | None
    scheduled_ms: int | None


def split_sections(payload: bytes) -> list[Section]:
    """Cut a message into its sections by walking the AMQP type constructors (no values are decoded)."""
    sections: list[Section] = []
    view = memoryview(payload)
    offset = 0
    while offset < len(payload):
        if payload[offset] != 0x00:
            raise MalformedMessageError(f"byte {offset} does not start an AMQP message section")
        end = value_end(view, offset)
        sections.append(Section(_section_code(view, offset + 1), payload[offset:end]))
        offset = end
    return sections


# Width of the value after a fixed-width constructor, by the constructor's high nibble (AMQP 1.0, 1.2).
_FIXED_WIDTH = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}
# Width of the size field of a variable-width, compound or array constructor, by high nibble.
_SIZE_WIDTH = {0xA: 1, 0xB: 4, 0xC: 1, 0xD: 4, 0xE: 1, 0xF: 4}


def value_end(view: memoryview, offset: int) -> int:
    """The offset just past the encoded value that starts at `offset`."""
    if offset >= len(view):
        raise MalformedMessageError(f"the message ends inside a value at byte {offset}")
    constructor = view[offset]
    if constructor == 0x00:  # described: a descriptor value, then the value
        return value_end(view, value_end(view, offset + 1))
    nibble = constructor >> 4
    if nibble in _FIXED_WIDTH:
        end = offset + 1 + _FIXED_WIDTH[nibble]
    elif nibble in _SIZE_WIDTH:
        width = _SIZE_WIDTH[nibble]
        if offset + 1 + width > len(view):
            raise MalformedMessageError(f"the message ends inside a size field at byte {offset}")
        size = int.from_bytes(view[offset + 1 : offset + 1 + width], "big")
        end = offset + 1 + width + size
    else:
        raise MalformedMessageError(f"0x{constructor:02x} at byte {offset} is not an AMQP type constructor")
    if end > len(view):
        raise MalformedMessageError(f"the value at byte {offset} runs past the end of the message")
    return end


def _section_code(view: memoryview, offset: int) -> int:
    """The section a descriptor names: 0x53 nn (small ulong), 0x80 (ulong) or a symbol such as amqp:data:binary."""
    constructor = view[offset]
    end = value_end(view, offset)
    if constructor == 0x53:
        code = view[offset + 1]
    elif constructor == 0x80:
        code = int.from_bytes(view[offset + 1 : end], "big")
    elif constructor in (0xA3, 0xB3):
        width = 1 if constructor == 0xA3 else 4
        code = _SYMBOLIC.get(bytes(view[offset + 1 + width : end]).decode("ascii", "replace"), 0)
    else:
        code = 0
    if not HEADER <= code <= FOOTER:
        raise MalformedMessageError(f"the section at byte {offset - 1} has an unknown descriptor")
    return code


def owned(value: object) -> object:
    """Copy binaries out of proton's buffer, which is freed with the `Data` that decoded them."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [owned(item) for item in value]
    if isinstance(value, dict):
        return {owned(key): owned(item) for key, item in value.items()}
    return value


def parse_transfer(payload: bytes) -> list[IncomingMessage]:
    """The messages in one transfer: an SDK batch (data sections that are whole messages) or a single message."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise MessageSizeExceededError(
            f"The message size {len(payload)} bytes exceeds the maximum of {MAX_MESSAGE_BYTES} bytes."
        )
    sections = split_sections(payload)
    inner = _batch_members(sections)
    if inner is not None:
        return [_incoming(raw, split_sections(raw)) for raw in inner]
    return [_incoming(payload, sections)]


def parse_message(payload: bytes) -> IncomingMessage:
    return _incoming(payload, split_sections(payload))


def _batch_members(sections: Sequence[Section]) -> list[bytes] | None:
    """Unpack an SDK batch (message format 0x80013700, which proton does not expose) by its shape.

    The SDK's batch envelope has no header, application properties or value body, and each data section
    holds one complete encoded message. A single message whose body is itself an encoded AMQP message with
    no header would look the same; no SDK client sends that.
    """
    codes = {section.code for section in sections}
    if codes & {HEADER, APPLICATION_PROPERTIES, AMQP_VALUE, AMQP_SEQUENCE} or DATA not in codes:
        return None
    members = [section.binary() for section in sections if section.code == DATA]
    return members if all(_is_whole_message(member) for member in members) else None


def _is_whole_message(payload: bytes) -> bool:
    """Sections in AMQP's order with a body; the SDK writes delivery annotations last, so they may be anywhere."""
    try:
        codes = [section.code for section in split_sections(payload)]
    except MalformedMessageError:
        return False
    ordered = [code for code in codes if code != DELIVERY_ANNOTATIONS]
    return (
        ordered == sorted(ordered) and codes.count(DELIVERY_ANNOTATIONS) <= 1 and any(code in _BODY for code in codes)
    )


def _incoming(payload: bytes, sections: Sequence[Section]) -> IncomingMessage:
    header = _section_list(sections, HEADER)
    properties = _section_list(sections, PROPERTIES)
    annotations = _section_map(sections, MESSAGE_ANNOTATIONS)
    ttl = header[2] if len(header) > 2 else None
    message_id = properties[0] if properties else None
    scheduled = annotations.get(X_OPT_SCHEDULED_ENQUEUE_TIME)
    return IncomingMessage(
        payload=payload,
        message_id=None if message_id is None else _message_id_text(message_id),
        ttl_ms=int(ttl) if isinstance(ttl, int) and ttl > 0 else None,
        scheduled_ms=int(scheduled) if isinstance(scheduled, int) and not isinstance(scheduled, bool) else None,
    )


def _message_id_text(message_id: object) -> str:
    if isinstance(message_id, bytes):
        return message_id.hex()
    return str(message_id)


def _section_list(sections: Sequence[Section], code: int) -> list[object]:
    for section in sections:
        if section.code == code:
            value = section.value()
            return value if isinstance(value, list) else []
    return []


def _section_map(sections: Sequence[Section], code: int) -> dict[object, object]:
    for section in sections:
        if section.code == code:
            value = section.value()
            return value if isinstance(value, dict) else {}
    return {}


def render(message: QueueMessage, *, peek: bool = False) -> bytes:
    """The stored message as the broker hands it out: fresh header and broker annotations, the rest verbatim.

    Delivery annotations keep what the sender set, plus `x-opt-lock-token` on a locked delivery (not on a peek).
    """
    sections = split_sections(message.payload)
    out = [_encode_header(_section_list(sections, HEADER), message.delivery_count)]
    delivery_annotations = _section_map(sections, DELIVERY_ANNOTATIONS)
    if message.lock_token is not None and not peek:
        delivery_annotations[X_OPT_LOCK_TOKEN] = message.lock_token
    if delivery_annotations:
        out.append(_encode_section(DELIVERY_ANNOTATIONS, delivery_annotations))
    out.append(_encode_section(MESSAGE_ANNOTATIONS, _annotations(_section_map(sections, MESSAGE_ANNOTATIONS), message)))
    out += [section.raw for section in sections if section.code == PROPERTIES]
    if message.dead_letter_reason is not None or message.dead_letter_description is not None:
        out.append(_encode_section(APPLICATION_PROPERTIES, _dead_letter_properties(sections, message)))
    else:
        out += [section.raw for section in sections if section.code == APPLICATION_PROPERTIES]
    out += [section.raw for section in sections if section.code in _BODY or section.code == FOOTER]
    return b"".join(out)


def _encode_header(header: list[object], delivery_count: int) -> bytes:
    # Written in full: proton leaves out a zero delivery-count, which the SDK then reports as None.
    durable = header[0] if len(header) > 0 and isinstance(header[0], bool) else False
    priority = header[1] if len(header) > 1 and isinstance(header[1], int) else 4
    ttl = header[2] if len(header) > 2 and isinstance(header[2], int) else None
    fields = [durable, ubyte(priority), None if ttl is None else uint(ttl), delivery_count == 0, uint(delivery_count)]
    return _encode_section(HEADER, fields)


def _annotations(original: Mapping[object, object], message: QueueMessage) -> dict[object, object]:
    merged = {key: value for key, value in original.items() if key not in _BROKER_OWNED}
    merged[X_OPT_SEQUENCE_NUMBER] = message.sequence_number
    merged[X_OPT_ENQUEUED_TIME] = timestamp(message.enqueued_ms)
    merged[X_OPT_MESSAGE_STATE] = int32(int(message.state))
    if message.locked_until_ms is not None:
        merged[X_OPT_LOCKED_UNTIL] = timestamp(message.locked_until_ms)
    return merged


def _dead_letter_properties(sections: Sequence[Section], message: QueueMessage) -> dict[object, object]:
    properties = dict(_section_map(sections, APPLICATION_PROPERTIES))
    if message.dead_letter_reason is not None:
        properties["DeadLetterReason"] = message.dead_letter_reason
    if message.dead_letter_description is not None:
        properties["DeadLetterErrorDescription"] = message.dead_letter_description
    return properties


def _encode_section(code: int, value: Any) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), value))
    return data.encode()
