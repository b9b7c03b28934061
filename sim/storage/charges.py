"""Who pays for a storage request: `charged(spent)` makes `spent` the caller operation being paid for in the
current task's context (and in every task it starts, which copy it); the storage transport
(`sim.storage.transport.SimTransport`) adds each request it serves to the operation of the context that sent it
(`spent`), with what a listing read. `sim.checks.costs` says who sets one, and `sim.checks.cost_promises` what each
may cost."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import parse_qs, unquote, urlparse

from sim.storage.account import Reply


@dataclass(frozen=True)
class Request:
    operation: str  # the service's name: "ListBlobs", "GetBlob", "DeleteBlob"...
    container: str  # or queue
    prefix: str = ""  # a listing's
    listed: int = 0  # the entries a listing answered


@dataclass
class Spent:
    """The storage requests one caller operation made."""

    what: str
    requests: list[Request] = field(default_factory=list)

    def count(self, operation: str | None = None, prefix: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if operation in (None, r.operation) and (prefix is None or r.prefix.startswith(prefix))
        )


CALLER: ContextVar[Spent | None] = ContextVar("sim_caller", default=None)


@contextmanager
def charged(spent: Spent | None) -> Iterator[Spent | None]:
    token = CALLER.set(spent)
    try:
        yield spent
    finally:
        CALLER.reset(token)


def spent(operation: str, url: str, reply: Reply) -> None:
    """A request served: added to the operation of the context that sent it, if any."""
    paying = CALLER.get()
    if paying is None:
        return
    container, prefix = _where(url)
    if operation != "ListBlobs":
        paying.requests.append(Request(operation, container))
        return
    paying.requests.append(Request(operation, container, prefix, reply.body.count(b"<Blob>")))


@lru_cache(maxsize=4096)
def _where(url: str) -> tuple[str, str]:
    """The container (or queue) a request names, and its listing prefix (a pure function of the URL, kept)."""
    parsed = urlparse(url)
    parts = [unquote(p) for p in parsed.path.split("/") if p]
    container = parts[1] if len(parts) > 1 else ""  # parts[0] is the account
    return container, parse_qs(parsed.query).get("prefix", [""])[0]
