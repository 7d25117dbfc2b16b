"""The web inspector: a page served at ``/`` that is one more client of the HTTP API.

Its three files ship in the package (``recalld/interfaces/web``) and are served from there
under ``/inspector/``: nothing is fetched from anywhere else, and the Content-Security-Policy
of every answer says so (scripts, styles and requests from this server only, no inline
script, no framing). The page reads and changes memories only through ``/v1/...`` with the
key the user enters, so it has exactly the rights that key has; see docs/inspector.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Everything from this server only; no inline script or style markup, no plugin, no
framing by another page, no form posted anywhere."""
ASSETS: Mapping[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
"""The page's files and their media types (nothing else under /inspector/ is served)."""
HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def asset(name: str) -> bytes:
    """One of the page's files, read from the package once."""
    return resources.files("recalld.interfaces").joinpath("web", name).read_bytes()


def _answer(name: str) -> Response:
    return Response(asset(name), media_type=ASSETS[name], headers=dict(HEADERS))


def install_inspector(app: FastAPI) -> None:
    """Serve the page at ``/``, its files at ``/inspector/{name}`` and its icon at
    ``/favicon.ico`` (no key needed:
    they hold no memory; every call the page makes then needs one as any client does)."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> Response:
        return _answer("index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        # Browsers ask for it whatever the page names: the page's own icon, not a 404.
        return _answer("icon.svg")

    @app.get("/inspector/{name}", include_in_schema=False)
    async def file(name: str) -> Response:
        if name not in ASSETS:
            return Response(status_code=404, headers=dict(HEADERS))
        return _answer(name)
