"""Accept a batch: validate, cut into chunks, store (manifest, claim checks, queue messages), ring the doorbell.

Order: the manifest is written first (staging), then claim-check blobs and queue messages in parallel,
then the manifest is committed (accepted), then the batch is indexed and its lanes marked, then one trigger
event per queue goes to Service Bus. If Service Bus cannot be reached the batch is still accepted: it is
durable in the queue and the fallback poller will find it. If the submit dies after the commit, the drainer
that admits the batch indexes it (`shared.store.batch_index`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from azure.storage.blob.aio import ContainerClient

from shared.batch import batches, envelope
from shared.batch.batches import MAX_IDEMPOTENCY_KEY, Manifest, State, items_digest, new_attempt, new_batch_id
from shared.batch.chunking import Chunk, partition_of, plan_chunks
from shared.batch.lifecycle import Options
from shared.core import layout
from shared.core.errors import (
    IdempotencyConflict,
    MalformedRequest,
    PreconditionFailed,
    ResourceConflict,
    StorageError,
    StorageUnavailable,
    SubmitBusy,
    SubmitRefused,
)
from shared.core.lanes import DEFAULT_TENANT, Lane
from shared.intake import quota_gate
from shared.intake.body import Intake, Limits, decode_body, possible_size
from shared.intake.doorbells import not_yet
from shared.intake.doorbells import ring as ring  # called by this name here (the simulation swaps it)
from shared.intake.lane_marks import check_tenant_room, mark_lanes, premark_lanes
from shared.services import Services
from shared.store import batch_index
from shared.store.storage import NEVER_EXPIRES, read_json, translated, write_bytes, write_json
from shared.telemetry import tracing

log = logging.getLogger(__name__)

STORE_CONCURRENCY = 32
THREAD_THRESHOLD_BYTES = 256 * 1024
LARGE_SUBMIT_BYTES = 8 * 2**20  # a body that may decode past this counts against MAX_LARGE_SUBMITS
ABANDON_WRITE_S = 5.0  # how long a failed submit tries to mark its batch abandoned before answering


@dataclass(frozen=True)
class Submitted:
    manifest: Manifest
    trigger: str  # published | deferred
    replayed: bool = False  # an Idempotency-Key seen before: nothing was stored again


@dataclass(frozen=True)
class Outgoing:
    """One chunk ready to store: its queue, its message text, and the claim-check blob it refers to, if any."""

    queue: str
    text: str
    blob: tuple[str, bytes] | None = None
    hidden_s: int = 0  # until the batch's not_before


def checked_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable() or not key.isascii():
        raise MalformedRequest(f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters")
    return key


async def submit(
    services: Services,
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    idempotency_key: str | None,
    lane: Lane | None = None,
    options: Options | None = None,
    callback_url: str | None = None,
) -> Submitted:
    """`lane`: the tenant and priority asked for (its partition is ignored: chunks are spread over every one);
    `options`: its lifecycle (`shared.batch.lifecycle`); `callback_url`: where the completion notice goes,
    already checked (`shared.core.webhooks`)."""
    with tracing.span("queue_drain.submit", attributes={"http.request.body.size": len(body)}) as current:
        asked = lane or Lane("")
        submitted = await _decode_and_submit(
            services, body, content_type, content_encoding, idempotency_key, asked.tenant, asked.priority,
            options or Options(), callback_url,
        )  # fmt: skip
        manifest = submitted.manifest
        current.set_attributes(
            {
                "queue_drain.batch_id": manifest.batch_id,
                "queue_drain.items": manifest.items,
                "queue_drain.chunks": manifest.chunks,
                "queue_drain.trigger": submitted.trigger,
            }
        )
        return submitted


async def _decode_and_submit(
    services: Services,
    body: bytes,
    content_type: str | None,
    content_encoding: str | None,
    idempotency_key: str | None,
    tenant: str,
    priority: str,
    options: Options,
    callback_url: str | None = None,
) -> Submitted:
    settings = services.settings
    deadline = asyncio.get_running_loop().time() + settings.submit_deadline_s
    key = checked_key(idempotency_key)
    limits = Limits.from_settings(settings)
    decode = functools.partial(
        decode_body, body, content_type=content_type, content_encoding=content_encoding, limits=limits
    )
    possible = possible_size(len(body), content_encoding, limits)
    if possible <= THREAD_THRESHOLD_BYTES:
        return await _submit(services, decode(), key, deadline, tenant, priority, options, callback_url)
    # A body that may decode past the threshold is parsed on a thread, item by item: the event loop (other
    # requests, drains) gets the interpreter back every few milliseconds.
    if possible <= LARGE_SUBMIT_BYTES:
        return await _submit(
            services, await asyncio.to_thread(decode), key, deadline, tenant, priority, options, callback_url
        )
    # And only MAX_LARGE_SUBMITS really large ones at once: each may hold 2-3x MAX_BODY_BYTES (the body, its items,
    # and for JSON its text) until its chunks are stored.
    if services.large_submits.locked():
        raise SubmitBusy(
            f"{settings.max_large_submits} large submit(s) are being stored (MAX_LARGE_SUBMITS); retry shortly",
            limit="MAX_LARGE_SUBMITS",
        )
    async with services.large_submits:
        return await _submit(
            services, await asyncio.to_thread(decode), key, deadline, tenant, priority, options, callback_url
        )


async def _submit(
    services: Services,
    intake: Intake,
    key: str | None,
    deadline: float,
    tenant: str,
    priority: str,
    options: Options,
    callback_url: str | None = None,
) -> Submitted:
    settings = services.settings
    now = datetime.now(timezone.utc)
    batch_id = new_batch_id(key, tenant)
    chunks = plan_chunks(intake.items, max_items=settings.chunk_max_items, max_bytes=settings.chunk_max_bytes)
    queues = settings.partition_queues()
    offset = int(batch_id[:8], 16) % len(queues)
    chunk_queues = [queues[partition_of(c.index, offset=offset, partitions=len(queues))] for c in chunks]
    manifest = Manifest(
        batch_id=batch_id,
        attempt=new_attempt(),
        state=State.STAGING,
        items=len(intake.items),
        chunk_sizes=tuple(c.count for c in chunks),
        queues=tuple(sorted(set(chunk_queues))),
        digest=items_digest(intake.items),
        created_at=now.isoformat(),
        tenant=tenant,
        priority=priority,
        expires_at=options.expires_at.isoformat() if options.expires_at else None,
        not_before=options.not_before.isoformat() if options.not_before else None,
        max_failed_fraction=options.max_failed_fraction,
        callback_url=callback_url,
        request=batches.bound(priority, *options.asked(), callback_url, options.metadata) if key is not None else None,
        metadata=options.metadata,
    )
    chunk_lanes = [Lane(queue, tenant, priority) for queue in chunk_queues]
    lanes = [lane.name for lane in chunk_lanes]
    quota_gate.check_size(settings, len(intake.items))
    if tenant != DEFAULT_TENANT:
        await check_tenant_room(services, tenant)
    container = await services.storage.ensure_container(settings.batches_container)
    claimed = await claim(container, manifest)
    if isinstance(claimed, Submitted):
        log.info("batch %s: Idempotency-Key seen before; answering as first accepted, ringing again", batch_id)
        # The same name again: heals a crash before indexing.
        indexed = await batch_index.record(container, claimed.manifest)
        # Its first submit may have died between commit and doorbell: ring again (one event per queue, and a look
        # armed unless one is; a drainer woken for nothing finds its lanes empty and stops).
        # A scheduled batch's doorbells ring at its start, this one's too.
        at = not_yet(claimed.manifest.not_before)
        trigger = await ring(services, claimed.manifest, intake.encoded_bytes, at, committed=indexed)
        return replace(claimed, trigger=trigger)
    manifest, etag = claimed
    await quota_gate.admit(services, container, manifest, etag)  # past a quota: a 429, the manifest taken back
    try:
        async with asyncio.timeout_at(deadline):
            outgoing = await asyncio.to_thread(prepare, manifest, chunks, lanes, tracing.traceparent(), options, now)
            await premark_lanes(services, sorted(set(lanes)), tenant)
            await store(services, outgoing)
    except (TimeoutError, StorageUnavailable) as e:
        await abandon(container, manifest, etag)
        await quota_gate.release(services, manifest)
        why = "storage failed" if isinstance(e, StorageUnavailable) else "the deadline passed"
        raise SubmitRefused(
            f"the batch could not be stored within SUBMIT_DEADLINE_S ({settings.submit_deadline_s:g} s; {why}); "
            "nothing of it was kept: send it again (with the same Idempotency-Key, if you used one)",
            batch_id=batch_id,
        ) from e
    accepted_at = datetime.now(timezone.utc)
    try:
        etag = await write_json(
            container, layout.manifest_blob(batch_id), manifest.accepted(accepted_at).to_json(), etag=etag
        )
    except PreconditionFailed:
        # Our own commit may have landed with its answer lost (the client's retry then meets its new ETag).
        etag = await _own_commit(container, manifest)
    # The index entry, then the marks that name the batch: a drainer takes a batch a mark names as committed with
    # no manifest read, so a mark names only an indexed batch; one that admits a batch by its manifest indexes it
    # (the same blob), which heals a submit that died, or whose index write failed, after the commit.
    indexed = await batch_index.record(container, manifest.accepted(accepted_at))
    accepted_ms = int(accepted_at.timestamp() * 1000)
    committed = (batch_id, manifest.attempt) if indexed else None
    await mark_lanes(services, sorted(set(chunk_lanes), key=lambda lane: lane.name), committed, accepted_ms)
    trigger = await ring(services, manifest, intake.encoded_bytes, options.not_before, committed=indexed)
    manifest = manifest.accepted(accepted_at, trigger)
    # Only a deferral costs a second write; a manifest without `trigger` was announced.
    if trigger == "deferred":
        try:
            await write_json(container, layout.manifest_blob(batch_id), manifest.to_json(), etag=etag)
        except PreconditionFailed:  # a cancel came first: it keeps its word, the trigger note is only a note
            log.info("batch %s: changed (cancelled) before its deferral could be noted", batch_id)
    log.info(
        "batch %s accepted: %d item(s), %d chunk(s) on %s (tenant %s, priority %s), trigger %s",
        batch_id, manifest.items, manifest.chunks, ",".join(manifest.queues), tenant, priority, trigger,
    )  # fmt: skip
    return Submitted(manifest, trigger)


async def _own_commit(container: ContainerClient, manifest: Manifest) -> str:
    """The ETag of this attempt's accepted manifest, if the commit that answered 412 was in fact our own write;
    else another request took the batch over (the simulator found a 409 answered for a batch it had accepted,
    left out of the batch list)."""
    doc, etag = await read_json(container, layout.manifest_blob(manifest.batch_id))
    stored = Manifest.from_json(doc)
    if stored.state is State.ACCEPTED and stored.attempt == manifest.attempt:
        return etag
    raise IdempotencyConflict("a concurrent request with the same Idempotency-Key took this batch over")


async def claim(container: ContainerClient, manifest: Manifest) -> tuple[Manifest, str] | Submitted:
    """Write the staging manifest; for a key seen before, answer the first batch or resume it."""
    name = layout.manifest_blob(manifest.batch_id)
    try:
        return manifest, await write_json(container, name, manifest.to_json(), create_only=True)
    except (ResourceConflict, PreconditionFailed):
        pass
    doc, etag = await read_json(container, name)
    existing = Manifest.from_json(doc)
    if existing.attempt == manifest.attempt:
        # Our own create landed and its answer was lost: the storage SDK's retry met it (an attempt id is this
        # request's alone). The simulation saw an unkeyed submit resume itself, lose that answer too, and answer
        # 409 "in progress" with no other request in flight (storage seed 3).
        return manifest, etag
    batches.check_reuse(existing, manifest)
    if existing.state is State.ACCEPTED:
        return Submitted(existing, existing.trigger or "published", replayed=True)
    # An earlier attempt stopped halfway. A fresh attempt id makes whatever it enqueued stale.
    # It keeps the batch's created_at for readers, but its chunks are judged by this attempt's own start.
    resumed = replace(
        manifest, attempt=new_attempt(), created_at=existing.created_at, attempt_started_at=manifest.created_at
    )
    try:
        etag = await write_json(container, name, resumed.to_json(), etag=etag)
    except PreconditionFailed:
        doc, etag = await read_json(container, name)  # our own write, its answer lost, or another request's
        if Manifest.from_json(doc).attempt != resumed.attempt:
            raise IdempotencyConflict("a request with the same Idempotency-Key is in progress; retry shortly") from None
    log.warning("batch %s: resuming a submission that stopped halfway (attempt %s)", manifest.batch_id, resumed.attempt)
    return resumed, etag


def prepare(
    manifest: Manifest,
    chunks: Sequence[Chunk],
    chunk_queues: Sequence[str],
    trace: str | None = None,
    options: Options | None = None,
    now: datetime | None = None,
) -> list[Outgoing]:
    """Encode every chunk (CPU only; run on a thread): inline if it fits a message, else a claim check. `trace`:
    the submit's traceparent, carried by every chunk, and so is its lifecycle (`options`): a chunk of a batch
    with a not_before is stored hidden until then."""
    options = options or Options()
    lifecycle = options.header_fields()
    hidden_s = 0
    if options.not_before is not None and now is not None:
        hidden_s = max(0, math.ceil((options.not_before - now).total_seconds()))
    out: list[Outgoing] = []
    for chunk, queue in zip(chunks, chunk_queues, strict=True):
        header = envelope.ChunkHeader(manifest.batch_id, manifest.attempt, chunk.index, trace=trace, **lifecycle)  # type: ignore[arg-type]
        header = replace(header, start=chunk.start)
        text = envelope.encode_inline(header, chunk.items)
        if text is not None:
            out.append(Outgoing(queue, text, hidden_s=hidden_s))
            continue
        blob = layout.claim_check_blob(manifest.batch_id, chunk.index)
        claim = (blob, envelope.encode_claim_check(chunk.items))
        out.append(Outgoing(queue, envelope.encode_reference(header, blob), claim, hidden_s))
    return out


async def store(services: Services, outgoing: Sequence[Outgoing]) -> None:
    settings = services.settings
    container = await services.storage.ensure_container(settings.batches_container)
    queues = {q: await services.storage.ensure_queue(q) for q in {o.queue for o in outgoing}}
    gate = asyncio.Semaphore(STORE_CONCURRENCY)

    async def one(item: Outgoing) -> None:
        async with gate:
            if item.blob is not None:
                await write_bytes(container, item.blob[0], item.blob[1], gzip_json=True)
            async with translated(f"enqueue to {item.queue}"):
                await queues[item.queue].send_message(
                    item.text, time_to_live=NEVER_EXPIRES, visibility_timeout=item.hidden_s or None
                )

    # The first failure stops the rest (they would each retry for seconds against the same outage), and every
    # write has ended before the request answers: none outlives a failed submit.
    tasks = [asyncio.ensure_future(one(o)) for o in outgoing]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    # in the order of `tasks`: `done` is a set, whose order follows the tasks' addresses
    errors = [t.exception() for t in tasks if t in done and not t.cancelled() and t.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]


async def abandon(container: ContainerClient, manifest: Manifest, etag: str) -> None:
    """Mark a batch whose submit failed as abandoned, so drainers discard its chunks at once (best effort:
    with storage down, its staging manifest is judged dead after STAGING_TTL_S instead)."""
    try:
        async with asyncio.timeout(ABANDON_WRITE_S):
            await write_json(
                container,
                layout.manifest_blob(manifest.batch_id),
                replace(manifest, state=State.ABANDONED).to_json(),
                etag=etag,
            )
    except (TimeoutError, StorageError) as e:
        log.warning("batch %s: could not mark the failed submit abandoned (%s)", manifest.batch_id, e)
        return
    log.warning("batch %s: submit failed; marked abandoned, its stored chunks will be discarded", manifest.batch_id)
