"""The AMQP side: a proton handler that turns connections, links and deliveries into queue operations.

Everything runs on proton's single event thread. Queue rules live in `entities`; this module routes link
attaches (`$cbs`, `<queue>/$management`, a queue or its dead-letter subqueue), moves messages between links and
queues, echoes settlements the way Service Bus does, and wakes itself for lock expiry, schedules and TTL.
A failure while handling one connection's event is logged and closes that connection only.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

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
    int32,
    symbol,
)
from proton.reactor import Container

from emulators.servicebus import cbs, codec, management
from emulators.servicebus.entities import Outcome, Queue
from emulators.servicebus.errors import AmqpError, EntityNotFoundError, NotAllowedError, UnauthorizedError
from emulators.servicebus.namespace import Namespace, entity_path
from emulators.servicebus.store import Store

log = logging.getLogger(__name__)

CONTAINER_ID = "queue-drain-servicebus-standin"
INCOMING_CREDIT = 200  # messages a sender may have in flight towards us per link
DEAD_LETTER_CONDITION = "com.microsoft:dead-letter"
_F = TypeVar("_F", bound=Callable[..., None])


def error_condition(name: str, description: str) -> Condition:
    """An AMQP error as Service Bus sends it: with an info map (pyamqp indexes all three fields of an error)."""
    return Condition(name, description, {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())})


def wall_ms() -> int:
    return int(time.time() * 1000)


class Role(Enum):
    CBS = "$cbs"
    MANAGEMENT = "$management"
    ENTITY = "entity"


@dataclass
class LinkInfo:
    role: Role
    address: str
    queue: Queue | None = None
    peek_lock: bool = True


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


def guarded(method: _F) -> _F:
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

    return run  # type: ignore[return-value]


class Broker(Handler):
    def __init__(self, namespace: Namespace, store: Store, *, clock: Callable[[], int] = wall_ms) -> None:
        super().__init__()
        self.namespace = namespace
        self.store = store
        self.clock = clock
        self.container: Container | None = None
        self._peers: dict[Connection, Peer] = {}
        self._numbers = itertools.count(1)
        self._consumers: dict[str, list[Sender]] = {}
        self._wakeups: list[tuple[int, str]] = []  # heap of (due ms, queue name)
        self._wakeup_for: dict[str, int] = {}
        self._queues_by_name: dict[str, Queue] = {}
        self._timer_due_ms: list[int] = []  # due times of proton timers already scheduled
        self._stopping = False
        self.close_listeners: Callable[[], None] | None = None

    # --- reactor -------------------------------------------------------------------------------

    @guarded
    def on_reactor_init(self, event: Event) -> None:
        self.container = event.container
        for queue in self.namespace.queues():
            self._touch(queue)

    @guarded
    def on_timer_task(self, event: Event) -> None:
        now = self.clock()
        if self._timer_due_ms:
            heapq.heappop(self._timer_due_ms)
        while self._wakeups and self._wakeups[0][0] <= now:
            due, name = heapq.heappop(self._wakeups)
            if self._wakeup_for.get(name) != due:
                continue  # superseded by an earlier wake-up for the same queue
            del self._wakeup_for[name]
            queue = self._queues_by_name[name]
            queue.advance(now)
            self._pump(queue)
            self._touch(queue)
        self._arm_timer()

    # --- connections and sessions ----------------------------------------------------------------

    @guarded
    def on_connection_bound(self, event: Event) -> None:
        # The SDK always starts with SASL; ANONYMOUS is enough, the token check happens on $cbs.
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")

    @guarded
    def on_connection_remote_open(self, event: Event) -> None:
        connection = event.connection
        url = getattr(connection, "url", None)
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
        event.session.open()

    @guarded
    def on_session_remote_close(self, event: Event) -> None:
        peer = self._peers.get(event.connection)
        if peer is not None:
            peer.sessions_ended += 1
        event.session.close()

    @guarded
    def on_connection_remote_close(self, event: Event) -> None:
        connection = event.connection
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
        condition = event.transport.condition
        name, description = (condition.name, condition.description) if condition else ("?", "?")
        peer = self._peers.get(event.connection) if event.connection is not None else None
        if peer is not None and peer.sessions_ended and description.startswith("no such channel"):
            # The SDK detaches its $management links after ending their session when it closes a receiver;
            # proton calls that an error. The client is leaving anyway, so this is not worth a warning.
            log.debug("connection #%d: frame on an ended session while closing (%s)", peer.number, description)
            return
        log.warning("connection %s dropped: %s: %s", self._label(event.connection), name, description)

    @guarded
    def on_transport_tail_closed(self, event: Event) -> None:
        connection = event.connection
        if connection is None or event.transport.condition is not None:
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
        connection = event.connection
        if connection is not None:
            self._forget(connection)
        if self._stopping and not self._peers:
            self._finish_stop()

    # --- links -----------------------------------------------------------------------------------

    @guarded
    def on_link_remote_open(self, event: Event) -> None:
        link = event.link
        peer = self._peers.get(event.connection)
        if peer is None:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        address = (link.remote_source if link.is_sender else link.remote_target).address
        path = entity_path(address)
        try:
            info = self._attach(peer, link, path)
        except AmqpError as e:
            self._refuse_link(peer, link, path, e)
            return
        peer.links[link] = info
        link.open()
        if isinstance(link, Receiver):
            link.flow(INCOMING_CREDIT)
        elif info.queue is not None and info.role is Role.ENTITY:
            self._consumers.setdefault(info.queue.name, []).append(link)
            self._pump(info.queue)

    def _attach(self, peer: Peer, link: Link, path: str) -> LinkInfo:
        if path == cbs.CBS_ADDRESS:
            return LinkInfo(Role.CBS, path)
        now_s = self.clock() / 1000
        if path.endswith(management.MANAGEMENT_SUFFIX):
            entity = path[: -len(management.MANAGEMENT_SUFFIX)]
            self._check_grant(peer, entity, now_s)
            queue = self._queue(entity)
            log.debug("connection #%d attached management link for %s", peer.number, queue.name)
            return LinkInfo(Role.MANAGEMENT, path, queue)
        self._check_grant(peer, path, now_s)
        queue = self._queue(path)
        if isinstance(link, Receiver):
            if queue.is_dead_letter_queue:
                raise NotAllowedError(f"Cannot send to the dead-letter queue {queue.name}.")
            link.max_message_size = codec.MAX_MESSAGE_BYTES
            log.info("connection #%d attached sender to %s", peer.number, queue.name)
            return LinkInfo(Role.ENTITY, path, queue)
        peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        mode = "peek-lock" if peek_lock else "receive-and-delete"
        log.info("connection #%d attached receiver (%s) to %s", peer.number, mode, queue.name)
        return LinkInfo(Role.ENTITY, path, queue, peek_lock)

    def _check_grant(self, peer: Peer, path: str, now_s: float) -> None:
        if not peer.authorized(path, now_s):
            raise UnauthorizedError(f"No valid token for '{path}': put a token on $cbs first.")

    def _queue(self, path: str) -> Queue:
        queue = self.namespace.queue(path)
        if queue.name not in self._queues_by_name:
            self._queues_by_name[queue.name] = queue
            self._touch(queue)
        return queue

    def _refuse_link(self, peer: Peer, link: Link, path: str, error: AmqpError) -> None:
        log.warning(
            "connection #%d: attach to %r refused: %s: %s", peer.number, path, error.condition, error.description
        )
        if isinstance(error, EntityNotFoundError):
            # Service Bus answers an unknown entity with a null terminus before the detach.
            terminus = link.source if link.is_sender else link.target
            terminus.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = error_condition(error.condition, error.description)
        link.close()

    @guarded
    def on_link_remote_close(self, event: Event) -> None:
        link = event.link
        peer = self._peers.get(event.connection)
        if peer is not None:
            self._drop_link(peer, link)
        condition = link.remote_condition
        if condition is not None:
            log.info("link %s closed by the client with %s: %s", link.name, condition.name, condition.description)
        link.close()

    @guarded
    def on_link_remote_detach(self, event: Event) -> None:
        peer = self._peers.get(event.connection)
        if peer is not None:
            self._drop_link(peer, event.link)
        event.link.detach()

    @guarded
    def on_link_flow(self, event: Event) -> None:
        link = event.link
        peer = self._peers.get(event.connection)
        info = peer.links.get(link) if peer is not None else None
        if not isinstance(link, Sender) or info is None:
            return
        if info.role is Role.ENTITY and info.queue is not None:
            self._pump(info.queue)
        if link.drain_mode:
            link.drained()

    # --- deliveries ------------------------------------------------------------------------------

    @guarded
    def on_delivery(self, event: Event) -> None:
        delivery = event.delivery
        peer = self._peers.get(event.connection)
        info = peer.links.get(event.link) if peer is not None else None
        if peer is None or info is None:
            delivery.settle()
            return
        if isinstance(event.link, Receiver):
            self._incoming(peer, info, event.link, delivery)
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
            self._settle(delivery, Disposition.REJECTED, error_condition(e.condition, e.description))
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
        self.store.commit()  # stored before the sender hears "accepted"
        self._settle(delivery, Disposition.ACCEPTED)
        self._pump(queue)
        self._touch(queue)

    def _outcome(self, info: LinkInfo, delivery: Delivery) -> None:
        """The client settled (or disposed of) something we sent it."""
        token = getattr(delivery, "lock_token", None)
        if info.role is not Role.ENTITY or info.queue is None or token is None:
            if delivery.remote_state or delivery.settled:
                delivery.settle()
            return
        state = delivery.remote_state
        if state not in (Disposition.ACCEPTED, Disposition.REJECTED, Disposition.MODIFIED, Disposition.RELEASED):
            return
        outcome, reason, description = _settlement(delivery)
        queue = info.queue
        try:
            queue.settle(token, outcome, self.clock(), reason=reason, description=description)
        except AmqpError as e:
            log.info("settlement on %s refused: %s", queue.name, e.condition)
            self.store.commit()
            self._settle(delivery, Disposition.REJECTED, error_condition(e.condition, e.description))
            return
        self.store.commit()  # applied before the client hears it worked
        self._echo(delivery, state)
        if outcome in (Outcome.ABANDON, Outcome.RELEASE):
            self._pump(queue)
        self._touch(queue)

    def _echo(self, delivery: Delivery, state: int) -> None:
        # The SDK waits for the broker to settle with the outcome it asked for (a plain echo, no error).
        if delivery.settled:
            delivery.settle()
            return
        if state == Disposition.MODIFIED:
            delivery.local.failed = delivery.remote.failed
            delivery.local.undeliverable = delivery.remote.undeliverable
        self._settle(delivery, state)

    def _settle(self, delivery: Delivery, state: int, condition: Condition | None = None) -> None:
        if condition is not None:
            delivery.local.condition = condition
        delivery.update(state)
        delivery.settle()

    # --- $cbs and $management requests -------------------------------------------------------------

    def _request(self, peer: Peer, info: LinkInfo, payload: bytes, delivery: Delivery) -> None:
        request = Message()
        try:
            request.decode(payload)
        except Exception as e:
            log.warning("connection #%d: undecodable %s request: %s", peer.number, info.role.value, e)
            self._settle(delivery, Disposition.REJECTED, error_condition("amqp:decode-error", str(e)))
            return
        self._settle(delivery, Disposition.ACCEPTED)
        properties = {str(k): v for k, v in (request.properties or {}).items()}
        if info.role is Role.CBS:
            response = self._put_token(peer, properties, request.body)
        else:
            assert info.queue is not None
            body = codec.owned(request.body) if isinstance(request.body, dict) else {}
            assert isinstance(body, dict)
            operation = str(properties.get("operation", ""))
            result = management.handle(info.queue, operation, {str(k): v for k, v in body.items()}, self.clock())
            response = Message(
                body=result.body,
                properties={
                    "statusCode": int32(result.status_code),
                    "statusDescription": result.description,
                    **({"errorCondition": result.condition} if result.condition else {}),
                },
            )
            self.store.commit()
            self._pump(info.queue)
            self._touch(info.queue)
        response.correlation_id = request.id
        self._reply(peer, info, request.reply_to, response)

    def _put_token(self, peer: Peer, properties: dict[str, Any], token: object) -> Message:
        audience = properties.get("name")
        try:
            grant = cbs.put_token(properties, token, self.clock() / 1000)
        except AmqpError as e:
            log.warning("connection #%d: token for %s refused: %s", peer.number, audience, e.description)
            status, description = e.status_code, e.description
        else:
            peer.grants.append(grant)
            log.debug("connection #%d: token accepted for %s", peer.number, audience)
            status, description = 202, "Accepted"
        return Message(properties={"status-code": int32(status), "status-description": description})

    def _reply(self, peer: Peer, info: LinkInfo, reply_to: str | None, response: Message) -> None:
        address = entity_path(reply_to) if reply_to else info.address
        link = self._reply_link(peer, info.role, address)
        if link is None:
            log.warning("connection #%d: no reply link for %s; response dropped", peer.number, address)
            return
        delivery = link.delivery(uuid.uuid4().bytes)
        link.send(response.encode())
        link.advance()
        if link.snd_settle_mode == Link.SND_SETTLED:
            delivery.settle()

    def _reply_link(self, peer: Peer, role: Role, address: str) -> Sender | None:
        for link, info in peer.links.items():
            active = link.state & Endpoint.LOCAL_ACTIVE
            if isinstance(link, Sender) and info.role is role and info.address == address and active:
                return link
        return None

    # --- moving messages to consumers --------------------------------------------------------------

    def _pump(self, queue: Queue) -> None:
        """Hand available messages to this queue's receivers, one at a time around the ring while credit lasts."""
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
                peek_lock = link.snd_settle_mode != Link.SND_SETTLED
                message = queue.receive(now, lock=peek_lock)
                if message is None:
                    return
                self._deliver(link, message.lock_token, codec.render(message))
                progressed = True
            consumers.append(consumers.pop(0))  # the next pump starts with the next receiver

    def _deliver(self, link: Sender, lock_token: uuid.UUID | None, payload: bytes) -> None:
        # In peek-lock the delivery tag is the lock token (the SDK reads it as UUID(bytes_le=tag)).
        tag = (lock_token or uuid.uuid4()).bytes_le
        delivery = link.delivery(tag)
        delivery.lock_token = lock_token
        link.send(payload)
        link.advance()
        if lock_token is None:
            delivery.settle()

    # --- timers ------------------------------------------------------------------------------------

    def _touch(self, queue: Queue) -> None:
        """Make sure the broker wakes up when this queue next has something due."""
        for entity in (queue, queue.dead_letter_queue):
            if entity is None:
                continue
            self._queues_by_name.setdefault(entity.name, entity)
            due = entity.next_deadline_ms()
            current = self._wakeup_for.get(entity.name)
            if due is not None and (current is None or due < current):
                self._wakeup_for[entity.name] = due
                heapq.heappush(self._wakeups, (due, entity.name))
        self._arm_timer()

    def _arm_timer(self) -> None:
        if not self._wakeups or self.container is None or self._stopping:
            return
        due = self._wakeups[0][0]
        if self._timer_due_ms and self._timer_due_ms[0] <= due:
            return  # an earlier (or equal) timer is already set
        heapq.heappush(self._timer_due_ms, due)
        delay_s = max(0.0, (due - self.clock()) / 1000) + 0.001
        self.container.schedule(delay_s, self)

    # --- cleanup and shutdown ----------------------------------------------------------------------

    def _drop_link(self, peer: Peer, link: Link) -> None:
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
            self._drop_link(peer, link)
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
        elif self.container is not None:
            self.container.schedule(2.0, _Later(self._finish_stop))

    def _finish_stop(self) -> None:
        if self.container is not None:
            self.container.stop()


class _Later(Handler):
    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__()
        self._action = action

    def on_timer_task(self, event: Event) -> None:
        self._action()


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
    info = (condition.info if condition is not None else None) or {}
    reason = info.get("DeadLetterReason")
    description = info.get("DeadLetterErrorDescription")
    return Outcome.DEAD_LETTER, _text(reason), _text(description)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
