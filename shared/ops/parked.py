"""What is parked in the poison queues, read without receiving (receiving hides a message from every other
reader): the first page of each poison queue (peeked), the parked chunks newest first a page at a time (from
the index the drainers write when they park a chunk, `shared.store.poison_index`), and one parked chunk in
detail. Each costs O(1) or O(page) storage calls whatever the queue's depth. Replaying them is
`shared.ops.replay`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from azure.storage.queue import QueueMessage

from shared.batch import envelope, poison
from shared.core.errors import MalformedEnvelope, MalformedRequest, NotFound
from shared.services import Services
from shared.store import poison_index
from shared.store.storage import translated

PAGE = 32


@dataclass(frozen=True)
class Parked:
    queue: str  # the poison queue
    message_id: str
    inserted_on: str | None
    message: poison.PoisonMessage

    def summary(self) -> dict[str, Any]:
        header = envelope.decode(self.message.chunk_text).header if self.message.chunk_text else None
        return {
            "poison_queue": self.queue,
            "message_id": self.message_id,
            "inserted_on": self.inserted_on,
            "work_queue": self.message.info.queue,
            "batch_id": header.batch_id if header else None,
            "chunk": header.chunk if header else None,
            "failed": self.message.info.failed,
            "attempt": self.message.info.attempt,
            "reason": self.message.info.reason,
            "replayable": self.message.chunk_text is not None,
        }

    def detail(self) -> dict[str, Any]:
        out = self.summary()
        if self.message.chunk_text is not None:
            chunk = envelope.decode(self.message.chunk_text)
            out["positions"] = list(chunk.header.positions or [])
            out["items"] = chunk.items
            out["claim_check"] = chunk.blob
        else:
            out["raw"] = self.message.raw
        return out


def parse(queue: str, message: QueueMessage) -> Parked:
    try:
        decoded = poison.decode(str(message.content))
    except MalformedEnvelope:
        decoded = poison.PoisonMessage(poison.PoisonInfo(queue, "unreadable poison message", 0, 0, ""), None, None)
    inserted = message.inserted_on.isoformat() if message.inserted_on else None
    return Parked(queue, str(message.id), inserted, decoded)


async def list_parked(services: Services) -> list[dict[str, Any]]:
    """Per partition: the poison queue's depth and the first 32 parked chunks (peeked: nothing is hidden)."""
    out = []
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        async with translated(f"peek {name}"):
            depth = (await client.get_queue_properties()).approximate_message_count or 0
            peeked = await client.peek_messages(max_messages=PAGE)
        out.append({"poison_queue": name, "depth": depth, "first": [parse(name, m).summary() for m in peeked]})
    return out


PARKED_PAGE, MAX_PARKED_PAGE = 32, 100  # parked chunks one page of the listing shows (default, most)


async def page_parked(services: Services, limit: int, continuation: str | None) -> dict[str, Any]:
    """Every partition's parked chunks from the index, newest first, `limit` at a time: one index listing per
    partition (a page per 5,000 entries) and one read per chunk shown. `continuation`: the token the previous
    page answered (the last chunk it showed); the next page starts after it."""
    after = parse_token(continuation) if continuation is not None else None
    state = await services.storage.ensure_container(services.settings.state_container)
    listed: list[tuple[int, str, str]] = []
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        listed += [(ms, message_id, name) for ms, message_id in await poison_index.listing(state, name)]
    newest = sorted((e for e in listed if after is None or (e[0], e[1]) < after), reverse=True)
    shown = []
    for _, message_id, name in newest[:limit]:
        entry = await poison_index.get(state, name, message_id)
        if entry is not None:
            shown.append(from_entry(entry).summary())
    last = newest[limit - 1] if len(newest) > limit else None
    return {"parked": shown, "continuation": f"{last[0]}.{last[1]}" if last else None}


def parse_token(token: str) -> tuple[int, str]:
    """A page's continuation, `<parked epoch ms>.<message id>`; a 400 for anything else."""
    ms, _, message_id = token.partition(".")
    if not (ms.isascii() and ms.isdigit() and len(ms) <= 15 and message_id and len(message_id) <= 64):
        raise MalformedRequest("continuation is not a token this API gave (pass back the one a page answered)")
    if not all(c.isascii() and (c.isalnum() or c == "-") for c in message_id):
        raise MalformedRequest("continuation is not a token this API gave (pass back the one a page answered)")
    return int(ms), message_id


async def inspect(services: Services, message_id: str) -> dict[str, Any]:
    """One index read per partition (then a peek at the first page, for chunks parked before the index, then a
    read of the chunks a replay set aside)."""
    state = await services.storage.ensure_container(services.settings.state_container)
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        entry = await poison_index.get(state, name, message_id)
        if entry is not None:
            return from_entry(entry).detail()
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        async with translated(f"peek {name}"):
            for m in await client.peek_messages(max_messages=PAGE):
                if m.id == message_id:
                    return parse(name, m).detail()
    for work_queue in services.settings.partition_queues():  # set aside by a replay: its batch is final
        kept = await poison_index.get_set_aside(state, services.settings.poison_queue(work_queue), message_id)
        if kept is not None:
            aside = from_entry(poison_index.Entry.from_json(kept)).detail()
            return aside | {
                "replayable": False,
                "set_aside": kept.get("set_aside"),
                "set_aside_at": kept.get("set_aside_at"),
            }
    raise NotFound(f"no parked chunk with message id {message_id}", message_id=message_id[:64])


def from_entry(entry: poison_index.Entry) -> Parked:
    try:
        decoded = poison.decode(entry.text)
    except MalformedEnvelope:
        decoded = poison.PoisonMessage(poison.PoisonInfo("?", "unreadable poison message", 0, 0, ""), None, None)
    return Parked(entry.poison_queue, entry.message_id, entry.inserted_on, decoded)
