"""Delivery-ids as Service Bus takes them: renumber a client's transfers before proton checks their order.

AMQP numbers the transfers of a session 0, 1, 2, ... and proton closes the whole connection on any other
order (`amqp:session:invalid-field: sequencing error`). The SDK (7.15, sync and aio) takes the next number and
counts on only after writing the frame, without a lock, so threads or tasks sending at once on one session
(several `$management` requests on one receiver, an `AutoLockRenewer` with many workers, a publisher
scheduling and cancelling at once) send one number twice and skip the next. Service Bus accepts such
transfers; so does the stand-in, by renumbering them here in the byte stream before proton reads it, and
by giving the client its own numbers back in the dispositions that settle them.

Everything else passes through byte for byte. Dispositions a client sends about its own transfers (it
settles them itself only when sending pre-settled, where no number needs mapping) are not rewritten.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from emulators.servicebus.codec import MalformedMessageError, value_end

_FRAME_HEADER = struct.Struct(">IBBH")  # size, data offset (in 4-byte words), type, channel
_PROTOCOL_HEADER = b"AMQP"
_AMQP_FRAME = 0
_BEGIN, _TRANSFER, _DISPOSITION, _END = 0x11, 0x14, 0x15, 0x17
_SERIAL = 1 << 32  # delivery-ids are RFC 1982 serial numbers
MAX_FRAME_BYTES = 1 << 20  # larger than any frame a client of a 256 KB broker sends: proton judges it as it is
MAX_REMEMBERED = 10_000  # renumbered deliveries remembered per session until the broker settles them


@dataclass
class _Session:
    """One client session as proton sees it: the next delivery-id it expects, and what was renumbered."""

    next_id: int
    in_progress: dict[int, int] = field(default_factory=dict)  # link handle -> id of a multi-frame transfer
    client_ids: dict[int, int] = field(default_factory=dict)  # our delivery-id -> the one the client sent


class _Frames:
    """Cuts a byte stream into protocol headers and whole frames; keeps an unfinished frame for later."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while True:
            if self._buffer[:4] == _PROTOCOL_HEADER:
                size = 8
            elif len(self._buffer) >= 4:
                size = int.from_bytes(self._buffer[:4], "big")
                if not _FRAME_HEADER.size <= size <= MAX_FRAME_BYTES:
                    raise MalformedMessageError(f"a frame of {size} bytes is not one the stand-in reads")
            else:
                return
            if len(self._buffer) < size:
                return
            chunk = bytes(self._buffer[:size])
            del self._buffer[:size]
            yield chunk

    def drain(self) -> bytes:
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest


@dataclass(frozen=True)
class _Performative:
    """A frame's performative: where its list's fields are, so one field can be swapped."""

    frame: bytes
    code: int
    fields: list[tuple[int, int]]  # (start, end) of each encoded field
    list_end: int

    def raw(self, index: int) -> bytes | None:
        if index >= len(self.fields):
            return None
        start, end = self.fields[index]
        return self.frame[start:end]

    def uint(self, index: int) -> int | None:
        return _decode_uint(self.raw(index))

    def flag(self, index: int) -> bool:
        raw = self.raw(index)
        return raw == b"\x41" or raw == b"\x56\x01"

    def with_fields(self, replacements: dict[int, bytes]) -> bytes:
        """The same frame with some fields replaced (the list re-encoded as list32, the payload kept)."""
        count = max(len(self.fields), max(replacements) + 1)
        encoded = [replacements.get(i, self.raw(i) or b"\x40") for i in range(count)]
        body = b"".join(encoded)
        performative = b"\x00\x53" + bytes([self.code]) + b"\xd0" + struct.pack(">II", len(body) + 4, count) + body
        _, doff, frame_type, channel = _FRAME_HEADER.unpack_from(self.frame)
        extended = self.frame[_FRAME_HEADER.size : doff * 4]
        payload = self.frame[self.list_end :]
        size = doff * 4 + len(performative) + len(payload)
        return _FRAME_HEADER.pack(size, doff, frame_type, channel) + extended + performative + payload


def _performative(frame: bytes) -> _Performative | None:
    """The performative of an AMQP frame, or None for protocol headers, SASL frames and heartbeats."""
    if len(frame) <= _FRAME_HEADER.size or frame[:4] == _PROTOCOL_HEADER:
        return None
    _, doff, frame_type, _ = _FRAME_HEADER.unpack_from(frame)
    start = doff * 4
    if frame_type != _AMQP_FRAME or frame[start : start + 2] != b"\x00\x53" or len(frame) < start + 4:
        return None
    code, view, at = frame[start + 2], memoryview(frame), start + 3
    constructor = frame[at]
    if constructor == 0x45:  # list0
        return _Performative(frame, code, [], at + 1)
    if constructor not in (0xC0, 0xD0):
        return None
    width = 1 if constructor == 0xC0 else 4
    end = value_end(view, at)
    count = int.from_bytes(frame[at + 1 + width : at + 1 + 2 * width], "big")
    offset, fields = at + 1 + 2 * width, []
    for _ in range(count):
        next_offset = value_end(view, offset)
        fields.append((offset, next_offset))
        offset = next_offset
    return _Performative(frame, code, fields, end)


def _decode_uint(raw: bytes | None) -> int | None:
    if raw is None or raw == b"\x40":
        return None
    if raw == b"\x43":
        return 0
    if raw[0] in (0x52, 0x70):
        return int.from_bytes(raw[1:], "big")
    return None


def _uint(value: int) -> bytes:
    return b"\x70" + value.to_bytes(4, "big")


class Resequencer:
    """One connection's byte streams: `incoming` before proton reads them, `outgoing` after it writes them."""

    def __init__(self) -> None:
        self._incoming, self._outgoing = _Frames(), _Frames()
        self._sessions: dict[int, _Session] = {}  # by the client's channel number
        self._client_channel: dict[int, int] = {}  # our channel -> the client's

        self._passthrough = False  # after bytes that are not AMQP frames: proton reports what is wrong

    def incoming(self, data: bytes) -> bytes:
        if self._passthrough:
            return data
        out: list[bytes] = []
        try:
            for frame in self._incoming.feed(data):
                out.append(self._rewritten(self._from_client, frame))
        except MalformedMessageError:
            self._passthrough = True
            out.append(self._incoming.drain())
        return b"".join(out)

    def outgoing(self, data: bytes) -> bytes:
        if self._passthrough:
            return self._outgoing.drain() + data
        out: list[bytes] = []
        try:
            for frame in self._outgoing.feed(data):
                out.append(self._rewritten(self._to_client, frame))
        except MalformedMessageError:
            out.append(self._outgoing.drain())
        return b"".join(out)

    @staticmethod
    def _rewritten(rewrite: Callable[[bytes], bytes], frame: bytes) -> bytes:
        try:
            return rewrite(frame)
        except (MalformedMessageError, IndexError, ValueError):
            return frame  # not ours to judge: proton reads it as it is

    def _from_client(self, frame: bytes) -> bytes:
        performative = _performative(frame)
        if performative is None:
            return frame
        channel = _FRAME_HEADER.unpack_from(frame)[3]
        if performative.code == _BEGIN:
            self._sessions[channel] = _Session(performative.uint(1) or 0)
        elif performative.code == _END:
            self._sessions.pop(channel, None)
        elif performative.code == _TRANSFER and channel in self._sessions:
            return self._renumber(self._sessions[channel], performative)
        return frame

    def _renumber(self, session: _Session, transfer: _Performative) -> bytes:
        handle, sent_id = transfer.uint(0), transfer.uint(1)
        if handle is None:
            return transfer.frame
        ours = session.in_progress.get(handle)
        first_frame = ours is None
        if ours is None:
            if sent_id is None:
                return transfer.frame  # a first frame without an id: let proton refuse it
            ours = session.next_id
            session.next_id = (session.next_id + 1) % _SERIAL
        if transfer.flag(5) and not transfer.flag(8):  # more, and not aborted
            session.in_progress[handle] = ours
        else:
            session.in_progress.pop(handle, None)
        if sent_id is None or sent_id == ours:
            return transfer.frame
        if first_frame:
            if len(session.client_ids) >= MAX_REMEMBERED:
                session.client_ids.pop(next(iter(session.client_ids)))
            session.client_ids[ours] = sent_id
        return transfer.with_fields({1: _uint(ours)})

    def _to_client(self, frame: bytes) -> bytes:
        performative = _performative(frame)
        if performative is None:
            return frame
        channel = _FRAME_HEADER.unpack_from(frame)[3]
        if performative.code == _BEGIN:
            client_channel = performative.uint(0)
            if client_channel is not None:
                self._client_channel[channel] = client_channel
        elif performative.code == _END:
            self._client_channel.pop(channel, None)
        elif performative.code == _DISPOSITION and performative.flag(0):  # role: receiver (of the client's sends)
            session = self._sessions.get(self._client_channel.get(channel, -1))
            if session is not None and session.client_ids:
                return self._restore_ids(session, performative)
        return frame

    def _restore_ids(self, session: _Session, disposition: _Performative) -> bytes:
        """Our disposition of deliveries we renumbered, one frame each with the client's own delivery-id."""
        first = disposition.uint(1)
        if first is None:
            return disposition.frame
        last = disposition.uint(2)
        count = 1 if last is None else (last - first) % _SERIAL + 1
        settled = disposition.flag(3)
        frames: list[bytes] = []
        run_start: int | None = None
        for step in range(count + 1):
            ours = (first + step) % _SERIAL
            client_id = session.client_ids.get(ours) if step < count else None
            if step < count and client_id is None:
                run_start = ours if run_start is None else run_start
                continue
            if run_start is not None:  # ids we never renumbered, kept as one range
                frames.append(disposition.with_fields({1: _uint(run_start), 2: _uint((ours - 1) % _SERIAL)}))
                run_start = None
            if client_id is not None:
                frames.append(disposition.with_fields({1: _uint(client_id), 2: _uint(client_id)}))
                if settled:
                    del session.client_ids[ours]
        return b"".join(frames)
