"""The resequencer on its own: a client's repeated delivery-id renumbered, and given back in dispositions."""

from __future__ import annotations

import struct

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from proton import Data, Described, uint, ulong

from emulators.servicebus.frames import Resequencer
from tests.servicebus.sdk import take

BEGIN, TRANSFER, DISPOSITION = 0x11, 0x14, 0x15
ACCEPTED = Described(ulong(0x24), [])


def frame(channel: int, code: int, fields: list[object], payload: bytes = b"") -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = data.encode()
    return struct.pack(">IBBH", 8 + len(body) + len(payload), 2, 0, channel) + body + payload


def frames(stream: bytes) -> list[tuple[int, list[object], bytes]]:
    """(code, fields, payload) of each frame in a byte stream."""
    out = []
    while stream:
        size = int.from_bytes(stream[:4], "big")
        data = Data()
        body = stream[8:size]
        used = data.decode(body)
        described = data.get_object()
        out.append((int(described.descriptor), list(described.value), body[used:]))
        stream = stream[size:]
    return out


def transfer(delivery_id: int, payload: bytes, *, more: bool = False) -> bytes:
    return frame(0, TRANSFER, [uint(0), uint(delivery_id), b"tag", uint(0), False, more], payload)


def test_a_repeated_delivery_id_is_renumbered_and_the_client_gets_its_own_back_when_settled() -> None:
    wire = Resequencer()
    sent = frame(0, BEGIN, [None, uint(0), uint(100), uint(100)])
    sent += transfer(0, b"a") + transfer(1, b"b") + transfer(1, b"c") + transfer(3, b"d1", more=True)
    sent += transfer(3, b"d2")
    seen = frames(wire.incoming(sent)[len(frame(0, BEGIN, [None, uint(0), uint(100), uint(100)])) :])
    assert [(fields[1], payload) for _, fields, payload in seen] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (3, b"d1"),
        (3, b"d2"),
    ]

    our_begin = frame(5, BEGIN, [uint(0), uint(0), uint(100), uint(100)])
    settle_all = frame(5, DISPOSITION, [True, uint(0), uint(3), True, ACCEPTED])
    answered = frames(wire.outgoing(our_begin + settle_all))[1:]
    assert [(fields[1], fields[2]) for _, fields, _ in answered] == [(0, 1), (1, 1), (3, 3)]
    assert all(fields[0] is True and fields[3] is True for _, fields, _ in answered)

    again = frames(wire.outgoing(frame(5, DISPOSITION, [True, uint(2), uint(2), True, ACCEPTED])))
    assert [(fields[1], fields[2]) for _, fields, _ in again] == [(2, 2)]  # settled once: forgotten


def test_bytes_that_are_not_frames_pass_through_for_proton_to_judge() -> None:
    wire = Resequencer()
    junk = b"\x7f\xff\xff\xf0\x02\x00\x00\x00" + b"\x00" * 8
    assert wire.incoming(junk) == junk
    assert wire.incoming(b"more") == b"more"


def test_a_batch_in_one_frame_larger_than_protons_input_buffer_is_accepted(client: ServiceBusClient) -> None:
    # 400 small messages: one transfer frame of about 30 KB, more than proton takes in one push.
    with client.get_queue_sender("one-big-frame") as sender:
        sender.send_messages([ServiceBusMessage(f"message: {i}") for i in range(400)], timeout=20)
    with client.get_queue_receiver("one-big-frame", prefetch_count=400) as receiver:
        assert len(take(receiver, 400)) == 400
