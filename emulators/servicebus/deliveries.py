"""Deliveries both ways: a client's send (stored, then accepted), its settlement of what we sent (applied, then
echoed the way Service Bus echoes it), and its requests to `$cbs` and `$management` (answered on the reply link).

Acknowledgements wait for the store: a send is accepted (and a settlement echoed) only after `store.commit()`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from proton import Condition, Delivery, Disposition, Endpoint, Link, Message, Receiver, Sender

from emulators.servicebus import codec, nodes
from emulators.servicebus.entities import Queue
from emulators.servicebus.errors import AmqpError
from emulators.servicebus.messages import Outcome
from emulators.servicebus.namespace import entity_path
from emulators.servicebus.peers import LinkInfo, Peer, Role, error_condition, send
from emulators.servicebus.store import Store

log = logging.getLogger(__name__)

INCOMING_CREDIT = 200  # messages a client may have in flight towards us on one link


class Deliveries:
    """`pump` hands a queue's messages to its receivers; `touch` makes sure the broker wakes up for the queue."""

    def __init__(
        self, store: Store, clock: Callable[[], int], pump: Callable[[Queue], None], touch: Callable[[Queue], None]
    ) -> None:
        self.store = store
        self.clock = clock
        self.pump = pump
        self.touch = touch

    def incoming(self, peer: Peer, info: LinkInfo, link: Receiver, delivery: Delivery) -> None:
        """A whole message from the client: a send to a queue, or a request to a node."""
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
        self.pump(queue)

    def outcome(self, info: LinkInfo, delivery: Delivery) -> None:
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
            self.pump(info.queue)
        else:
            self.touch(info.queue)

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
            self.pump(info.queue)
        _reply(peer, info, request.reply_to, reply)


def _reply(peer: Peer, info: LinkInfo, reply_to: str | None, reply: Message) -> None:
    address = entity_path(reply_to) if reply_to else info.address
    link = _reply_link(peer, info.role, address)
    if link is None:
        log.warning("connection #%d: no reply link for %s; reply dropped", peer.number, address)
        return
    send(link, uuid.uuid4().bytes, reply.encode(), settled=link.snd_settle_mode == Link.SND_SETTLED)


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


def _reply_link(peer: Peer, role: Role, address: str) -> Sender | None:
    """The client's open link for replies from this node: our sending link whose source is the node's address."""
    for link, info in peer.links.items():
        if not isinstance(link, Sender) or not link.state & Endpoint.LOCAL_ACTIVE:
            continue
        if info.role is role and info.address == address:
            return link
    return None
