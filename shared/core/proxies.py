"""The proxy the environment sets for a storage endpoint, looked up once per client rather than per request.

With its default `use_env_settings`, the SDK's aiohttp transport asks the environment on every request:
a thread-pool hop for ~/.netrc and another for HTTP(S)_PROXY/NO_PROXY, about a third of the CPU a
DeleteMessage costs the drain. The environment does not change while the app runs, so the storage clients
turn that off and get the proxy decided here, when they are built, passed as the SDK's `proxies`.
A netrc login is never wanted on these requests: they carry their own Authorization (aiohttp refuses both).
"""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit


def env_proxies(endpoint: str) -> dict[str, str] | None:
    """`{scheme: proxy URL}` for `endpoint` from HTTP_PROXY/HTTPS_PROXY (any case), or None when the environment
    sets none for its scheme or NO_PROXY exempts its host."""
    parts = urlsplit(endpoint)
    proxy = urllib.request.getproxies_environment().get(parts.scheme)
    if not proxy:
        return None
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return {parts.scheme: proxy}
