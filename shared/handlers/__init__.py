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
    batch_id: str
    chunk: int
    attempt: int  # 1 on first delivery
    settings: Settings


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
