"""Where things live in storage: blob names for manifests, claim checks, results, leases and back-off state."""

from __future__ import annotations

RESULT_SUFFIX = ".json"


def manifest_blob(batch_id: str) -> str:
    return f"{batch_id}/manifest.json"


def claim_check_blob(batch_id: str, chunk: int, gen: int = 0, first: int | None = None) -> str:
    """A chunk's claim check; a later generation's names its first position too, since one message's retried
    and parked items both go on in that generation, each perhaps in a blob of its own."""
    suffix = f"-g{gen}" if gen else ""
    if first is not None:
        suffix += f"-p{first}"
    return f"{batch_id}/chunks/{chunk:06d}{suffix}.json.gz"


def results_prefix(batch_id: str) -> str:
    return f"{batch_id}/"


def result_blob(batch_id: str, chunk: int, gen: int, first: int) -> str:
    """The layout before group commit (still read): one blob per message lineage, named by chunk, generation
    and the first position the message carries.

    A redelivered message overwrites its own result, never adds one. Messages of the same chunk and
    generation (retried items and poisoned items split from one parent) carry disjoint positions,
    so their first positions differ.
    """
    return f"{batch_id}/{chunk:06d}/{gen:03d}-{first:06d}{RESULT_SUFFIX}"


def result_group_blob(batch_id: str, epoch_ms: int, token: str) -> str:
    """A blob of result records written together: named by the writer's clock, then a random token, so names
    never collide and sort in the order they were written (`shared.batch.results`)."""
    return f"{batch_id}/r{epoch_ms:013d}-{token}{RESULT_SUFFIX}"


def is_result_group_blob(name: str) -> bool:
    return result_group_stamp_ms(name) is not None


def result_group_stamp_ms(name: str) -> int | None:
    """The writer's clock (epoch ms) in a result group blob's name, or None if the name is not one."""
    parts = name.split("/")
    if len(parts) != 2 or not parts[1].startswith("r") or not parts[1].endswith(RESULT_SUFFIX):
        return None
    stamp, sep, token = parts[1][1 : -len(RESULT_SUFFIX)].partition("-")
    # 13 ASCII digits as the writer pads them (a longer stamp would be past the year 2286).
    return int(stamp) if sep and len(stamp) <= 13 and stamp.isascii() and stamp.isdigit() and token.isalnum() else None


def parse_result_blob(name: str) -> tuple[int, int, int] | None:
    """(chunk, gen, first) of a result blob name, or None if the name is not one."""
    parts = name.split("/")
    if len(parts) != 3 or not parts[2].endswith(RESULT_SUFFIX):
        return None
    chunk = parts[1]
    gen, sep, first = parts[2][: -len(RESULT_SUFFIX)].partition("-")
    if not (sep and chunk.isdigit() and gen.isdigit() and first.isdigit()):
        return None
    return int(chunk), int(gen), int(first)


def lease_prefix(queue: str) -> str:
    return f"leases/{queue}/"


def lease_blob(queue: str, slot: int) -> str:
    return f"{lease_prefix(queue)}{slot}"


def backoff_blob(queue: str) -> str:
    return f"backoff/{queue}.json"


def look_blob(queue: str) -> str:
    """The queue's look chain (`shared.watch.lookout`)."""
    return f"looks/{queue}.json"


def poison_index_prefix(poison_queue: str) -> str:
    return f"poison/{poison_queue}/"


def poison_index_blob(poison_queue: str, message_id: str) -> str:
    """The index entry of one parked message (state container; `shared.store.poison_index`)."""
    return f"{poison_index_prefix(poison_queue)}{message_id}.json"


def set_aside_blob(poison_queue: str, message_id: str) -> str:
    """A parked chunk of a final or ended batch, set aside by a replay (state container): kept, never replayed."""
    return f"poison-set-aside/{poison_queue}/{message_id}.json"


REPLAY_CLAIMS_PREFIX = "replay-claims/"


def replay_claim_blob(poison_queue: str, message_id: str, token: str) -> str:
    """One replay's note that it is claiming a parked message (state container; `shared.store.replay_claims`)."""
    return f"{REPLAY_CLAIMS_PREFIX}{poison_queue}/{message_id}/{token}"
