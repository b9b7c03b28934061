"""Keep secrets out of log lines and error bodies: mask keys, SAS signatures and tokens in free text (pure)."""

from __future__ import annotations

import re

_SECRET = re.compile(
    r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature|sig|se|skoid|sktid|skv|token|code|password|secret)"
    r"=([^;&\s\"']+)"
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")
MASK = "***"


def redact(text: str) -> str:
    """`AccountKey=abc;...` -> `AccountKey=***;...`, and likewise for SAS signatures and bearer tokens."""
    return _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", _SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text))
