"""Batch identity and the manifest, the record of what a submission holds and whether it is committed (pure).

A submission writes its manifest in state `staging`, enqueues its chunks tagged with the manifest's
`attempt`, then commits the manifest to `accepted`. Drainers process only chunks of the committed
attempt, so a submission resumed with the same Idempotency-Key never has a chunk processed twice.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

from shared.core.errors import IdempotencyConflict
from shared.core.lanes import DEFAULT_TENANT, Priority

BATCH_ID = re.compile(r"[0-9a-f]{32}")
_KEY_NAMESPACE = uuid.UUID("6f1b6a52-8f7e-4a55-9d3c-2f4a7c1e9b10")
MAX_IDEMPOTENCY_KEY = 256


class State(str, Enum):
    STAGING = "staging"
    ACCEPTED = "accepted"
    ABANDONED = "abandoned"  # its submit answered 503 (deadline or storage down): never accepted


def new_batch_id(idempotency_key: str | None, tenant: str = DEFAULT_TENANT) -> str:
    """A random id, or one derived from the tenant and its Idempotency-Key, so every retry names the same batch
    and two tenants' keys never do. The shared tenant's ids are derived from the key alone, as before tenants were
    callers (a retry across the upgrade still finds its batch); a key is printable ASCII, so no key of the shared
    tenant spells another tenant's `<tenant>\n<key>`."""
    if idempotency_key is None:
        return uuid.uuid4().hex
    name = idempotency_key if tenant == DEFAULT_TENANT else f"{tenant}\n{idempotency_key}"
    return uuid.uuid5(_KEY_NAMESPACE, name).hex


# What a keyed submit asked for besides its body, in the order a refusal names them (Stripe's rule: a key reused
# with other parameters is refused, not answered with the first request's batch). The tenant is in the id.
BOUND = ("priority", "expires_in_s", "not_before", "max_failed_fraction", "callback_url", "metadata")


def bound(
    priority: str,
    expires_in_s: int | None,
    not_before: str | None,
    max_failed_fraction: float | None,
    callback_url: str | None,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The options a keyed submit asked for, as it gave them (defaults left out): what a reuse must repeat."""
    asked = (priority, expires_in_s, not_before, max_failed_fraction, callback_url, metadata)
    given = zip(BOUND, asked, strict=True)
    return {name: value for name, value in given if value is not None}


def check_reuse(first: Manifest, again: Manifest) -> None:
    """IdempotencyConflict naming what a request reusing a key changed, if anything."""
    changed = differences(first, again)
    if changed:
        raise IdempotencyConflict(
            f"this Idempotency-Key was already used with a different {', '.join(changed)}: a key names one request; "
            "send a new key for a new request",
            different=changed,
        )


def differences(first: Manifest, again: Manifest) -> list[str]:
    """What a request reusing a key changed from the first one: `body`, then each option of BOUND it gave
    otherwise (a manifest written before requests were bound has no `request`: its body alone is checked)."""
    changed = ["body"] if first.digest != again.digest else []
    if first.request is not None and again.request is not None:
        changed += [name for name in BOUND if first.request.get(name) != again.request.get(name)]
    return changed


def new_attempt() -> str:
    return uuid.uuid4().hex[:12]


def is_batch_id(text: str) -> bool:
    return BATCH_ID.fullmatch(text) is not None  # match() with $ would let a trailing newline through


def items_digest(items: Sequence[str]) -> str:
    """A digest of the items as accepted (independent of whitespace, gzip or JSON vs NDJSON)."""
    h = hashlib.sha256()
    for item in items:
        h.update(item.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class Manifest:
    batch_id: str
    attempt: str
    state: State
    items: int
    chunk_sizes: tuple[int, ...]
    queues: tuple[str, ...]  # the partition queues this batch's chunks went to
    digest: str
    created_at: str
    accepted_at: str | None = None
    trigger: str | None = None  # published | deferred, once accepted
    # When this attempt began (a resumed submission keeps the batch's created_at for its readers, but its
    # chunks must be judged by their own attempt's age). None in manifests written before it existed.
    attempt_started_at: str | None = None
    # The lane its chunks wait in (`shared.core.lanes`); written only when not the shared tenant's normal lane.
    tenant: str = DEFAULT_TENANT
    priority: str = Priority.NORMAL
    # The lifecycle a submit asked for (`shared.batch.lifecycle`); absent from manifests that asked for none.
    expires_at: str | None = None  # unfinished items become `expired` after it
    not_before: str | None = None  # nothing of the batch is handled before it
    max_failed_fraction: float | None = None  # more failed items than this share end the batch `failed`
    # Set once when the batch is ended early: `cancelled` (asked for) or `failed` (max_failed_fraction crossed).
    ended: str | None = None
    ended_at: str | None = None
    # Set once when the batch was first seen final (`shared.ops.lifecycle.finalize`): its final status.
    final_status: str | None = None
    finished_at: str | None = None
    # Where its completion notice goes (shared.ops.notices); written only when the submit named one.
    callback_url: str | None = None
    # A keyed submit's options as it gave them (BOUND; None for a default): a reuse of its key must ask the same.
    request: dict[str, Any] | None = None
    # The caller's labels (`shared.batch.labels`); written only when the submit gave some.
    metadata: dict[str, str] | None = None

    @property
    def chunks(self) -> int:
        return len(self.chunk_sizes)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = self.state.value
        out["queues"] = list(self.queues)
        out["chunk_sizes"] = list(self.chunk_sizes)
        for name, default in (("tenant", DEFAULT_TENANT), ("priority", Priority.NORMAL)):
            if out[name] == default:
                del out[name]  # manifests of the shared lane stay as they were
        for name in OPTIONAL:
            if out[name] is None:
                del out[name]  # and so do those of batches that asked for no lifecycle
        for name in ("callback_url", "request", "metadata"):
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Manifest:
        return cls(
            **{
                **doc,
                "state": State(doc["state"]),
                "queues": tuple(doc["queues"]),
                "chunk_sizes": tuple(doc["chunk_sizes"]),
            }
        )

    def accepted(self, now: datetime, trigger: str | None = None) -> Manifest:
        return replace(self, state=State.ACCEPTED, accepted_at=now.isoformat(), trigger=trigger)

    def retried(self) -> Manifest:
        """The manifest taken over by a resumed submission: a fresh attempt, still staging."""
        return replace(self, attempt=new_attempt(), state=State.STAGING)


OPTIONAL = (
    "expires_at", "not_before", "max_failed_fraction", "ended", "ended_at", "final_status", "finished_at",
)  # fmt: skip


class Admission(str, Enum):
    PROCESS = "process"  # the committed attempt: work on it
    STALE = "stale"  # left behind by an attempt that a resumed submission replaced: delete unprocessed
    WAIT = "wait"  # its submission is still in flight: put it back for a moment
    ABANDONED = "abandoned"  # its submission never completed within STAGING_TTL_S: the client was never told 202
    CANCELLED = "cancelled"  # its batch was ended (cancelled, or failed past max_failed_fraction): recorded, not run
    EXPIRED = "expired"  # its batch's expires_at has passed: recorded as expired, not run
    EARLY = "early"  # its batch's not_before has not come: hidden until then, not run


def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
    """May a chunk enqueued by `attempt` be processed now?"""
    if manifest.attempt != attempt:
        return Admission.STALE
    if manifest.state is State.ACCEPTED:
        return Admission.PROCESS
    if manifest.state is State.ABANDONED:
        return Admission.ABANDONED
    started = manifest.attempt_started_at or manifest.created_at
    age_s = (now - datetime.fromisoformat(started)).total_seconds()
    return Admission.ABANDONED if age_s > staging_ttl_s else Admission.WAIT
