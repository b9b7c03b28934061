"""The namespace: which queues exist, how client addresses name them, and what survives from an earlier run."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from urllib.parse import urlparse

from emulators.servicebus.config import is_valid_queue_name
from emulators.servicebus.entities import Queue, new_queue
from emulators.servicebus.errors import EntityNotFoundError
from emulators.servicebus.messages import DEAD_LETTER_SUFFIX, Journal, QueueProperties
from emulators.servicebus.store import EntityState

log = logging.getLogger(__name__)


def entity_path(address: str | None) -> str:
    """`amqps://host:port/q/$DeadLetterQueue` (the SDK sends full URLs even to the emulator) → `q/$DeadLetterQueue`."""
    if not address:
        return ""
    parsed = urlparse(address)
    path = parsed.path if parsed.scheme and parsed.netloc else address
    return path.strip("/")


class Namespace:
    """All queues of the one namespace; names are case-insensitive, as in Service Bus."""

    def __init__(
        self,
        name: str,
        queues: Mapping[str, QueueProperties],
        journal: Journal,
        *,
        auto_create: bool = False,
    ) -> None:
        self.name = name
        self.auto_create = auto_create
        self._journal = journal
        self._queues: dict[str, Queue] = {}
        for queue_name, properties in queues.items():
            self._add(queue_name, properties)

    def queue(self, path: str) -> Queue:
        """The queue or dead-letter subqueue at `path`; auto-created if the stand-in extension is on."""
        base, dead_letter = _split_dead_letter(path)
        queue = self._queues.get(base.lower())
        if queue is None:
            queue = self._create_on_demand(base)
        if dead_letter:
            assert queue.dead_letter_queue is not None
            return queue.dead_letter_queue
        return queue

    def queues(self) -> Iterator[Queue]:
        """Every queue and dead-letter subqueue."""
        for queue in self._queues.values():
            yield queue
            if queue.dead_letter_queue is not None:
                yield queue.dead_letter_queue

    def restore(self, states: Mapping[str, EntityState]) -> None:
        """Load what the store kept; entities no longer configured are kept on disk but not served."""
        by_name = {queue.name: queue for queue in self.queues()}
        for entity, state in states.items():
            base, _ = _split_dead_letter(entity)
            if entity not in by_name and self.auto_create and is_valid_queue_name(base):
                self._add(base, QueueProperties())
                by_name = {queue.name: queue for queue in self.queues()}
            queue = by_name.get(entity)
            if queue is None:
                log.warning(
                    "stored entity %s is not in the config: its %d messages are not served", entity, len(state.messages)
                )
                continue
            queue.restore(state.messages, state.next_sequence, state.seen_ids)
            if state.messages:
                log.info("restored %d messages of %s", len(state.messages), entity)

    def _create_on_demand(self, name: str) -> Queue:
        if not self.auto_create or not is_valid_queue_name(name) or "$" in name:
            raise EntityNotFoundError(f"The messaging entity 'sb://{self.name}/{name}' could not be found.")
        log.info("auto-created queue %s with default properties (--auto-create-queues)", name)
        return self._add(name, QueueProperties())

    def _add(self, name: str, properties: QueueProperties) -> Queue:
        queue = new_queue(name, properties, self._journal)
        self._queues[name.lower()] = queue
        return queue


def _split_dead_letter(path: str) -> tuple[str, bool]:
    if path.lower().endswith(DEAD_LETTER_SUFFIX.lower()):
        return path[: -len(DEAD_LETTER_SUFFIX)], True
    return path, False
