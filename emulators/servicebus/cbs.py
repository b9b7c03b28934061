"""Claims-based security (`$cbs`): check the SAS token a client puts before it uses an entity.

The stand-in knows one key, the emulator's published development key; a token signed with anything else,
expired, or of another type is refused with 401, which the SDK raises as an authentication error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, quote_plus, urlencode, urlparse

from emulators.servicebus.errors import BadRequestError, UnauthorizedError

CBS_ADDRESS = "$cbs"
PUT_TOKEN = "put-token"  # noqa: S105 - an operation name, not a secret
# The SDK labels the SAS token it puts as "jwt" (its JWTTokenAuth default), so both labels are accepted;
# the token itself must be a shared access signature either way.
TOKEN_TYPES = ("servicebus.windows.net:sastoken", "jwt")

# The official emulator's development credentials (public; they appear in its documentation).
DEVELOPMENT_KEYS = {"RootManageSharedAccessKey": "SAS_KEY_VALUE"}


@dataclass(frozen=True)
class Grant:
    """What a valid token allows: every entity at or below `path` (empty path: the whole namespace)."""

    path: str
    expires_s: int

    def covers(self, entity: str, now_s: float) -> bool:
        if now_s >= self.expires_s:
            return False
        return not self.path or entity == self.path or entity.startswith(self.path + "/")


def put_token(
    application_properties: Mapping[str, object],
    token: object,
    now_s: float,
    keys: Mapping[str, str] = DEVELOPMENT_KEYS,
) -> Grant:
    """Check one put-token request; raises UnauthorizedError (401) or BadRequestError (400)."""
    operation = application_properties.get("operation")
    if operation != PUT_TOKEN:
        raise BadRequestError(f"Unsupported $cbs operation {operation!r}; only 'put-token' is supported.")
    token_type = application_properties.get("type")
    if token_type not in TOKEN_TYPES:
        raise UnauthorizedError(f"Token type {token_type!r} is not accepted; use a shared access signature.")
    if isinstance(token, bytes):
        token = token.decode("utf-8", "replace")
    if not isinstance(token, str):
        raise UnauthorizedError("The token must be a string.")
    return verify_sas_token(token, now_s, keys)


def verify_sas_token(token: str, now_s: float, keys: Mapping[str, str] = DEVELOPMENT_KEYS) -> Grant:
    scheme, _, query = token.partition(" ")
    if scheme != "SharedAccessSignature" or not query:
        raise UnauthorizedError("Malformed token: expected 'SharedAccessSignature sr=...&sig=...&se=...&skn=...'.")
    fields = {name: values[0] for name, values in parse_qs(query, keep_blank_values=True).items()}
    missing = [name for name in ("sr", "sig", "se", "skn") if not fields.get(name)]
    if missing:
        raise UnauthorizedError(f"Malformed token: missing {', '.join(missing)}.")
    key = keys.get(fields["skn"])
    if key is None:
        raise UnauthorizedError(f"Unknown shared access key name {fields['skn']!r}.")
    try:
        expires_s = int(fields["se"])
    except ValueError:
        raise UnauthorizedError("Malformed token: 'se' is not a number.") from None
    if not hmac.compare_digest(_signature(fields["sr"], expires_s, key), fields["sig"]):
        raise UnauthorizedError("InvalidSignature: the token's signature does not match the shared access key.")
    if expires_s <= now_s:
        raise UnauthorizedError("ExpiredToken: the token's expiry time has passed.")
    return Grant(urlparse(fields["sr"]).path.strip("/"), expires_s)


def sign_sas_token(audience: str, key_name: str, key: str, expires_s: int) -> str:
    """A shared access signature as the SDK builds it (for clients that are not the SDK, such as tests)."""
    fields = {"sr": audience, "sig": _signature(audience, expires_s, key), "se": str(expires_s), "skn": key_name}
    return "SharedAccessSignature " + urlencode(fields)


def _signature(audience: str, expires_s: int, key: str) -> str:
    signed = f"{quote_plus(audience)}\n{expires_s}".encode()
    return base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest()).decode()
