"""The operator's page: one HTML document with its style and script inlined, served by the function app itself.

No build step and no CDN: `static/dashboard.{html,css,js}` are plain files in the package, put together
once per process. The page reads the app's own HTTP API and nothing else; its Content-Security-Policy
allows exactly its own inline style and script (by hash) and requests to this origin, so nothing else can
run in it or be loaded by it. The page is never cached and sends no Referer, so the `?code=` it was opened
with stays in the address bar and nowhere else.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent.parent / "static"  # the page's assets ship beside the package's modules
STYLE_SLOT, SCRIPT_SLOT = "<!-- style -->", "<!-- script -->"


@dataclass(frozen=True)
class Page:
    body: bytes
    headers: Mapping[str, str]


def digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def assemble(html: str, css: str, js: str) -> Page:
    """The document with `css` and `js` inlined, and the headers that allow exactly those two."""
    if html.count(STYLE_SLOT) != 1 or html.count(SCRIPT_SLOT) != 1:
        raise ValueError("the page needs one slot each for its style and its script")
    if "</style" in css.lower() or "</script" in js.lower():
        raise ValueError("an inlined file would end its element early")
    style, script = f"\n{css}", f"\n{js}"
    body = html.replace(STYLE_SLOT, f"<style>{style}</style>").replace(SCRIPT_SLOT, f"<script>{script}</script>")
    policy = (
        f"default-src 'none'; script-src {digest(script)}; style-src {digest(style)}; connect-src 'self'; "
        "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Security-Policy": policy,
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return Page(body.encode("utf-8"), headers)


@cache
def page() -> Page:
    def read(name: str) -> str:
        return (STATIC / name).read_text(encoding="utf-8")

    return assemble(read("dashboard.html"), read("dashboard.css"), read("dashboard.js"))
