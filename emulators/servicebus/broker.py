"""The AMQP side: a proton handler that turns connections, links and deliveries into queue operations.

Everything runs on proton's single event thread. Queue rules live in `entities`; this module routes link
attaches (`$cbs`, `<queue>/$management`, a queue or its dead-letter subqueue), moves messages between links and
queues, echoes settlements the way Service Bus does, and wakes itself for lock expiry, schedules and TTL.
A failure while handling one connection's event is logged and closes that connection only.

Acknowledgements wait for the store: a send is accepted (and a settlement echoed) only after `store.commit()`.
Proton writes to sockets only after the handler returns, and `guarded` commits before that too.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TypeVar

from proton import (
    Condition,
    Connection,
    Delivery,
    Disposition,
    Endpoint,
    Event,
    Handler,
    Link,
    Message,
    Receiver,
    Sender,
    Terminus,
    symbol,
)
from proton.reactor import Container

from emulators.servicebus import cbs, codec, management, nodes
from emulators.servicebus.entities import Outcome, Queue
from emulators.servicebus.errors import (
    AmqpError,
    EntityNotFoundError,
    NotAllowedError,
    SessionsNotSupportedError,
    UnauthorizedError,
)
from emulators.servicebus.namespace import Namespace, entity_path
from emulators.servicebus.store import Store
from emulators.servicebus.wakeups import Wakeups

log = logging.getLogger(__name__)

CONTAINER_ID = "queue-drain-servicebus-standin"
INCOMING_CREDIT = 200  # messages a client may have in flight towards us on one link
SESSION_FILTER = "com.microsoft:session-filter"  # the source filter of a session receiver
SHUTDOWN_GRACE_S = 2.0  # how long clients get to answer our close before the event loop ends anyway
_T = TypeVar("_T")
_Handler = TypeVar("_Handler", bound=Callable[["Broker", Event], None])


class Role(Enum):
    CBS = "$cbs"
    MANAGEMENT = "$management"
    ENTITY = "entity"


@dataclass
class LinkInfo:
    role: Role
    address: str
    queue: Queue | None = None


@dataclass
class Peer:
    """One client connection: its number for the logs, its tokens and its links."""

    number: int
    remote: str
    grants: list[cbs.Grant] = field(default_factory=list)
    links: dict[Link, LinkInfo] = field(default_factory=dict)
    sessions_ended: int = 0

    def authorized(self, path: str, now_s: float) -> bool:
        return any(grant.covers(path, now_s) for grant in self.grants)


def error_condition(name: str, description: str) -> Condition:
    """An AMQP error as Service Bus sends it: with an info map (pyamqp reads all three fields of an error)."""
    return Condition(name, description, {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())})


def wall_ms() -> int:
    return int(time.time() * 1000)


def _present(value: _T | None) -> _T:
    """Proton types every endpoint of an event as optional; the handlers below only get events that have it."""
    if value is None:
        raise RuntimeError("proton event without the expected endpoint")
    return value


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
        self._consumers: dict[str, list[Sender]] = {}
        self._wakeups = Wakeups()
        self._armed_ms: list[int] = []  # heap: when the proton timers already scheduled will fire
        self._stopping = False

    # --- reactor -------------------------------------------------------------------------------

    @guarded
    def on_reactor_init(self, event: Event) -> None:
        self._container = event.container
        for queue in self.namespace.queues():
            self._touch(queue)

    @guarded
    def on_timer_task(self, event: Event) -> None:
        if self._armed_ms:
            heapq.heappop(self._armed_ms)  # timers fire in order: this one was the earliest
        now = self.clock()
        for queue in self._wakeups.pop_due(now):
            queue.advance(now)
            self._pump(queue)
        self._arm_timer()

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
        _present(event.transport).sasl().allowed_mechs("ANONYMOUS")

    @guarded
    def on_connection_remote_open(self, event: Event) -> None:
        connection = _present(event.connection)
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
        _present(event.session).open()

    @guarded
    def on_session_remote_close(self, event: Event) -> None:
        peer = self._peer(event)
        if peer is not None:
            peer.sessions_ended += 1
        _present(event.session).close()

    @guarded
    def on_connection_remote_close(self, event: Event) -> None:
        connection = _present(event.connection)
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
        condition = _present(event.transport).condition
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
        if connection is None or _present(event.transport).condition is not None:
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
        link = _present(event.link)
        peer = self._peer(event)
        if peer is None:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        path = entity_path((link.remote_source if link.is_sender else link.remote_target).address)
        try:
            info = self._attach(peer, link, path)
        except AmqpError as e:
            self._refuse_link(peer, link, path, e)
            return
        peer.links[link] = info
        link.open()
        if isinstance(link, Receiver):
            link.flow(INCOMING_CREDIT)
        elif isinstance(link, Sender) and info.role is Role.ENTITY and info.queue is not None:
            self._consumers.setdefault(info.queue.name, []).append(link)
            self._pump(info.queue)

    def _attach(self, peer: Peer, link: Link, path: str) -> LinkInfo:
        if path == cbs.CBS_ADDRESS:
            return LinkInfo(Role.CBS, path)
        now_s = self.clock() / 1000
        if path.endswith(management.MANAGEMENT_SUFFIX):
            queue = self._authorized_queue(peer, path.removesuffix(management.MANAGEMENT_SUFFIX), now_s)
            log.debug("connection #%d attached a management link for %s", peer.number, queue.name)
            return LinkInfo(Role.MANAGEMENT, path, queue)
        queue = self._authorized_queue(peer, path, now_s)
        if isinstance(link, Receiver):
            if queue.is_dead_letter_queue:
                raise NotAllowedError(f"Cannot send to the dead-letter queue {queue.name}.")
            link.max_message_size = codec.MAX_MESSAGE_BYTES
            log.info("connection #%d attached sender to %s", peer.number, queue.name)
            return LinkInfo(Role.ENTITY, path, queue)
        if _asks_for_session(link):
            # No queue here requires sessions, and Service Bus refuses a session receiver on such a queue.
            raise SessionsNotSupportedError(
                f"It is not possible for an entity that does not require sessions ({queue.name}) "
                "to create a session receiver."
            )
        # A receive-and-delete client asks for pre-settled deliveries; peek-lock for settle-mode "second".
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        mode = "receive-and-delete" if link.remote_snd_settle_mode == Link.SND_SETTLED else "peek-lock"
        log.info("connection #%d attached receiver (%s) to %s", peer.number, mode, queue.name)
        return LinkInfo(Role.ENTITY, path, queue)

    def _authorized_queue(self, peer: Peer, path: str, now_s: float) -> Queue:
        if not peer.authorized(path, now_s):
            raise UnauthorizedError(f"No valid token for '{path}': put a token on $cbs first.")
        queue = self.namespace.queue(path)
        self._touch(queue)
        return queue

    def _refuse_link(self, peer: Peer, link: Link, path: str, error: AmqpError) -> None:
        log.warning(
            "connection #%d: attach to %r refused: %s: %s", peer.number, path, error.condition, error.description
        )
        if isinstance(error, (EntityNotFoundError, SessionsNotSupportedError)):
            # Service Bus answers an unknown entity (or a session receiver on a queue without sessions) with a
            # null terminus before the detach; the SDK's session receiver would read an echoed one as granted.
            (link.source if link.is_sender else link.target).type = Terminus.UNSPECIFIED
        link.open()
        link.condition = error_condition(error.condition, error.description)
        link.close()

    @guarded
    def on_link_remote_close(self, event: Event) -> None:
        link = _present(event.link)
        self._drop_link(event, link)
        condition = link.remote_condition
        if condition is not None:
            log.info("link %s closed by the client with %s: %s", link.name, condition.name, condition.description)
        link.close()

    @guarded
    def on_link_remote_detach(self, event: Event) -> None:
        link = _present(event.link)
        self._drop_link(event, link)
        link.detach()

    @guarded
    def on_link_flow(self, event: Event) -> None:
        link = _present(event.link)
        info = self._link_info(event, link)
        if not isinstance(link, Sender) or info is None:
            return
        if info.role is Role.ENTITY and info.queue is not None:
            self._pump(info.queue)
        if link.drain_mode:
            link.drained()

    # --- deliveries ------------------------------------------------------------------------------

    @guarded
    def on_delivery(self, event: Event) -> None:
        delivery, link = _present(event.delivery), _present(event.link)
        peer, info = self._peer(event), self._link_info(event, link)
        if peer is None or info is None:
            delivery.settle()
        elif isinstance(link, Receiver):
            self._incoming(peer, info, link, delivery)
        else:
            self._outcome(info, delivery)

    def _incoming(self, peer: Peer, info: LinkInfo, link: Receiver, delivery: Delivery) -> None:
        if delivery.aborted:
            delivery.settle()
            return
        if delivery.partial or not delivery.readable:
            return  # the rest of a multi-frame message is still on its way
        payload = link.recv(delivery.pending) or b""
        link.advance()
        if info.role is Role.ENTITY and info.queue is not None:
            self._accept_send(info.queue, payload, delivery)
        else:
            self._request(peer, info, payload, delivery)
        if link.credit < INCOMING_CREDIT // 2:
            link.flow(INCOMING_CREDIT - link.credit)

    def _accept_send(self, queue: Queue, payload: bytes, delivery: Delivery) -> None:
        try:
            messages = codec.parse_transfer(payload)
        except AmqpError as e:
            log.warning("send to %s rejected: %s: %s", queue.name, e.condition, e.description)
            _settle(delivery, Disposition.REJECTED, error_condition(e.condition, e.description))
            return
        now = self.clock()
        for message in messages:
            queue.enqueue(
                message.payload,
                now,
                message_id=message.message_id,
                ttl_ms=message.ttl_ms,
                scheduled_ms=message.scheduled_ms,
            )
        self.store.commit()
        _settle(delivery, Disposition.ACCEPTED)
        self._pump(queue)

    def _outcome(self, info: LinkInfo, delivery: Delivery) -> None:
        """The client settled (or disposed of) something we sent it."""
        token = getattr(delivery, "lock_token", None)
        if info.role is not Role.ENTITY or info.queue is None or token is None:
            if delivery.remote_state or delivery.settled:
                delivery.settle()  # a $cbs/$management reply was received
            return
        state = delivery.remote_state
        if state not in (Disposition.ACCEPTED, Disposition.REJECTED, Disposition.MODIFIED, Disposition.RELEASED):
            return
        outcome, reason, description = _settlement(delivery)
        try:
            info.queue.settle(token, outcome, self.clock(), reason=reason, description=description)
        except AmqpError as e:
            log.info("settlement on %s refused: %s", info.queue.name, e.condition)
            _settle(delivery, Disposition.REJECTED, error_condition(e.condition, e.description))
            return
        self.store.commit()
        _echo(delivery, state)
        if outcome in (Outcome.ABANDON, Outcome.RELEASE, Outcome.DEAD_LETTER):
            self._pump(info.queue)
        else:
            self._touch(info.queue)

    def _request(self, peer: Peer, info: LinkInfo, payload: bytes, delivery: Delivery) -> None:
        try:
            request = nodes.decode_request(payload)
        except AmqpError as e:
            log.warning("connection #%d: %s request rejected: %s", peer.number, info.role.value, e.description)
            _settle(delivery, Disposition.REJECTED, error_condition(e.condition, e.description))
            return
        _settle(delivery, Disposition.ACCEPTED)
        if info.queue is None:  # $cbs
            reply, grant = nodes.put_token(request, self.clock() / 1000, f"connection #{peer.number}")
            if grant is not None:
                peer.grants.append(grant)
        else:
            reply = nodes.manage(request, info.queue, self.clock())
            self.store.commit()
            self._pump(info.queue)
        self._reply(peer, info, request.reply_to, reply)

    def _reply(self, peer: Peer, info: LinkInfo, reply_to: str | None, reply: Message) -> None:
        address = entity_path(reply_to) if reply_to else info.address
        link = _reply_link(peer, info.role, address)
        if link is None:
            log.warning("connection #%d: no reply link for %s; reply dropped", peer.number, address)
            return
        _send(link, uuid.uuid4().bytes, reply.encode(), settled=link.snd_settle_mode == Link.SND_SETTLED)

    # --- moving messages to consumers --------------------------------------------------------------

    def _pump(self, queue: Queue) -> None:
        """Hand available messages to the receivers of this queue and of its dead-letter queue, then make sure
        the broker wakes up for the locks just taken.

        Anything that changes a queue (a settlement, a lock or TTL running out, a receive that finds expired
        messages) may move messages into its dead-letter queue, whose receivers may hold credit already. And a
        lock taken when a client grants credit may be followed by nothing else on this queue: without a wake-up
        a receiver already waiting would never see the message again.
        """
        self._pump_one(queue)
        if queue.dead_letter_queue is not None:
            self._pump_one(queue.dead_letter_queue)
        self._touch(queue)

    def _pump_one(self, queue: Queue) -> None:
        """Hand available messages to this queue's receivers, one each around the ring while credit lasts."""
        consumers = self._consumers.get(queue.name)
        if not consumers:
            return
        now = self.clock()
        progressed = True
        while progressed:
            progressed = False
            for link in consumers:
                if link.credit <= 0 or not link.state & Endpoint.LOCAL_ACTIVE:
                    continue
                message = queue.receive(now, lock=link.snd_settle_mode != Link.SND_SETTLED)
                if message is None:
                    return
                # In peek-lock the delivery tag is the lock token (the SDK reads it as UUID(bytes_le=tag)).
                token = message.lock_token
                delivery = _send(link, (token or uuid.uuid4()).bytes_le, codec.render(message), settled=token is None)
                delivery.lock_token = token
                progressed = True
            consumers.append(consumers.pop(0))  # the next pump starts with the next receiver

    # --- timers ------------------------------------------------------------------------------------

    def _touch(self, queue: Queue) -> None:
        """Make sure the broker wakes up when this queue (or its dead-letter queue) next has something due."""
        self._wakeups.note(queue)
        if queue.dead_letter_queue is not None:
            self._wakeups.note(queue.dead_letter_queue)
        self._arm_timer()

    def _arm_timer(self) -> None:
        due = self._wakeups.next_due_ms()
        if due is None or self._container is None or self._stopping:
            return
        if self._armed_ms and self._armed_ms[0] <= due:
            return  # a timer that fires early enough is already set
        heapq.heappush(self._armed_ms, due)
        self._container.schedule(max(0.0, (due - self.clock()) / 1000) + 0.001, self)

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
            consumers = self._consumers.get(info.queue.name, [])
            if link in consumers:
                consumers.remove(link)

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
        self._stopping = True
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


def _asks_for_session(link: Link) -> bool:
    """Whether a receiving client's source carries the session filter (it names a session, or any session)."""
    filters = link.remote_source.filter
    filters.rewind()
    if not filters.next():
        return False
    value = filters.get_object()
    return isinstance(value, dict) and SESSION_FILTER in {str(key) for key in value}


def _reply_link(peer: Peer, role: Role, address: str) -> Sender | None:
    """The client's open link for replies from this node: our sending link whose source is the node's address."""
    for link, info in peer.links.items():
        if not isinstance(link, Sender) or not link.state & Endpoint.LOCAL_ACTIVE:
            continue
        if info.role is role and info.address == address:
            return link
    return None


def _send(link: Sender, tag: bytes, payload: bytes, *, settled: bool) -> Delivery:
    delivery = link.delivery(tag)  # type: ignore[arg-type]  # proton takes binary tags; its hint says str
    link.send(payload)
    link.advance()
    if settled:
        delivery.settle()
    return delivery


def _settle(delivery: Delivery, state: int, condition: Condition | None = None) -> None:
    if condition is not None:
        delivery.local.condition = condition
    delivery.update(state)
    delivery.settle()


def _echo(delivery: Delivery, state: int) -> None:
    """Settle with the outcome the client asked for: the SDK waits for exactly that echo (with no error)."""
    if delivery.settled:
        delivery.settle()
        return
    if state == Disposition.MODIFIED:
        delivery.local.failed = delivery.remote.failed
        delivery.local.undeliverable = delivery.remote.undeliverable
    _settle(delivery, state)


def _settlement(delivery: Delivery) -> tuple[Outcome, str | None, str | None]:
    """The queue outcome a client's disposition asks for, with the dead-letter reason if any."""
    state = delivery.remote_state
    if state == Disposition.ACCEPTED:
        return Outcome.COMPLETE, None, None
    if state == Disposition.RELEASED:
        return Outcome.RELEASE, None, None
    if state == Disposition.MODIFIED:
        return (Outcome.DEFER if delivery.remote.undeliverable else Outcome.ABANDON), None, None
    condition = delivery.remote.condition
    info = condition.info if condition is not None and isinstance(condition.info, dict) else {}
    return Outcome.DEAD_LETTER, _text(info.get("DeadLetterReason")), _text(info.get("DeadLetterErrorDescription"))


def _text(value: object) -> str | None:
    return None if value is None else str(value)
