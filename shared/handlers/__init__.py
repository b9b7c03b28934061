"""Chunk handlers: the pluggable work done on each chunk, reporting an outcome per item.

A handler is any callable `handler(items, context)` returning a `ChunkResult` (or an awaitable of
one). Sync handlers run on a worker thread so CPU-heavy work never blocks the drain loop. The app
setting `HANDLER` names it as `module:function`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from shared.core.errors import HandlerError
from shared.core.errors import Overloaded as Overloaded  # for handlers: `raise Overloaded(retry_after_s=...)`
from shared.core.settings import Settings


@dataclass(frozen=True)
class ItemOutcome:
    ok: bool
    value: Any = None
    reason: str | None = None
    retryable: bool = True

    @classmethod
    def success(cls, value: Any = None) -> ItemOutcome:
        return cls(True, value=value)

    @classmethod
    def failure(cls, reason: str, *, retryable: bool = True) -> ItemOutcome:
        """A failed item: retried (alone) while `retryable`, else sent straight to the poison queue."""
        return cls(False, reason=reason, retryable=retryable)


@dataclass(frozen=True)
class ChunkResult:
    outcomes: Sequence[ItemOutcome]
    summary: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkContext:
    """What a handler knows of the chunk it is given: `positions[i]` is `items[i]`'s place in its batch (a
    retried chunk holds only the items still to do, so `i` alone is not stable), and `item_key(i)` the item's key,
    `batch_id:position`: the same on every delivery and retry of that item, and unique across batches and tenants.
    Send it as the idempotency key of a downstream call to have that call take effect once (docs/handler.md)."""

    batch_id: str
    chunk: int
    attempt: int  # 1 on first delivery
    settings: Settings
    positions: Sequence[int] = ()

    def item_key(self, index: int) -> str:
        """`items[index]`'s stable key: `batch_id:position`."""
        return f"{self.batch_id}:{self.positions[index]}"

    @property
    def item_keys(self) -> list[str]:
        return [f"{self.batch_id}:{position}" for position in self.positions]


@runtime_checkable
class ChunkHandler(Protocol):
    def __call__(self, items: Sequence[Any], context: ChunkContext, /) -> ChunkResult | Awaitable[ChunkResult]: ...


def load_handler(ref: str) -> ChunkHandler:
    """Import `module:function`; fails naming the HANDLER setting if it is not a callable."""
    module_name, _, attribute = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise HandlerError(f"HANDLER {ref!r}: cannot import {module_name!r}: {e}") from e
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise HandlerError(f"HANDLER {ref!r}: {attribute!r} is not a callable in {module_name!r}")
    return handler  # type: ignore[no-any-return]


def is_async(handler: ChunkHandler) -> bool:
    call = type(handler).__call__ if not inspect.isfunction(handler) else handler
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def checked(result: object, expected: int) -> ChunkResult:
    """The handler's result, or HandlerError if it broke the contract (one outcome per item)."""
    if not isinstance(result, ChunkResult):
        raise HandlerError(f"handler returned {type(result).__name__}, not ChunkResult")
    if len(result.outcomes) != expected:
        raise HandlerError(f"handler returned {len(result.outcomes)} outcomes for {expected} items")
    return result
