"""Azure Storage queues and blobs in memory, behind an azure-core async transport.

The app's real storage clients (the SDK's aio `QueueServiceClient` and `BlobServiceClient`, with the app's
retry options and its transaction counter) run unchanged over `SimTransport`: it answers the REST operations
the app uses from an in-memory account, on the simulated clock, with the answers the service gives, failures
included (status, `x-ms-error-code`, the error body), so the SDK's own error mapping and the app's translation
(`shared.store.storage.translated`) run as in production. `tests/sim/test_conformance_storage.py` runs the
same checks against this and against Azurite.

Modelled: queues (create, metadata, approximate count, list with prefix, metadata and markers; put with
visibility and TTL; get with visibility timeout, pop receipts and dequeue counts; peek; update with content
and visibility; delete by pop receipt), containers (create), block blobs as single puts (If-Match,
If-None-Match: *, metadata, content type and encoding, ETags, whole-second Last-Modified), ranged get, get
properties, set metadata, delete, list with prefix, metadata and markers, and leases (acquire with duration or
infinite, renew, release, break, change; expiry on the world's clock; writes to a leased blob need its id).

Not modelled: anything the app does not call (block lists, append/page blobs, snapshots, versions, SAS,
CORS, service properties, queue ACLs, message TTL expiry other than "never"), the service's throttling
(503 ServerBusy at scalability targets appears only as an injected fault), the 64 KiB message limit
(checked at intake by the app itself), and exact error message texts (codes and statuses are modelled).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import AsyncHttpResponse, AsyncHttpTransport
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
Fault = Callable[[str], str | None]  # operation -> None (served), "5xx", "timeout" or "lost" (applied, no answer)


class StorageServer:
    """The REST operations the app uses, against one `Account`, on the clock `now()` (epoch seconds)."""

    def __init__(
        self, account: Account, now: Callable[[], float], rng: random.Random, observe: Observer | None = None
    ) -> None:
        self.account, self.now, self.rng = account, now, rng
        self.observe = observe
        self._etag = 0
        self.caller: str | None = None  # the instance whose request is being served (for `observe`)

    # ---- plumbing -------------------------------------------------------------------------------------------
    def _new_etag(self) -> str:
        self._etag += 1
        return f'"0x8D{self._etag:013X}"'

    def _id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def handle(self, method: str, url: str, headers: CaseInsensitiveDict, body: bytes) -> tuple[str, Reply]:
        """The operation's name (for faults and counting) and its answer."""
        parsed = urlparse(url)
        port = parsed.port
        parts = [unquote(p) for p in parsed.path.split("/")[1:]]
        if parts and parts[0] == ACCOUNT:
            parts = parts[1:]
        parts = [p for p in parts if p != ""] if len(parts) <= 1 else parts
        query = {k: v[0] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
        if port == QUEUE_PORT:
            return self._queue_op(method, parts, query, headers, body)
        return self._blob_op(method, parts, query, headers, body)

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

    # ---- queues ---------------------------------------------------------------------------------------------
    def _queue_op(
        self, method: str, parts: list[str], query: dict[str, str], headers: CaseInsensitiveDict, body: bytes
    ) -> tuple[str, Reply]:
        if not parts or parts == [""]:
            return "ListQueues", self.serve("ListQueues", lambda: self.list_queues(query))
        name = parts[0]
        if len(parts) == 1:
            if method == "PUT" and query.get("comp") == "metadata":
                return "SetQueueMetadata", self.serve(
                    "SetQueueMetadata", lambda: self.set_queue_metadata(name, headers)
                )
            if method == "GET" and query.get("comp") == "metadata":
                return "GetQueueMetadata", self.serve("GetQueueMetadata", lambda: self.queue_properties(name))
            if method == "PUT":
                return "CreateQueue", self.serve("CreateQueue", lambda: self.create_queue(name, headers))
            if method == "DELETE":
                return "DeleteQueue", self.serve("DeleteQueue", lambda: self.delete_queue(name))
        elif len(parts) == 2:
            if method == "POST":
                return "PutMessage", self.serve("PutMessage", lambda: self.put_message(name, query, body))
            if method == "GET" and query.get("peekonly") == "true":
                return "PeekMessages", self.serve("PeekMessages", lambda: self.get_messages(name, query, peek=True))
            if method == "GET":
                return "GetMessages", self.serve("GetMessages", lambda: self.get_messages(name, query, peek=False))
            if method == "DELETE":
                return "ClearMessages", self.serve("ClearMessages", lambda: self.clear(name))
        elif len(parts) == 3:
            if method == "PUT":
                return "UpdateMessage", self.serve(
                    "UpdateMessage", lambda: self.update_message(name, parts[2], query, body)
                )
            if method == "DELETE":
                return "DeleteMessage", self.serve("DeleteMessage", lambda: self.delete_message(name, parts[2], query))
        return "Unsupported", self.serve("Unsupported", self._unsupported)

    @staticmethod
    def _unsupported() -> Reply:
        raise Answer(400, "UnsupportedHttpVerb", "not simulated")

    def _queue(self, name: str) -> Queue:
        found = self.account.queues.get(name)
        if found is None:
            raise Answer(404, "QueueNotFound", "The specified queue does not exist.")
        return found

    def create_queue(self, name: str, headers: CaseInsensitiveDict) -> Reply:
        metadata = _meta(headers)
        existing = self.account.queues.get(name)
        if existing is None:
            self.account.queues[name] = Queue(metadata)
            return Reply(201)
        if existing.metadata == metadata:
            return Reply(204)
        raise Answer(409, "QueueAlreadyExists", "The specified queue already exists.")

    def delete_queue(self, name: str) -> Reply:
        self._queue(name)
        del self.account.queues[name]
        return Reply(204)

    def set_queue_metadata(self, name: str, headers: CaseInsensitiveDict) -> Reply:
        self._queue(name).metadata = _meta(headers)
        return Reply(204)

    def queue_properties(self, name: str) -> Reply:
        queue = self._queue(name)
        head = {"x-ms-approximate-messages-count": str(len(queue.messages)), **_meta_headers(queue.metadata)}
        return Reply(200, head)

    def list_queues(self, query: dict[str, str]) -> Reply:
        prefix, marker = query.get("prefix", ""), query.get("marker", "")
        most = int(query.get("maxresults", LIST_MAX))
        names = sorted(n for n in self.account.queues if n.startswith(prefix) and n >= marker)
        page, rest = names[:most], names[most:]
        with_meta = "metadata" in query.get("include", "")
        items = "".join(
            f"<Queue><Name>{n}</Name>{_meta_xml(self.account.queues[n].metadata) if with_meta else ''}</Queue>"
            for n in page
        )
        xml = (
            f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1/{ACCOUNT}/">'
            f"<Prefix>{escape(prefix)}</Prefix><MaxResults>{most}</MaxResults><Queues>{items}</Queues>"
            f"<NextMarker>{rest[0] if rest else ''}</NextMarker></EnumerationResults>"
        )
        return Reply(200, {"Content-Type": "application/xml"}, xml.encode())

    @staticmethod
    def _message_text(body: bytes) -> str:
        node = ElementTree.fromstring(body).find("MessageText")  # noqa: S314 (the app's own SDK wrote it)
        return (node.text or "") if node is not None else ""

    def put_message(self, name: str, query: dict[str, str], body: bytes) -> Reply:
        queue = self._queue(name)
        now = self.now()
        ttl = int(query.get("messagettl", 7 * 86400))
        expires = NEVER if ttl == -1 else http_date(now + ttl)
        message = Message(
            self._id(), self._message_text(body), now, expires, now + int(query.get("visibilitytimeout", 0))
        )
        message.pop_receipt = self._id()[:16]
        queue.messages.append(message)
        xml = (
            '<?xml version="1.0" encoding="utf-8"?><QueueMessagesList><QueueMessage>'
            f"<MessageId>{message.id}</MessageId><InsertionTime>{http_date(now)}</InsertionTime>"
            f"<ExpirationTime>{expires}</ExpirationTime><PopReceipt>{message.pop_receipt}</PopReceipt>"
            f"<TimeNextVisible>{http_date(message.visible_s)}</TimeNextVisible></QueueMessage></QueueMessagesList>"
        )
        return Reply(201, {"Content-Type": "application/xml"}, xml.encode())

    def get_messages(self, name: str, query: dict[str, str], *, peek: bool) -> Reply:
        queue = self._queue(name)
        now = self.now()
        most = int(query.get("numofmessages", 1))
        if not 1 <= most <= 32:
            raise Answer(400, "OutOfRangeQueryParameterValue", "numofmessages must be 1 to 32")
        visible = [m for m in queue.messages if m.visible_s <= now][:most]
        out = []
        received: list[tuple[str, str]] = []
        for m in visible:
            if peek:
                out.append(
                    f"<QueueMessage><MessageId>{m.id}</MessageId><InsertionTime>{http_date(m.inserted_s)}</InsertionTime>"
                    f"<ExpirationTime>{m.expires}</ExpirationTime><DequeueCount>{m.dequeue_count}</DequeueCount>"
                    f"<MessageText>{escape(m.text)}</MessageText></QueueMessage>"
                )
                continue
            m.dequeue_count += 1
            m.pop_receipt = self._id()[:16]
            m.visible_s = now + int(query.get("visibilitytimeout", 30))
            received.append((m.id, m.text))
            out.append(
                f"<QueueMessage><MessageId>{m.id}</MessageId><InsertionTime>{http_date(m.inserted_s)}</InsertionTime>"
                f"<ExpirationTime>{m.expires}</ExpirationTime><PopReceipt>{m.pop_receipt}</PopReceipt>"
                f"<TimeNextVisible>{http_date(m.visible_s)}</TimeNextVisible><DequeueCount>{m.dequeue_count}</DequeueCount>"
                f"<MessageText>{escape(m.text)}</MessageText></QueueMessage>"
            )
        if not peek:
            # A received message goes to the back: the service is best-effort FIFO, and a message that reappears
            # after its visibility timeout is not ahead of those that waited.
            for m in visible:
                queue.messages.remove(m)
                queue.messages.append(m)
        if received and self.observe is not None:
            self.observe("GetMessages", self.caller, received)
        xml = '<?xml version="1.0" encoding="utf-8"?><QueueMessagesList>' + "".join(out) + "</QueueMessagesList>"
        return Reply(200, {"Content-Type": "application/xml"}, xml.encode())

    def _held(self, queue: Queue, message_id: str, query: dict[str, str]) -> Message:
        receipt = query.get("popreceipt", "")
        for m in queue.messages:
            if m.id == message_id:
                if m.pop_receipt != receipt:
                    # Held under a newer receipt (received again, or updated): a 400, not a 404 (Azure and Azurite)
                    raise Answer(
                        400, "PopReceiptMismatch",
                        "The specified pop receipt did not match the pop receipt for a dequeued message.",
                    )  # fmt: skip
                return m
        raise Answer(404, "MessageNotFound", "The specified message does not exist.")

    def update_message(self, name: str, message_id: str, query: dict[str, str], body: bytes) -> Reply:
        queue = self._queue(name)
        message = self._held(queue, message_id, query)
        if body:
            message.text = self._message_text(body)
        message.visible_s = self.now() + int(query.get("visibilitytimeout", 0))
        message.pop_receipt = self._id()[:16]
        head = {"x-ms-popreceipt": message.pop_receipt, "x-ms-time-next-visible": http_date(message.visible_s)}
        return Reply(204, head)

    def delete_message(self, name: str, message_id: str, query: dict[str, str]) -> Reply:
        queue = self._queue(name)
        queue.messages.remove(self._held(queue, message_id, query))
        return Reply(204)

    def clear(self, name: str) -> Reply:
        self._queue(name).messages.clear()
        return Reply(204)

    # ---- blobs ----------------------------------------------------------------------------------------------
    def _blob_op(
        self, method: str, parts: list[str], query: dict[str, str], headers: CaseInsensitiveDict, body: bytes
    ) -> tuple[str, Reply]:
        container = parts[0] if parts else ""
        blob = "/".join(parts[1:])
        comp = query.get("comp")
        if not blob:
            if method == "PUT" and query.get("restype") == "container":
                return "CreateContainer", self.serve("CreateContainer", lambda: self.create_container(container))
            if method == "GET" and comp == "list":
                return "ListBlobs", self.serve("ListBlobs", lambda: self.list_blobs(container, query))
            return "Unsupported", self.serve("Unsupported", self._unsupported)
        if method == "PUT" and comp == "lease":
            return "LeaseBlob", self.serve("LeaseBlob", lambda: self.lease(container, blob, headers))
        if method == "PUT" and comp == "metadata":
            return "SetBlobMetadata", self.serve(
                "SetBlobMetadata", lambda: self.set_blob_metadata(container, blob, headers)
            )
        if method == "PUT" and comp is None:
            return "PutBlob", self.serve("PutBlob", lambda: self.put_blob(container, blob, headers, body))
        if method == "GET" and comp is None:
            return "GetBlob", self.serve("GetBlob", lambda: self.get_blob(container, blob, headers))
        if method == "HEAD":
            return "GetBlobProperties", self.serve("GetBlobProperties", lambda: self.blob_properties(container, blob))
        if method == "DELETE":
            return "DeleteBlob", self.serve("DeleteBlob", lambda: self.delete_blob(container, blob, headers))
        return "Unsupported", self.serve("Unsupported", self._unsupported)

    def _container(self, name: str) -> dict[str, Blob]:
        found = self.account.containers.get(name)
        if found is None:
            raise Answer(404, "ContainerNotFound", "The specified container does not exist.")
        return found

    def _blob(self, container: str, name: str) -> Blob:
        found = self._container(container).get(name)
        if found is None:
            raise Answer(404, "BlobNotFound", "The specified blob does not exist.")
        return found

    def create_container(self, name: str) -> Reply:
        if name in self.account.containers:
            raise Answer(409, "ContainerAlreadyExists", "The specified container already exists.")
        self.account.containers[name] = {}
        return Reply(201, {"ETag": self._new_etag(), "Last-Modified": http_date(self.now())})

    def _lease_state(self, blob: Blob) -> str:
        lease = blob.lease
        if lease is None:
            return "broken" if blob.broken else "available"
        now = self.now()
        if lease.broken_s is not None:
            if now >= lease.broken_s:
                blob.lease, blob.broken = None, True
                return "broken"
            return "breaking"
        if lease.expires_s is not None and now >= lease.expires_s:
            return "expired"
        return "leased"

    def _check_lease_for_write(self, blob: Blob | None, headers: CaseInsensitiveDict) -> None:
        given = headers.get("x-ms-lease-id")
        if blob is None:
            if given:
                raise Answer(412, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")
            return
        state = self._lease_state(blob)
        active = state in ("leased", "breaking")
        if active and not given:
            raise Answer(412, "LeaseIdMissing", "There is currently a lease on the blob and no lease ID was specified.")
        if active and blob.lease is not None and given != blob.lease.id:
            raise Answer(412, "LeaseIdMismatchWithBlobOperation", "The lease ID specified did not match.")
        if not active and given:
            raise Answer(412, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")

    def _check_conditions(self, blob: Blob | None, headers: CaseInsensitiveDict) -> None:
        if_match, if_none = headers.get("If-Match"), headers.get("If-None-Match")
        if if_none == "*" and blob is not None:
            raise Answer(409, "BlobAlreadyExists", "The specified blob already exists.")
        if if_match is not None and (blob is None or (if_match != "*" and if_match != blob.etag)):
            if blob is None:
                raise Answer(404, "BlobNotFound", "The specified blob does not exist.")
            raise Answer(412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")
        if if_none not in (None, "*") and blob is not None and if_none == blob.etag:
            raise Answer(412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")

    def put_blob(self, container: str, name: str, headers: CaseInsensitiveDict, body: bytes) -> Reply:
        blobs = self._container(container)
        existing = blobs.get(name)
        self._check_conditions(existing, headers)
        self._check_lease_for_write(existing, headers)
        now = self.now()
        blob = Blob(
            body,
            self._new_etag(),
            existing.created_s if existing else now,
            now,
            _meta(headers),
            headers.get("x-ms-blob-content-type"),
            headers.get("x-ms-blob-content-encoding"),
        )
        if existing is not None:
            blob.lease, blob.broken = existing.lease, existing.broken
        blobs[name] = blob
        return Reply(201, {"ETag": blob.etag, "Last-Modified": http_date(now)})

    def _properties(self, blob: Blob) -> dict[str, str]:
        state = self._lease_state(blob)
        head = {
            "ETag": blob.etag,
            "Last-Modified": http_date(blob.modified_s),
            "x-ms-creation-time": http_date(blob.created_s),
            "x-ms-blob-type": "BlockBlob",
            "x-ms-lease-state": state,
            "x-ms-lease-status": "locked" if state in ("leased", "breaking") else "unlocked",
            **_meta_headers(blob.metadata),
        }
        if state == "leased" and blob.lease is not None:
            head["x-ms-lease-duration"] = "infinite" if blob.lease.expires_s is None else "fixed"
        if blob.content_type:
            head["Content-Type"] = blob.content_type
        if blob.content_encoding:
            head["Content-Encoding"] = blob.content_encoding
        return head

    def get_blob(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        head = self._properties(blob)
        wanted = headers.get("x-ms-range") or headers.get("Range")
        size = len(blob.data)
        if wanted is None:
            return Reply(200, {**head, "Content-Length": str(size)}, blob.data)
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start = int(first)
        if start >= size:
            raise Answer(416, "InvalidRange", "The range specified is invalid for the current size of the resource.")
        end = min(int(last) if last else size - 1, size - 1)
        data = blob.data[start : end + 1]
        head |= {"Content-Length": str(len(data)), "Content-Range": f"bytes {start}-{end}/{size}"}
        return Reply(206, head, data)

    def blob_properties(self, container: str, name: str) -> Reply:
        blob = self._blob(container, name)
        return Reply(200, {**self._properties(blob), "Content-Length": str(len(blob.data))})

    def set_blob_metadata(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        self._check_conditions(blob, headers)
        self._check_lease_for_write(blob, headers)
        blob.metadata = _meta(headers)
        blob.etag, blob.modified_s = self._new_etag(), self.now()
        return Reply(200, {"ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)})

    def delete_blob(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        self._check_conditions(blob, headers)
        self._check_lease_for_write(blob, headers)
        del self._container(container)[name]
        return Reply(202)

    def list_blobs(self, container: str, query: dict[str, str]) -> Reply:
        blobs = self._container(container)
        prefix, marker = query.get("prefix", ""), query.get("marker", "")
        most = int(query.get("maxresults", LIST_MAX))
        names = sorted(n for n in blobs if n.startswith(prefix) and n >= marker)
        page, rest = names[:most], names[most:]
        with_meta = "metadata" in query.get("include", "")
        items = []
        for n in page:
            blob = blobs[n]
            state = self._lease_state(blob)
            status = "locked" if state in ("leased", "breaking") else "unlocked"
            duration = ""
            if state == "leased" and blob.lease is not None:
                duration = f"<LeaseDuration>{'infinite' if blob.lease.expires_s is None else 'fixed'}</LeaseDuration>"
            content = f"<Content-Type>{escape(blob.content_type)}</Content-Type>" if blob.content_type else ""
            if blob.content_encoding:
                content += f"<Content-Encoding>{escape(blob.content_encoding)}</Content-Encoding>"
            items.append(
                f"<Blob><Name>{escape(n)}</Name><Properties><Creation-Time>{http_date(blob.created_s)}</Creation-Time>"
                f"<Last-Modified>{http_date(blob.modified_s)}</Last-Modified><Etag>{blob.etag}</Etag>"
                f"<Content-Length>{len(blob.data)}</Content-Length>{content}<BlobType>BlockBlob</BlobType>"
                f"<LeaseStatus>{status}</LeaseStatus><LeaseState>{state}</LeaseState>{duration}</Properties>"
                f"{_meta_xml(blob.metadata) if with_meta else ''}</Blob>"
            )
        xml = (
            f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1/{ACCOUNT}/" '
            f'ContainerName="{container}"><Prefix>{escape(prefix)}</Prefix>'
            f"{f'<Marker>{escape(marker)}</Marker>' if marker else ''}<MaxResults>{most}</MaxResults>"
            f"<Blobs>{''.join(items)}</Blobs>"
            f"<NextMarker>{escape(rest[0]) if rest else ''}</NextMarker></EnumerationResults>"
        )
        return Reply(200, {"Content-Type": "application/xml"}, xml.encode())

    def lease(self, container: str, name: str, headers: CaseInsensitiveDict) -> Reply:
        blob = self._blob(container, name)
        action = headers.get("x-ms-lease-action", "")
        given = headers.get("x-ms-lease-id")
        state = self._lease_state(blob)
        now = self.now()
        lease = blob.lease
        if action == "acquire":
            duration = int(headers.get("x-ms-lease-duration", "-1"))
            proposed = headers.get("x-ms-proposed-lease-id") or self._lease_id()
            if state in ("leased",) and lease is not None and lease.id != proposed:
                raise Answer(409, "LeaseAlreadyPresent", "There is already a lease present.")
            if state == "breaking":
                raise Answer(409, "LeaseIsBreakingAndCannotBeAcquired", "The lease is breaking.")
            span = None if duration == -1 else duration
            blob.lease = Lease(proposed, span, None if span is None else now + span)
            blob.broken = False
            return Reply(
                201, {"x-ms-lease-id": proposed, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if lease is None or given != lease.id:
            if lease is None:
                raise Answer(409, "LeaseNotPresentWithLeaseOperation", "There is currently no lease on the blob.")
            if action == "break":
                pass
            else:
                raise Answer(409, "LeaseIdMismatchWithLeaseOperation", "The lease ID specified did not match.")
        if action == "renew":
            if state == "breaking" or blob.broken:
                raise Answer(409, "LeaseIsBrokenAndCannotBeRenewed", "The lease is broken.")
            # The service keeps the duration the lease was acquired with; a renewal restarts it.
            lease.expires_s = None if lease.span_s is None else now + lease.span_s
            return Reply(
                200, {"x-ms-lease-id": lease.id, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if action == "release":
            blob.lease = None
            return Reply(200, {"ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)})
        if action == "change":
            lease.id = headers.get("x-ms-proposed-lease-id", lease.id)
            return Reply(
                200, {"x-ms-lease-id": lease.id, "ETag": blob.etag, "Last-Modified": http_date(blob.modified_s)}
            )
        if action == "break":
            period = int(headers.get("x-ms-lease-break-period", "0") or 0)
            if period <= 0 or state == "expired":
                blob.lease, blob.broken = None, True
                return Reply(202, {"x-ms-lease-time": "0", "ETag": blob.etag})
            lease.broken_s = now + period
            return Reply(202, {"x-ms-lease-time": str(period), "ETag": blob.etag})
        raise Answer(400, "InvalidHeaderValue", f"lease action {action!r}")

    def _lease_id(self) -> str:
        value = self.rng.getrandbits(128)
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class SimResponse(AsyncHttpResponse):
    def __init__(self, request: Any, reply: Reply) -> None:
        super().__init__(request, None)
        self.status_code = reply.status
        self.headers = CaseInsensitiveDict({"x-ms-request-id": "sim", "x-ms-version": "2025-01-05", **reply.headers})
        if "Content-Length" not in self.headers:
            self.headers["Content-Length"] = str(len(reply.body))
        self.reason = "OK" if reply.status < 400 else "Error"
        self.content_type = self.headers.get("Content-Type")
        self._content = reply.body

    def body(self) -> bytes:
        return self._content

    async def load_body(self) -> None:
        return None

    async def read(self) -> bytes:
        return self._content

    @property
    def content(self) -> bytes:
        return self._content

    def stream_download(self, pipeline: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        return _Stream(self, self._content)


class _Stream:
    """The body as the SDK's stream download generator gives it (it sets attributes on it)."""

    def __init__(self, response: SimResponse, data: bytes) -> None:
        self.response, self.request, self._left = response, response.request, [data] if data else []
        self.content_length = len(data)

    def __len__(self) -> int:
        return self.content_length

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop()


@dataclass
class StorageWeather:
    """What storage does to requests right now: faults by operation, and the latency of an answer."""

    rng: random.Random
    latency_s: tuple[float, float] = (0.001, 0.02)
    fault: Fault = field(default=lambda operation: None)

    def delay(self) -> float:
        low, high = self.latency_s
        return self.rng.uniform(low, high)


class SimTransport(AsyncHttpTransport):  # type: ignore[type-arg]
    """Every request of an instance's storage clients goes to the world's `StorageServer`, after a seeded
    latency; faults answer 503, time out, or lose the answer of an applied request."""

    def __init__(
        self,
        server: StorageServer,
        weather: StorageWeather,
        *,
        name: str | None = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.server, self.weather, self.name, self.alive = server, weather, name, alive

    async def __aenter__(self) -> SimTransport:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def sleep(self, duration: float) -> None:
        await asyncio.sleep(duration)

    async def send(self, request: Any, **kwargs: Any) -> SimResponse:
        await asyncio.sleep(self.weather.delay())
        if not self.alive():
            raise asyncio.CancelledError  # its process is gone: nothing it sends arrives
        body = _body(request)
        headers = CaseInsensitiveDict(dict(request.headers))
        probe = _operation_name(request.method, request.url)
        fault = self.weather.fault(probe)
        if fault == "timeout":
            await asyncio.sleep(10.0)
            raise ServiceRequestError("simulated: the request timed out")
        if fault == "5xx":
            reply = Reply(
                503,
                {"x-ms-error-code": "ServerBusy", "Content-Type": "application/xml"},
                b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                b"<Message>simulated outage</Message></Error>",
            )
            return SimResponse(request, reply)
        self.server.caller = self.name
        try:
            _, reply = self.server.handle(request.method, request.url, headers, body)
        finally:
            self.server.caller = None
        await asyncio.sleep(self.weather.delay())
        if fault == "lost":
            raise ServiceResponseError("simulated: the connection closed before the answer")
        return SimResponse(request, reply)


def _body(request: Any) -> bytes:
    data = getattr(request, "body", None)
    if data is None:
        data = getattr(request, "content", None)
    if data is None:
        return b""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    return b""


def _operation_name(method: str, url: str) -> str:
    parsed = urlparse(url)
    kind = "queue" if parsed.port == QUEUE_PORT else "blob"
    return f"{kind} {method}"
