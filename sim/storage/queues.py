"""Storage queues in the simulated account: the REST operations the app calls (see `sim.storage.transport`)."""

from __future__ import annotations

from xml.etree import ElementTree
from xml.sax.saxutils import escape

from azure.core.utils import CaseInsensitiveDict

from sim.storage.account import (
    ACCOUNT,
    LIST_MAX,
    NEVER,
    Answer,
    Message,
    Queue,
    Reply,
    ServerBase,
    _meta,
    _meta_headers,
    _meta_xml,
    http_date,
    listing,
)


class QueueOps(ServerBase):
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
        listed = listing(self.account.queues, query, LIST_MAX)
        items = "".join(
            f"<Queue><Name>{n}</Name>{_meta_xml(self.account.queues[n].metadata) if listed.with_meta else ''}</Queue>"
            for n in listed.page
        )
        xml = (
            f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1/{ACCOUNT}/">'
            f"<Prefix>{escape(listed.prefix)}</Prefix><MaxResults>{listed.most}</MaxResults><Queues>{items}</Queues>"
            f"<NextMarker>{listed.next}</NextMarker></EnumerationResults>"
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
        if self.observe is not None:
            self.observe("PutMessage", self.caller, (name, message.text))
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
