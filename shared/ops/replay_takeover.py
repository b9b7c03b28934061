"""The fallback timer finishes the replays that died between their claim and their send.

A replay notes each parked chunk before it claims it (`shared.store.replay_claims`) and deletes the note once the
claim is settled. A note older than CLAIM_S belongs to a replay that died (a kill, a host recycled) or whose
release storage refused: its chunk's items are `retrying` under its claim and nothing carries them, so their
batch would stay `processing` until someone replayed the chunk again. The timer replays it (the claim is old
enough for `shared.ops.replay_marks.claim` to take over), which is what the dead replay was asked to do: the chunk
goes back and its items are recorded again, or, for a batch final or ended meanwhile, it is set aside. The note
goes once the chunk is no longer parked; one still parked (its claim not old enough by the record's clock, storage
refusing) is looked at again at the next tick, and given up after NOTE_KEEP_S.

Cost per tick: the notes' listing (one ListBlobs, empty when no replay died); per note taken over (MAX_TAKEOVERS a
tick at most), one index read and a replay of one chunk.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from shared.core.errors import ReplayConflict, StorageError
from shared.ops import replay, replay_marks
from shared.services import Services
from shared.store import ended, poison_index, replay_claims

log = logging.getLogger(__name__)

MARGIN_S = 30  # past CLAIM_S: the note is written just before the claim, and clocks differ by seconds
MAX_TAKEOVERS = 10  # notes a tick takes over at most (the rest at the next ticks)
NOTE_KEEP_S = ended.KEEP_S  # a note whose chunk stays parked this long is given up (its chunk stays replayable)


async def take_over(services: Services) -> int:
    """Finish the replays whose notes are older than CLAIM_S; how many chunks went back (or were set aside)."""
    state = services.storage.container(services.settings.state_container)
    now = datetime.now(timezone.utc)
    try:
        notes = [n for n in await replay_claims.listed(state) if _age_s(n, now) > replay_marks.CLAIM_S + MARGIN_S]
    except StorageError as e:
        log.warning("replay notes not listed this tick: %s", e)
        return 0
    done = 0
    for note in notes[:MAX_TAKEOVERS]:
        try:
            entry = await poison_index.get(state, note.poison_queue, note.message_id)
        except StorageError as e:
            log.warning("parked message %s: the replay's takeover waits for the next tick: %s", note.message_id, e)
            continue
        if entry is None:  # its chunk is no longer parked: the replay got as far as that before it died
            await replay_claims.drop(state, note.name)
            continue
        log.warning("replay of parked message %s of batch %s died after its claim; the timer finishes it",
                    note.message_id, entry.batch_id)  # fmt: skip
        try:
            answer = await replay.replay(services, message_ids={note.message_id}, limit=1)
        except (StorageError, ReplayConflict) as e:
            log.warning("parked message %s: the replay's takeover waits for the next tick: %s", note.message_id, e)
            continue
        done += answer["replayed"] + answer["set_aside"]
        if answer["replayed"] or answer["set_aside"] or await _gone(state, note):
            await replay_claims.drop(state, note.name)
        elif _age_s(note, now) > NOTE_KEEP_S:
            log.warning("parked message %s stays parked after %d s of takeovers: %s", note.message_id,
                        NOTE_KEEP_S, answer["skipped"])  # fmt: skip
            await replay_claims.drop(state, note.name)
    return done


async def _gone(state: Any, note: replay_claims.Note) -> bool:
    """Its chunk is no longer parked (a stale copy the replay deleted); False when storage does not say."""
    try:
        return await poison_index.get(state, note.poison_queue, note.message_id) is None
    except StorageError:
        return False


def _age_s(note: replay_claims.Note, now: datetime) -> float:
    return (now - note.written).total_seconds() if note.written is not None else float("inf")
