"""The simulated storage account's contents and the server's plumbing (`ServerBase`): the data model that
`sim.storage.queues` and `sim.storage.blobs` serve the REST operations from (see `sim.storage.transport`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from xml.sax.saxutils import escape

from azure.core.utils import CaseInsensitiveDict

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
BLOB_PORT, QUEUE_PORT = 10000, 10001
CONNECTION_STRING = (
    f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
    f"BlobEndpoint=http://127.0.0.1:{BLOB_PORT}/{ACCOUNT};QueueEndpoint=http://127.0.0.1:{QUEUE_PORT}/{ACCOUNT};"
)
NEVER = "Fri, 31 Dec 9999 23:59:59 GMT"
LIST_MAX = 5000


@dataclass(frozen=True)
class Listing:
    """One page of a List operation (blobs or queues), read from its query: the names from `marker` on that start
    with `prefix`, at most `most` of them, sorted; `next` is the next page's marker ("" after the last page)."""

    prefix: str
    marker: str
    most: int
    page: list[str]
    next: str
    with_meta: bool  # `include=metadata`


def listing(names: Iterable[str], query: dict[str, str], default_most: int) -> Listing:
    prefix, marker = query.get("prefix", ""), query.get("marker", "")
    most = int(query.get("maxresults", default_most))
    chosen = sorted(n for n in names if n.startswith(prefix) and n >= marker)
    rest = chosen[most:]
    with_meta = "metadata" in query.get("include", "")
    return Listing(prefix, marker, most, chosen[:most], rest[0] if rest else "", with_meta)


def http_date(epoch_s: float) -> str:
    return formatdate(int(epoch_s), usegmt=True)


def _meta(headers: CaseInsensitiveDict) -> dict[str, str]:
    return {k[len("x-ms-meta-") :]: v for k, v in headers.items() if k.lower().startswith("x-ms-meta-")}


def _meta_headers(metadata: dict[str, str]) -> dict[str, str]:
    return {f"x-ms-meta-{k}": v for k, v in metadata.items()}


def _meta_xml(metadata: dict[str, str]) -> str:
    return "<Metadata>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in metadata.items()) + "</Metadata>"


class Answer(Exception):
    """An error answer of the service: status, error code, and the headers it carries."""

    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code, self.message = status, code, message or code


@dataclass
class Message:
    id: str
    text: str
    inserted_s: float
    expires: str
    visible_s: float
    pop_receipt: str = ""
    dequeue_count: int = 0


@dataclass
class Queue:
    metadata: dict[str, str] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)


@dataclass
class Lease:
    id: str
    span_s: int | None  # the duration it was acquired with (None: infinite)
    expires_s: float | None  # None: infinite
    broken_s: float | None = None  # when a break ends (None: not breaking)


@dataclass
class Blob:
    data: bytes
    etag: str
    created_s: float
    modified_s: float
    metadata: dict[str, str]
    content_type: str | None
    content_encoding: str | None
    lease: Lease | None = None
    broken: bool = False


@dataclass
class Account:
    """The account's contents: what every simulated instance sees through its own clients."""

    queues: dict[str, Queue] = field(default_factory=dict)
    containers: dict[str, dict[str, Blob]] = field(default_factory=dict)
    transactions: dict[str, int] = field(default_factory=dict)

    def count(self, operation: str) -> None:
        self.transactions[operation] = self.transactions.get(operation, 0) + 1


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


Observer = Callable[[str, "str | None", Any], None]  # (operation, instance, detail)
# operation -> None (served), "5xx", "timeout", "slow" or "late" (answered seconds late), "lost" (applied, no answer)
Fault = Callable[[str], str | None]


class ServerBase:
    """What every operation needs: the account, the world's clock `now()` (epoch seconds), seeded ids and
    ETags, and `serve`, which counts the operation and turns an `Answer` into the service's error reply."""

    def __init__(
        self, account: Account, now: Callable[[], float], rng: random.Random, observe: Observer | None = None
    ) -> None:
        self.account, self.now, self.rng = account, now, rng
        self.observe = observe
        self._etag = 0
        self.caller: str | None = None  # the instance whose request is being served (for `observe`)
        # a blob listing's page when the client names none (smaller: `sim.checks.costs.scaled`)
        self.list_max = LIST_MAX

    def _new_etag(self) -> str:
        self._etag += 1
        return f'"0x8D{self._etag:013X}"'

    def _id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def serve(self, operation: str, call: Callable[[], Reply]) -> Reply:
        self.account.count(operation)
        try:
            return call()
        except Answer as e:
            text = (
                '<?xml version="1.0" encoding="utf-8"?><Error>'
                f"<Code>{e.code}</Code><Message>{escape(e.message)}</Message></Error>"
            )
            return Reply(e.status, {"x-ms-error-code": e.code, "Content-Type": "application/xml"}, text.encode())

    @staticmethod
    def _unsupported() -> Reply:
        raise Answer(400, "UnsupportedHttpVerb", "not simulated")
