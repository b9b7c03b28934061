"""Where queue state lives between runs: nowhere (memory only) or one SQLite file.

Both stores implement the entities' `Journal`. The broker calls `commit()` before it acknowledges a send or a
settlement, so whatever a client was told has happened is on disk. SQLite runs in WAL mode with
`synchronous=NORMAL`: a commit survives the broker process dying at any point (kill -9 included); an operating
system crash or power loss may lose the last commits.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.servicebus.errors import ConfigError
from emulators.servicebus.messages import MessageState, QueueMessage

log = logging.getLogger(__name__)

DATABASE_FILE = "servicebus.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    name TEXT PRIMARY KEY,
    next_sequence INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS payloads (
    entity TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (entity, sequence_number)
);
CREATE TABLE IF NOT EXISTS messages (
    entity TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    message_id TEXT,
    ttl_ms INTEGER,
    expires_ms INTEGER,
    state INTEGER NOT NULL,
    scheduled_ms INTEGER,
    delivery_count INTEGER NOT NULL,
    lock_token BLOB,
    locked_until_ms INTEGER,
    dead_letter_reason TEXT,
    dead_letter_description TEXT,
    PRIMARY KEY (entity, sequence_number)
);
CREATE TABLE IF NOT EXISTS seen_ids (
    entity TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_ms INTEGER NOT NULL,
    sequence_number INTEGER NOT NULL,
    PRIMARY KEY (entity, message_id)
);
"""

# Column names are the QueueMessage field names, so rows map onto messages one to one.
_STATE_FIELDS = (
    "enqueued_ms",
    "message_id",
    "ttl_ms",
    "expires_ms",
    "state",
    "scheduled_ms",
    "delivery_count",
    "lock_token",
    "locked_until_ms",
    "dead_letter_reason",
    "dead_letter_description",
)
_MESSAGE_COLUMNS = ", ".join(_STATE_FIELDS)


@dataclass
class EntityState:
    """What an earlier run left for one entity."""

    messages: list[QueueMessage] = field(default_factory=list)
    next_sequence: int = 1
    seen_ids: list[tuple[str, int, int]] = field(default_factory=list)


class MemoryStore:
    """Memory only: the queues themselves hold all state, nothing is written anywhere."""

    def add(self, entity: str, message: QueueMessage) -> None:
        pass

    def update(self, entity: str, message: QueueMessage) -> None:
        pass

    def delete(self, entity: str, sequence_number: int) -> None:
        pass

    def save_next_sequence(self, entity: str, next_sequence: int) -> None:
        pass

    def save_seen_id(self, entity: str, message_id: str, seen_ms: int, sequence_number: int) -> None:
        pass

    def delete_seen_id(self, entity: str, message_id: str) -> None:
        pass

    def load(self) -> dict[str, EntityState]:
        return {}

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


class SqliteStore:
    """Every change is a statement in the open transaction; `commit()` makes the batch durable."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / DATABASE_FILE
        self._db = sqlite3.connect(self.path, isolation_level="DEFERRED")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.commit()

    def add(self, entity: str, message: QueueMessage) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO payloads (entity, sequence_number, payload) VALUES (?, ?, ?)",
            (entity, message.sequence_number, message.payload),
        )
        self._db.execute(
            f"INSERT OR REPLACE INTO messages (entity, sequence_number, {_MESSAGE_COLUMNS}) "  # noqa: S608 - fixed columns
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entity, message.sequence_number, *_state_row(message)),
        )

    def update(self, entity: str, message: QueueMessage) -> None:
        assignments = ", ".join(f"{column} = ?" for column in _STATE_FIELDS)
        self._db.execute(
            f"UPDATE messages SET {assignments} WHERE entity = ? AND sequence_number = ?",  # noqa: S608 - fixed columns
            (*_state_row(message), entity, message.sequence_number),
        )

    def delete(self, entity: str, sequence_number: int) -> None:
        key = (entity, sequence_number)
        self._db.execute("DELETE FROM messages WHERE entity = ? AND sequence_number = ?", key)
        self._db.execute("DELETE FROM payloads WHERE entity = ? AND sequence_number = ?", key)

    def save_next_sequence(self, entity: str, next_sequence: int) -> None:
        self._db.execute(
            "INSERT INTO entities (name, next_sequence) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET next_sequence = excluded.next_sequence",
            (entity, next_sequence),
        )

    def save_seen_id(self, entity: str, message_id: str, seen_ms: int, sequence_number: int) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO seen_ids (entity, message_id, seen_ms, sequence_number) VALUES (?, ?, ?, ?)",
            (entity, message_id, seen_ms, sequence_number),
        )

    def delete_seen_id(self, entity: str, message_id: str) -> None:
        self._db.execute("DELETE FROM seen_ids WHERE entity = ? AND message_id = ?", (entity, message_id))

    def load(self) -> dict[str, EntityState]:
        states: dict[str, EntityState] = {}
        for name, next_sequence in self._db.execute("SELECT name, next_sequence FROM entities"):
            states.setdefault(name, EntityState()).next_sequence = next_sequence
        rows = self._db.execute(
            f"SELECT m.entity, m.sequence_number, p.payload, {_MESSAGE_COLUMNS} "  # noqa: S608 - fixed columns
            "FROM messages m JOIN payloads p USING (entity, sequence_number) ORDER BY m.entity, m.sequence_number"
        )
        for entity, sequence_number, payload, *state in rows:
            states.setdefault(entity, EntityState()).messages.append(_message(sequence_number, payload, state))
        for entity, message_id, seen_ms, sequence_number in self._db.execute(
            "SELECT entity, message_id, seen_ms, sequence_number FROM seen_ids"
        ):
            states.setdefault(entity, EntityState()).seen_ids.append((message_id, seen_ms, sequence_number))
        return states

    def commit(self) -> None:
        if self._db.in_transaction:
            self._db.commit()

    def close(self) -> None:
        self.commit()
        self._db.close()


def _state_row(message: QueueMessage) -> tuple[object, ...]:
    return (
        message.enqueued_ms,
        message.message_id,
        message.ttl_ms,
        message.expires_ms,
        int(message.state),
        message.scheduled_ms,
        message.delivery_count,
        None if message.lock_token is None else message.lock_token.bytes,
        message.locked_until_ms,
        message.dead_letter_reason,
        message.dead_letter_description,
    )


def _message(sequence_number: int, payload: bytes, state: Sequence[Any]) -> QueueMessage:
    fields = dict(zip(_STATE_FIELDS, state, strict=True))
    token = fields.pop("lock_token")
    fields["state"] = MessageState(fields["state"])
    lock_token = None if token is None else uuid.UUID(bytes=bytes(token))
    return QueueMessage(sequence_number=sequence_number, payload=bytes(payload), lock_token=lock_token, **fields)


Store = MemoryStore | SqliteStore


def open_store(data_dir: Path | None) -> Store:
    if data_dir is None:
        log.info("memory-only store: messages do not survive a restart")
        return MemoryStore()
    try:
        store = SqliteStore(data_dir)
    except (OSError, sqlite3.Error) as e:
        raise ConfigError(f"--data-dir: cannot keep a database in {data_dir}: {e}") from e
    log.info("durable store at %s", store.path)
    return store
