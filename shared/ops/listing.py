"""The batch list's filters: `status` (as the list shows it), `tenant` (another tenant's: the operator's), and the
accepted time, `since` (at or after) and `until` (before), each an RFC 3339 date-time; a JSON 400 naming the
parameter otherwise. A filtered page may hold fewer batches than `limit`, or none, and still name a continuation:
the index is listed a page at a time and filtered as read (a listing past `since` stops). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.batch.lifecycle import rfc3339
from shared.core import lanes
from shared.core.errors import MalformedRequest
from shared.store.batch_index import IndexEntry

# What the list says of a batch (`shared.ops.progress`): `ended` for one cancelled, expired or failed by its tolerance.
LIST_STATUSES = ("scheduled", "accepted", "processing", "completed", "completed_with_failures", "ended")
PARAMS = ("status", "tenant", "since", "until")


@dataclass(frozen=True)
class ListFilter:
    status: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def in_time(self, entry: IndexEntry) -> bool:
        accepted = datetime.fromisoformat(entry.accepted_at)
        return (self.since is None or accepted >= self.since) and (self.until is None or accepted < self.until)

    def past(self, entry: IndexEntry) -> bool:
        """Whether the listing (newest first) has gone past `since`: nothing after this entry is wanted."""
        return self.since is not None and datetime.fromisoformat(entry.accepted_at) < self.since

    def keeps(self, progress: Mapping[str, Any]) -> bool:
        return self.status is None or progress["status"] == self.status


def list_filter(params: Mapping[str, str]) -> ListFilter:
    status = params.get("status")
    if status is not None and status not in LIST_STATUSES:
        raise MalformedRequest(f"status must be one of {', '.join(LIST_STATUSES)}", field="status")
    tenant = params.get("tenant")
    if tenant is not None:
        try:
            lanes.checked_tenant(tenant)
        except ValueError as e:
            raise MalformedRequest(str(e), field="tenant") from None
    return ListFilter(status, tenant, time_param(params, "since"), time_param(params, "until"))


def time_param(params: Mapping[str, str], name: str) -> datetime | None:
    text = params.get(name)
    if text is None:
        return None
    when = rfc3339(text)
    if when is None:
        raise MalformedRequest(
            f"{name} must be an RFC 3339 date-time with its offset (2030-01-01T00:00:00Z)", field=name
        )
    return when
