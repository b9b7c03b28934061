"""Batches submitted to a tenant's lane at a priority, and the order the test handler is called in: what the lane tests
share (and a few others that need a tenant's backlog)."""

from __future__ import annotations

import json

from shared.core.lanes import Lane
from shared.intake.submit import submit
from shared.services import Services

RECORD = "tests.app.handlers:record"


def ndjson(prefix: str, n: int) -> bytes:
    return "\n".join(json.dumps({"id": f"{prefix}-{i}"}) for i in range(n)).encode()


async def submit_to(services: Services, prefix: str, n: int, tenant: str = "default", priority: str = "normal") -> str:
    done = await submit(
        services,
        ndjson(prefix, n),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=None,
        lane=Lane("", tenant, priority),
    )
    return done.manifest.batch_id
