"""Adjustments to proton's Python socket layer so one broker takes many connections at once and survives
running out of file descriptors.

proton's reactor (0.40) waits in `select.select`, which refuses descriptors from 1024 up: one connection too
many and the whole broker would stop with "filedescriptor out of range". It listens with a backlog of 10, so a
burst of clients sees SYNs dropped and one-second retries. And a failed `accept()` (EMFILE) escapes its event
loop. `install()` swaps in the same contracts over `select.poll` and a `SOMAXCONN` backlog, and raises the
process's descriptor limit to its hard limit; `SteadyAcceptor` pauses listening instead of dying.
"""

from __future__ import annotations

import logging
import math
import resource
import select
import socket
from collections.abc import Iterable
from typing import Any, Protocol

from proton import Event, Handler, _io  # _io: the reactor's own I/O helper; nothing public covers these
from proton._reactor import Acceptor, Container

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


def install() -> None:
    _io.IO.select = staticmethod(poll_select)  # type: ignore[method-assign]
    _io.IO.listen = staticmethod(listen)  # type: ignore[method-assign]
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
