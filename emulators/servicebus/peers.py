"""One client connection as the broker sees it: its number, its tokens, its links and what each link is for.

Also the small shapes every room of the broker shares: an AMQP error condition as Service Bus sends it, the wall
clock in milliseconds the queues run on, and one message sent on a link.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from proton import Condition, Delivery, Link, Sender, symbol

from emulators.servicebus import cbs
from emulators.servicebus.entities import Queue

_T = TypeVar("_T")


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


def present(value: _T | None) -> _T:
    """Proton types every endpoint of an event as optional; the handlers only get events that have it."""
    if value is None:
        raise RuntimeError("proton event without the expected endpoint")
    return value


def send(link: Sender, tag: bytes, payload: bytes, *, settled: bool) -> Delivery:
    delivery = link.delivery(tag)  # type: ignore[arg-type]  # proton takes binary tags; its hint says str
    link.send(payload)
    link.advance()
    if settled:
        delivery.settle()
    return delivery
