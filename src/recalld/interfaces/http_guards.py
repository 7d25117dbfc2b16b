"""The HTTP API's middlewares, in front of every route (``/v1``, ``/mcp``, the docs):
:class:`BodyLimit` (what a request may send: JSON, its size and depth) and
:class:`LocalGuard` (without API keys, only local programs and this server's own pages)."""

from __future__ import annotations

import ipaddress
import re
from typing import Protocol
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recalld.interfaces.http_errors import error_response


class Served(Protocol):
    """What :class:`LocalGuard` reads of the server: where it listens, how many keys exist."""

    host: str

    def active_keys(self) -> int: ...


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in a JSON text, read without parsing it (brackets
    inside strings do not count): linear, and a few milliseconds for megabytes."""
    bare = _JSON_STRING.sub(b"", raw)
    if bare.count(b"[") + bare.count(b"{") <= 1:
        return int(b"[" in bare or b"{" in bare)
    import numpy as np

    step = np.zeros(256, dtype=np.int8)  # +1 for an opening bracket, -1 for a closing one
    step[[ord("["), ord("{")]], step[[ord("]"), ord("}")]] = 1, -1
    return int(np.cumsum(step[np.frombuffer(bare, dtype=np.uint8)], dtype=np.int32).max())


class BodyLimit:
    """What every route may be sent, checked before any of them parses a body: JSON only
    (415; the content types a web page may send without asking first, ``text/plain`` and
    forms, never reach a route), at most ``limit`` bytes (413, by the declared length or as
    the body arrives) and nested at most ``depth`` levels (400)."""

    def __init__(self, app: ASGIApp, limit: int, depth: int) -> None:
        self.app = app
        self.limit = limit
        self.depth = depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared in (None, "0") and "transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        refusal = self._refuse_headers(headers.get("content-type"), declared)
        body = b""
        if refusal is None:
            read = await self._read(receive)
            if read is None:
                refusal = 413, self._too_large
            elif json_depth(read) > self.depth:
                refusal = 400, f"the request body nests deeper than {self.depth} levels"
            body = read or b""
        if refusal is not None:
            await error_response(*refusal)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _refuse_headers(
        self, content_type: str | None, declared: str | None
    ) -> tuple[int, str] | None:
        if not _is_json(content_type):
            return 415, (
                "the request body must be JSON: send 'Content-Type: application/json' "
                f"(got {content_type or 'none'})"
            )
        if declared is not None and not declared.isdigit():
            return 400, "invalid Content-Length header"
        if declared is not None and int(declared) > self.limit:
            return 413, self._too_large
        return None

    @property
    def _too_large(self) -> str:
        return f"the request body is larger than {self.limit} bytes"

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (or the client left)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name, or an address, bracketed or not) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _authority(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or an origin's ``host[:port]``; None if malformed."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "", parts.port) if parts.hostname else None
    except ValueError:
        return None


def local_refusal(headers: Headers, bound: str) -> tuple[int, str] | None:
    """Why a request may come from a web page rather than a local program, or None.

    A server without API keys answers whoever reaches it, and a page in the user's browser
    reaches loopback too: directly (its ``Origin`` then names the page's site) or by DNS
    rebinding (its ``Host`` then names the attacker's domain). So the ``Host`` must be a
    loopback name or address or the address the server listens on (``bound``), and an
    ``Origin``, when sent, must be this very server (same scheme-less host and port).
    """
    host = headers.get("host")
    where = _authority(host) if host else None
    if host is not None and (
        where is None or not (is_loopback(where[0]) or where[0] == bound.strip("[]").lower())
    ):
        return 421, (
            f"Host {host!r} is not this server's address: without API keys it "
            "answers only on loopback (create a key with `recalld keys create` to "
            "serve other names)"
        )
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        same = (
            parts.scheme in ("http", "https")
            and host is not None
            and _authority(parts.netloc) == where
        )
        if not same:
            return 403, (
                f"cross-site request from {origin} refused: without API keys only "
                "pages this server serves may call it"
            )
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return 403, (
            f"cross-site request refused (Sec-Fetch-Site: {site}): without API keys "
            "only pages this server serves may call it"
        )
    return None


class LocalGuard:
    """ASGI middleware on every route (``/v1``, ``/mcp``, the docs): while no API key
    exists, refuse what :func:`local_refusal` finds (421 or 403). Requests that pass are
    not slowed: the key count is read only for a suspect one."""

    def __init__(self, app: ASGIApp, state: Served) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = local_refusal(Headers(scope=scope), self.state.host)
            if refusal is not None and await run_in_threadpool(self.state.active_keys) == 0:
                await error_response(*refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)
