"""Adjustments to proton's Python socket layer so one broker takes many connections at once and survives
running out of file descriptors.

proton's reactor (0.40) waits in `select.select`, which refuses descriptors from 1024 up: one connection too
many and the whole broker would stop with "filedescriptor out of range". It listens with a backlog of 10, so a
burst of clients sees SYNs dropped and one-second retries. And a failed `accept()` (EMFILE) escapes its event
loop. `install()` swaps in the same contracts over `select.poll` and a `SOMAXCONN` backlog, and raises the
process's descriptor limit to its hard limit; `SteadyAcceptor` pauses listening instead of dying.

`install()` also puts a `frames.Resequencer` between each socket and its transport (proton's I/O handler
moves the bytes in Python): what a client sends is renumbered before proton reads it, and what proton
writes passes through an output buffer of the connection's own, so a rewritten frame may change length.
"""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import select
import socket
from collections.abc import Iterable
from typing import Any, Protocol

from proton import Event, Handler, ProtonException, Transport, _io  # _io: the reactor's own I/O helper
from proton._handlers import IOHandler  # the reactor moves socket bytes here; nothing public covers these
from proton._reactor import Acceptor, Container
from proton._selectable import Selectable

from emulators.servicebus.codec import MalformedMessageError
from emulators.servicebus.frames import Resequencer

log = logging.getLogger(__name__)

ACCEPT_PAUSE_S = 0.5  # how long to stop accepting after accept() failed (out of descriptors)

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


def poll_select(
    readers: Iterable[_HasFileno],
    writers: Iterable[_HasFileno],
    errors: Iterable[_HasFileno],
    timeout: float | None = None,
) -> tuple[list[Any], list[Any], list[Any]]:
    """`select.select(readers, writers, errors, timeout)` for any number of descriptors.

    A hang-up or error counts as readable and writable, so the reactor reads the EOF and closes the socket.
    """
    wanted: dict[int, int] = {}
    objects: dict[int, _HasFileno] = {}
    for obj in readers:
        objects[obj.fileno()] = obj
        wanted[obj.fileno()] = wanted.get(obj.fileno(), 0) | select.POLLIN | select.POLLPRI
    for obj in (*writers, *errors):
        objects[obj.fileno()] = obj
        wanted[obj.fileno()] = wanted.get(obj.fileno(), 0) | select.POLLOUT
    poller = select.poll()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    # Round up: a wait shorter than the deadline would only spin.
    ready = poller.poll(None if timeout is None else math.ceil(max(0.0, timeout) * 1000))
    readable = [objects[fd] for fd, happened in ready if happened & _READABLE and wanted[fd] & select.POLLIN]
    writable = [objects[fd] for fd, happened in ready if happened & _WRITABLE and wanted[fd] & select.POLLOUT]
    return readable, writable, []


def listen(host: str, port: int) -> socket.socket:
    """proton's `IO.listen` with a real backlog."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(socket.SOMAXCONN)
    return sock


class _Wire:
    """One connection's resequencer and the bytes on their way: rewritten for proton, or for the socket."""

    def __init__(self) -> None:
        self.resequencer = Resequencer()
        self.to_proton = bytearray()
        self.to_socket = bytearray()


def _wire(selectable: Selectable) -> _Wire:
    wire: _Wire | None = getattr(selectable, "_standin_wire", None)
    if wire is None:
        wire = _Wire()
        selectable._standin_wire = wire  # type: ignore[attr-defined]
    return wire


def _feed_proton(transport: Transport, wire: _Wire) -> None:
    """Push what proton has room for; it reads each push at once, so go on until it is all in or proton is full.

    Nothing else would come back for the rest: no more bytes may arrive on the socket to wake us.
    """
    while wire.to_proton:
        capacity = transport.capacity()
        if capacity <= 0:
            return
        chunk = bytes(wire.to_proton[:capacity])
        transport.push(chunk)
        del wire.to_proton[: len(chunk)]


def _flush(selectable: Selectable, wire: _Wire) -> None:
    if wire.to_socket:
        sent = selectable.send(bytes(wire.to_socket))
        del wire.to_socket[:sent]


def _on_readable(self: IOHandler, event: Event) -> None:
    """proton's `on_selectable_readable`, with the client's bytes renumbered on their way in."""
    selectable = event.selectable
    transport = selectable._transport
    if not transport:
        return
    wire = _wire(selectable)
    if transport.capacity() > 0:
        try:
            data = selectable.recv(transport.capacity())
            if data:
                wire.to_proton += wire.resequencer.incoming(data)
                _feed_proton(transport, wire)
            else:
                self.on_selectable_error(event)
        except MalformedMessageError as e:
            log.warning("dropping a connection that sent a malformed frame: %s", e)
            transport.close_tail()
        except OSError as e:
            log.debug("recv failed: %s", e)
            transport.close_tail()
    _update(transport, selectable, selectable._reactor.now)


def _on_writable(self: IOHandler, event: Event) -> None:
    """proton's `on_selectable_writable`, through the connection's own output buffer."""
    selectable = event.selectable
    transport = selectable._transport
    if not transport:
        return
    wire = _wire(selectable)
    try:
        pending = transport.pending()
    except ProtonException:
        pending = 0
    if pending > 0:
        data = transport.peek(pending)
        transport.pop(pending)
        wire.to_socket += wire.resequencer.outgoing(data)
    try:
        _flush(selectable, wire)
    except OSError as e:
        log.debug("send failed: %s", e)
        wire.to_socket.clear()
        transport.close_head()
    _update(transport, selectable, selectable._reactor.now)


def _update(transport: Transport, selectable: Selectable, now: float) -> None:
    """proton's `IOHandler.update`, also counting the bytes held in the connection's own buffers."""
    wire = _wire(selectable)
    try:
        _feed_proton(transport, wire)
        selectable.reading = transport.capacity() > 0
    except ProtonException:
        if transport.closed:
            _finish(transport, selectable, wire)
    try:
        selectable.writing = transport.pending() > 0 or bool(wire.to_socket)
    except ProtonException:
        if transport.closed:
            _finish(transport, selectable, wire)
    selectable.deadline = transport.tick(now)
    selectable.update()


def _finish(transport: Any, selectable: Any, wire: _Wire) -> None:
    """The transport is done: send what is still buffered (a close frame, say) once, then let go."""
    with contextlib.suppress(OSError):  # the peer is gone: nothing left to tell it
        _flush(selectable, wire)
    selectable.terminate()
    selectable._transport = None
    transport._selectable = None


def _on_transport_closed(self: IOHandler, event: Event) -> None:
    transport: Any = event.transport
    selectable = transport._selectable
    if selectable and not selectable.is_terminal:
        _finish(transport, selectable, _wire(selectable))
        transport._reactor.update(selectable)
    transport.unbind()


def install() -> None:
    _io.IO.select = staticmethod(poll_select)  # type: ignore[method-assign]
    _io.IO.listen = staticmethod(listen)  # type: ignore[method-assign]
    IOHandler.on_selectable_readable = _on_readable  # type: ignore[method-assign]
    IOHandler.on_selectable_writable = _on_writable  # type: ignore[method-assign]
    IOHandler.update = staticmethod(_update)  # type: ignore[method-assign]
    IOHandler.on_transport_closed = _on_transport_closed  # type: ignore[method-assign]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class SteadyAcceptor(Acceptor):
    """proton's acceptor, except that a failed accept pauses listening for a moment instead of ending the loop."""

    def on_selectable_readable(self, event: Event) -> None:
        try:
            super().on_selectable_readable(event)
        except OSError as e:
            log.warning("cannot accept a connection: %s; not accepting for %.1f s", e.strerror or e, ACCEPT_PAUSE_S)
            self.set_listening(False)
            self._reactor.schedule(ACCEPT_PAUSE_S, _Resume(self))

    def set_listening(self, on: bool) -> None:
        selectable = self._selectable
        if not selectable.is_terminal:
            selectable.reading = on
            selectable.update()


class _Resume(Handler):
    def __init__(self, acceptor: SteadyAcceptor) -> None:
        super().__init__()
        self._acceptor = acceptor

    def on_timer_task(self, event: Event) -> None:
        self._acceptor.set_listening(True)


def listen_on(container: Container, host: str, port: int) -> SteadyAcceptor:
    return SteadyAcceptor(container, host, port)
