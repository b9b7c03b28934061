"""Which node a client's link attaches to, and whether it may: `$cbs`, `<queue>/$management`, a queue or its
dead-letter subqueue; and the refusal Service Bus sends when it may not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from proton import Link, Receiver, Terminus

from emulators.servicebus import cbs, codec, management
from emulators.servicebus.entities import Queue
from emulators.servicebus.errors import (
    AmqpError,
    EntityNotFoundError,
    NotAllowedError,
    SessionsNotSupportedError,
    UnauthorizedError,
)
from emulators.servicebus.namespace import Namespace
from emulators.servicebus.peers import LinkInfo, Peer, Role, error_condition

log = logging.getLogger(__name__)

SESSION_FILTER = "com.microsoft:session-filter"  # the source filter of a session receiver


def attach(
    peer: Peer, link: Link, path: str, namespace: Namespace, now_s: float, touch: Callable[[Queue], None]
) -> LinkInfo:
    """What the link at `path` is for; raises the AmqpError Service Bus would answer a forbidden attach with."""
    if path == cbs.CBS_ADDRESS:
        return LinkInfo(Role.CBS, path)
    if path.endswith(management.MANAGEMENT_SUFFIX):
        queue = _authorized_queue(peer, path.removesuffix(management.MANAGEMENT_SUFFIX), namespace, now_s, touch)
        log.debug("connection #%d attached a management link for %s", peer.number, queue.name)
        return LinkInfo(Role.MANAGEMENT, path, queue)
    queue = _authorized_queue(peer, path, namespace, now_s, touch)
    if isinstance(link, Receiver):
        if queue.is_dead_letter_queue:
            raise NotAllowedError(f"Cannot send to the dead-letter queue {queue.name}.")
        link.max_message_size = codec.MAX_MESSAGE_BYTES
        log.info("connection #%d attached sender to %s", peer.number, queue.name)
        return LinkInfo(Role.ENTITY, path, queue)
    if asks_for_session(link):
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


def _authorized_queue(
    peer: Peer, path: str, namespace: Namespace, now_s: float, touch: Callable[[Queue], None]
) -> Queue:
    if not peer.authorized(path, now_s):
        raise UnauthorizedError(f"No valid token for '{path}': put a token on $cbs first.")
    queue = namespace.queue(path)
    touch(queue)
    return queue


def refuse(peer: Peer, link: Link, path: str, error: AmqpError) -> None:
    """Open the link and close it at once with the error, as Service Bus refuses an attach."""
    log.warning("connection #%d: attach to %r refused: %s: %s", peer.number, path, error.condition, error.description)
    if isinstance(error, (EntityNotFoundError, SessionsNotSupportedError)):
        # Service Bus answers an unknown entity (or a session receiver on a queue without sessions) with a
        # null terminus before the detach; the SDK's session receiver would read an echoed one as granted.
        (link.source if link.is_sender else link.target).type = Terminus.UNSPECIFIED
    link.open()
    link.condition = error_condition(error.condition, error.description)
    link.close()


def asks_for_session(link: Link) -> bool:
    """Whether a receiving client's source carries the session filter (it names a session, or any session)."""
    filters = link.remote_source.filter
    filters.rewind()
    if not filters.next():
        return False
    value = filters.get_object()
    return isinstance(value, dict) and SESSION_FILTER in {str(key) for key in value}
