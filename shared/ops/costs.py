"""What the built-in queue trigger would have spent for the items this process settled, beside what this app
spent (pure): the saving the operator's page shows.

The built-in trigger carries one item per message: an enqueue, a delete, and a sixteenth of a GetMessages
(it receives 16 at a time), so 2.0625 transactions per item (README: about 2,060 per 1,000 items). That
leaves out its idle polling (up to one GetMessages a minute per queue), retries and poison moves, so it is a
lower bound on what it would have spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BUILTIN_PER_ITEM = 1 + 1 + 1 / 16  # PutMessage + DeleteMessage + GetMessages(16) / 16


def comparison(totals: Mapping[str, int], reads: Mapping[str, int], items_settled: int) -> dict[str, Any]:
    """This process's work (every counted transaction but the API's reads) against the built-in trigger."""
    work = {op: n - reads.get(op, 0) for op, n in totals.items() if n - reads.get(op, 0) > 0}
    spent = sum(work.values())
    builtin = round(items_settled * BUILTIN_PER_ITEM)
    return {
        "items_settled": items_settled,
        "work": {"total": spent, "by_operation": work},
        "builtin_queue_trigger": {"per_item": BUILTIN_PER_ITEM, "total": builtin},
        "saved": builtin - spent,
        "ratio": round(builtin / spent, 1) if spent and builtin else None,
    }
