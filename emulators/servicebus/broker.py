"""The AMQP side: the proton handler that owns connections and sessions, routes every event to its room, and shuts
down cleanly.

Everything runs on proton's single event thread. The rooms: `links` (what an attach is for, and refusals),
`deliveries` (sends, settlements, node requests), `dispatch` (consumers, the pump and the timer), `peers` (one
connection's state); queue rules live in `entities`. A failure while handling one connection's event is logged and
closes that connection only. Proton writes to sockets only after the handler returns, and `guarded` commits the
store before that.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from proton import Connection, Endpoint, Event, Handler, Link, Receiver, Sender
from proton.reactor import Container

from emulators.servicebus import links
from emulators.servicebus.deliveries import INCOMING_CREDIT, Deliveries
from emulators.servicebus.dispatch import Dispatch
from emulators.servicebus.errors import AmqpError
from emulators.servicebus.namespace import Namespace, entity_path
from emulators.servicebus.peers import LinkInfo, Peer, Role, error_condition, present, wall_ms
from emulators.servicebus.store import Store

log = logging.getLogger(__name__)

CONTAINER_ID = "queue-drain-servicebus-standin"
SHUTDOWN_GRACE_S = 2.0  # how long clients get to answer our close before the event loop ends anyway
_Handler = TypeVar("_Handler", bound=Callable[["Broker", Event], None])


def guarded(method: _Handler) -> _Handler:
    """Run one event handler; a bug or bad input closes that connection, never the broker."""

    @functools.wraps(method)
    def run(self: Broker, event: Event) -> None:
        try:
            method(self, event)
        except Exception as e:
            log.exception("error while handling %s; closing its connection", event.type)
            self.fail_connection(event.connection, "amqp:internal-error", f"stand-in error: {e}")
        finally:
            self.store.commit()

    return run  # type: ignore[return-value]  # same signature as `method`


class Broker(Handler):
    def __init__(
        self,
        namespace: Namespace,
        store: Store,
        *,
        clock: Callable[[], int] = wall_ms,
        locked_counts_as_active: bool = True,
    ) -> None:
        super().__init__()
        self.namespace = namespace
        self.locked_counts_as_active = locked_counts_as_active
        self.store = store
        self.clock = clock
        self.close_listeners: Callable[[], None] | None = None
        self._container: Container | None = None
        self._peers: dict[Connection, Peer] = {}
        self._numbers = itertools.count(1)
        self._dispatch = Dispatch(clock, self)
        self._deliveries = Deliveries(store, clock, self._dispatch.pump, self._dispatch.touch)
        self._stopping = False

    # --- reactor -------------------------------------------------------------------------------

    @guarded
    def on_reactor_init(self, event: Event) -> None:
        self._container = self._dispatch.container = event.container
        for queue in self.namespace.queues():
            self._dispatch.touch(queue)

    @guarded
    def on_timer_task(self, event: Event) -> None:
        self._dispatch.timer_fired()

    @guarded
    def on_counts_request(self, event: Event) -> None:
        request = event.subject
        try:
            request.answer = self.counts()
        finally:
            request.done.set()

    def counts(self) -> dict[str, dict[str, int]]:
        """Each queue's runtime counts (dead-letter subqueues are counted in their queue's)."""
        now = self.clock()
        return {
            queue.name: asdict(queue.counts(now, locked_counts_as_active=self.locked_counts_as_active))
            for queue in self.namespace.queues()
            if not queue.is_dead_letter_queue
        }

    # --- connections and sessions ----------------------------------------------------------------

    @guarded
    def on_connection_bound(self, event: Event) -> None:
        # The SDK always starts with SASL; ANONYMOUS is enough, the token check happens on $cbs.
        present(event.transport).sasl().allowed_mechs("ANONYMOUS")

    @guarded
    def on_connection_remote_open(self, event: Event) -> None:
        connection = present(event.connection)
        url = getattr(connection, "url", None)  # set by proton's acceptor
        peer = Peer(next(self._numbers), f"{url.host}:{url.port}" if url is not None else "?")
        self._peers[connection] = peer
        connection.container = CONTAINER_ID
        if self._stopping:
            connection.condition = error_condition("amqp:connection:forced", "The stand-in is shutting down.")
            connection.close()
            return
        connection.open()
        log.info("connection #%d opened from %s (container %s)", peer.number, peer.remote, connection.remote_container)

    @guarded
    def on_session_remote_open(self, event: Event) -> None:
        present(event.session).open()

    @guarded
    def on_session_remote_close(self, event: Event) -> None:
        peer = self._peer(event)
        if peer is not None:
            peer.sessions_ended += 1
        present(event.session).close()

    @guarded
    def on_connection_remote_close(self, event: Event) -> None:
        connection = present(event.connection)
        condition = connection.remote_condition
        if condition is not None:
            log.warning(
                "connection %s closed by the client with %s: %s",
                self._label(connection),
                condition.name,
                condition.description,
            )
        self._forget(connection)
        connection.close()

    @guarded
    def on_transport_error(self, event: Event) -> None:
        condition = present(event.transport).condition
        name, description = (condition.name, condition.description or "") if condition else ("?", "")
        peer = self._peer(event)
        if peer is not None and peer.sessions_ended and description.startswith("no such channel"):
            # The SDK detaches its $management links after ending their session when it closes a receiver;
            # proton calls that an error. The client is leaving anyway, so this is not worth a warning.
            log.debug("connection #%d: frame on an ended session while closing (%s)", peer.number, description)
            return
        log.warning("connection %s dropped: %s: %s", self._label(event.connection), name, description)

    @guarded
    def on_transport_tail_closed(self, event: Event) -> None:
        connection = event.connection
        if connection is None or present(event.transport).condition is not None:
            return  # nothing unusual, or on_transport_error reports it
        if connection.state & Endpoint.REMOTE_CLOSED or not connection.state & Endpoint.LOCAL_ACTIVE:
            return  # an orderly close
        # After a frame it cannot decode proton stops reading without reporting a condition; the connection
        # would hang half-open, so say what happened and hang up.
        description = "the client sent a frame that cannot be decoded"
        log.warning("connection %s dropped: amqp:decode-error: %s", self._label(connection), description)
        self.fail_connection(connection, "amqp:decode-error", description)

    @guarded
    def on_transport_closed(self, event: Event) -> None:
        if event.connection is not None:
            self._forget(event.connection)
        if self._stopping and not self._peers:
            self._finish_stop()

    # --- links -----------------------------------------------------------------------------------

    @guarded
    def on_link_remote_open(self, event: Event) -> None:
        link = present(event.link)
        peer = self._peer(event)
        if peer is None:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        path = entity_path((link.remote_source if link.is_sender else link.remote_target).address)
        try:
            info = links.attach(peer, link, path, self.namespace, self.clock() / 1000, self._dispatch.touch)
        except AmqpError as e:
            links.refuse(peer, link, path, e)
            return
        peer.links[link] = info
        link.open()
        if isinstance(link, Receiver):
            link.flow(INCOMING_CREDIT)
        elif isinstance(link, Sender) and info.role is Role.ENTITY and info.queue is not None:
            self._dispatch.add_consumer(info.queue, link)

    @guarded
    def on_link_remote_close(self, event: Event) -> None:
        link = present(event.link)
        self._drop_link(event, link)
        condition = link.remote_condition
        if condition is not None:
            log.info("link %s closed by the client with %s: %s", link.name, condition.name, condition.description)
        link.close()

    @guarded
    def on_link_remote_detach(self, event: Event) -> None:
        link = present(event.link)
        self._drop_link(event, link)
        link.detach()

    @guarded
    def on_link_flow(self, event: Event) -> None:
        link = present(event.link)
        info = self._link_info(event, link)
        if not isinstance(link, Sender) or info is None:
            return
        if info.role is Role.ENTITY and info.queue is not None:
            self._dispatch.pump(info.queue)
        if link.drain_mode:
            link.drained()

    # --- deliveries ------------------------------------------------------------------------------

    @guarded
    def on_delivery(self, event: Event) -> None:
        delivery, link = present(event.delivery), present(event.link)
        peer, info = self._peer(event), self._link_info(event, link)
        if peer is None or info is None:
            delivery.settle()
        elif isinstance(link, Receiver):
            self._deliveries.incoming(peer, info, link, delivery)
        else:
            self._deliveries.outcome(info, delivery)

    # --- cleanup and shutdown ----------------------------------------------------------------------

    def _peer(self, event: Event) -> Peer | None:
        return self._peers.get(event.connection) if event.connection is not None else None

    def _link_info(self, event: Event, link: Link) -> LinkInfo | None:
        peer = self._peer(event)
        return peer.links.get(link) if peer is not None else None

    def _drop_link(self, event: Event, link: Link) -> None:
        peer = self._peer(event)
        if peer is not None:
            self._forget_link(peer, link)

    def _forget_link(self, peer: Peer, link: Link) -> None:
        info = peer.links.pop(link, None)
        if info is not None and info.queue is not None and isinstance(link, Sender):
            self._dispatch.remove_consumer(info.queue, link)

    def _forget(self, connection: Connection) -> None:
        peer = self._peers.pop(connection, None)
        if peer is None:
            return
        for link in list(peer.links):
            self._forget_link(peer, link)
        log.debug("connection #%d closed", peer.number)

    def fail_connection(self, connection: Connection | None, name: str, description: str) -> None:
        if connection is None:
            return
        self._forget(connection)
        if connection.state & Endpoint.LOCAL_ACTIVE:
            connection.condition = error_condition(name, description)
            connection.close()

    def _label(self, connection: Connection | None) -> str:
        peer = self._peers.get(connection) if connection is not None else None
        return f"#{peer.number}" if peer is not None else "(not open)"

    @guarded
    def on_broker_shutdown(self, event: Event) -> None:
        """SIGINT/SIGTERM: stop listening, close every connection cleanly, then leave the event loop."""
        if self._stopping:
            return
        self._stopping = self._dispatch.stopping = True
        log.info("shutting down: closing %d connections", len(self._peers))
        if self.close_listeners is not None:
            self.close_listeners()
        for connection in list(self._peers):
            if connection.state & Endpoint.LOCAL_ACTIVE:
                connection.condition = error_condition("amqp:connection:forced", "The stand-in is shutting down.")
                connection.close()
        if not self._peers:
            self._finish_stop()
        elif self._container is not None:
            self._container.schedule(SHUTDOWN_GRACE_S, _Later(self._finish_stop))

    def _finish_stop(self) -> None:
        if self._container is not None:
            self._container.stop()


class _Later(Handler):
    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__()
        self._action = action

    def on_timer_task(self, event: Event) -> None:
        self._action()
