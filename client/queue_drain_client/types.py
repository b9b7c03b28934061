"""The API's answers, typed (TypedDicts: each answer is the JSON object the route gave, so a field the app adds
later is still there to read). `Batch` (a submit's answer) and `ResultsPage` are dataclasses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

BatchState = Literal[
    "submitting",
    "abandoned",
    "scheduled",
    "accepted",
    "processing",
    "cancelling",
    "completed",
    "completed_with_failures",
    "cancelled",
    "expired",
    "failed",
]
# Every status a batch stays in once reached.
FINAL: frozenset[str] = frozenset(
    {"completed", "completed_with_failures", "cancelled", "expired", "failed", "abandoned"}
)


class ItemCounts(TypedDict):
    total: int
    succeeded: int
    failed: int
    pending: int
    cancelled: NotRequired[int]
    expired: NotRequired[int]


class ChunkCounts(TypedDict):
    total: int
    done: int
    poisoned: int
    pending: int


class Lane(TypedDict):
    tenant: str
    priority: str
    depth: NotRequired[int]


class Callback(TypedDict):
    """A completion notice's delivery: `state` waiting, pending, delivered or failed."""

    url: str
    state: str
    attempts: NotRequired[int]
    next_attempt_at: NotRequired[str | None]
    last_status: NotRequired[str | None]
    last_error: NotRequired[str | None]
    delivered_at: NotRequired[str | None]
    gave_up_at: NotRequired[str | None]


class BatchStatus(TypedDict):
    """GET /api/batches/{id} (and a cancel's answer)."""

    batch_id: str
    status: BatchState
    items: ItemCounts
    chunks: ChunkCounts
    created_at: str | None
    accepted_at: NotRequired[str | None]
    first_result_at: NotRequired[str | None]
    last_result_at: NotRequired[str | None]
    completed_at: NotRequired[str | None]
    submission: NotRequired[Any]
    trigger: NotRequired[str | None]
    lane: NotRequired[Lane]
    expires_at: NotRequired[str | None]
    not_before: NotRequired[str | None]
    ended_at: NotRequired[str | None]
    ended_by: NotRequired[str | None]
    max_failed_fraction: NotRequired[float | None]
    callback: NotRequired[Callback]
    metadata: NotRequired[dict[str, str]]


class BatchSummary(TypedDict):
    """One batch of GET /api/batches, with its progress."""

    batch_id: str
    status: BatchState
    items: ItemCounts
    chunks: Mapping[str, int]
    created_at: str | None
    accepted_at: NotRequired[str | None]
    first_result_at: NotRequired[str | None]
    last_result_at: NotRequired[str | None]
    completed_at: NotRequired[str | None]
    wake_ms: NotRequired[int | None]
    items_per_s: NotRequired[float | None]
    eta_s: NotRequired[float | None]
    metadata: NotRequired[dict[str, str]]


class Queues(TypedDict):
    """GET /api/queues: each partition's depth, poison depth, drainers; storage transactions by operation;
    each tenant's lanes and use."""

    partitions: list[dict[str, Any]]
    storage_transactions: dict[str, Any]
    account: NotRequired[str]
    trigger_queue: NotRequired[str]
    tenants: NotRequired[list[dict[str, Any]]]


class ParkedChunk(TypedDict):
    poison_queue: str
    message_id: str
    inserted_on: str
    work_queue: str
    batch_id: str
    chunk: int
    failed: int
    attempt: int
    reason: str
    replayable: bool


class PoisonListing(TypedDict):
    """GET /api/poison."""

    partitions: list[dict[str, Any]]
    parked: list[ParkedChunk]
    continuation: str | None


class Replayed(TypedDict):
    """POST /api/poison/replay in the foreground: `more` says to call again for the rest."""

    replayed: int
    skipped: list[dict[str, Any]]
    chunks: list[ParkedChunk]
    more: bool
    limit: int
    seconds: float


class ReplayJob(TypedDict):
    """A background replay (POST /api/poison/replay with background, and GET /api/poison/replay/{job_id})."""

    job_id: str
    state: str
    replayed: int
    skipped: int
    steps: int
    status_url: str
    rate: NotRequired[float | None]
    limit: NotRequired[int | None]
    batch_id: NotRequired[str | None]
    skipped_first: NotRequired[list[dict[str, Any]]]
    created_at: NotRequired[str]
    updated_at: NotRequired[str]
    finished_at: NotRequired[str | None]


class ResultLine(TypedDict):
    """One item's outcome: `status` succeeded, failed, cancelled or expired."""

    position: int
    status: str
    id: NotRequired[str | int]
    value: NotRequired[Any]
    reason: NotRequired[str]


@dataclass(frozen=True)
class Batch:
    """A submitted batch, as the submit answered (`raw` is the whole answer)."""

    batch_id: str
    items: int
    chunks: int
    status_url: str
    trigger: str
    replayed: bool = False  # an Idempotency-Key seen before: the first batch's answer, nothing stored again
    idempotency_key: str | None = None  # the key this submit sent (its own, unless the caller gave one)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ResultsPage:
    """One page of a batch's results, with the batch's status when it was read: while `final` is False the page
    is partial (items still pending have no line yet)."""

    lines: Sequence[ResultLine]
    batch_status: str
    continuation: str | None

    @property
    def final(self) -> bool:
        return self.batch_status in FINAL
