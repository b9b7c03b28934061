"""The callback allow list by origin (pure): CALLBACK_ALLOWED_HOSTS names origins (scheme, host, port), and a
notice may go only to a URL whose origin is one of them, so an allowed host's other ports (its SSH, a storage
emulator, the app itself) are not reachable through it. An allowed name's DNS is trusted: the notice goes
wherever the name resolves when it is sent.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost"})
DEFAULT_PORTS = {"https": 443, "http": 80}
HOST = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?|[0-9a-f:]*:[0-9a-f:.]*")

Origin = tuple[str, str, int]  # scheme, host (lower case, an IPv6 address without brackets), port


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin(scheme: str, host: str, port: int | None) -> Origin:
    return scheme, host.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def show(found: Origin) -> str:
    scheme, host, port = found
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def allowed_origins(text: str, *, allow_http_loopback: bool) -> frozenset[Origin]:
    """CALLBACK_ALLOWED_HOSTS read as origins: comma-separated `host`, `host:port` or `scheme://host[:port]`; no
    scheme is https, no port the scheme's own (443, or 80 for plain http, which must name a loopback host and needs
    CALLBACK_ALLOW_HTTP_LOOPBACK). ValueError saying which entry is wrong."""
    found = set()
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            parts = urlsplit(entry if "://" in entry else f"https://{entry}")
            port = parts.port
        except ValueError:
            raise ValueError(f"{entry!r} is not an origin (host, host:port or scheme://host:port)") from None
        host = (parts.hostname or "").lower()
        if parts.scheme not in DEFAULT_PORTS or not HOST.fullmatch(host) or parts.path or parts.query:
            raise ValueError(f"{entry!r} is not an origin (host, host:port or scheme://host:port; no path)")
        if parts.username is not None or parts.fragment:
            raise ValueError(f"{entry!r} is not an origin (no credentials or fragment)")
        if parts.scheme == "http" and not (allow_http_loopback and is_loopback(host)):
            raise ValueError(f"{entry!r}: plain http only to loopback, with CALLBACK_ALLOW_HTTP_LOOPBACK")
        found.add(origin(parts.scheme, host, port))
    return frozenset(found)
