"""The server's side of the shell's handshake (:mod:`recalld.interfaces.discovery`): it
answers a challenge with its HMAC under the run's secret, and refuses a request that names
a wrong secret."""

from __future__ import annotations

import hmac
import re
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from recalld.interfaces.discovery import CHALLENGE_BYTES, HELLO_PATH, SECRET_HEADER, proof

_CHALLENGE = re.compile(rf"[0-9a-f]{{{2 * CHALLENGE_BYTES}}}")


class LocalProof:
    """ASGI middleware of an advertised server: ``GET /v1/local/hello?challenge=HEX`` gets
    ``{"proof": HMAC}``; a request carrying ``X-Recalld-Local`` with another secret is 401."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self.secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == HELLO_PATH:
            await self._hello(scope)(scope, receive, send)
            return
        given = Headers(scope=scope).get(SECRET_HEADER)
        if given is not None and not hmac.compare_digest(given.encode(), self.secret.encode()):
            await _error(401, "unauthorized", f"wrong {SECRET_HEADER} secret")(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _hello(self, scope: Scope) -> JSONResponse:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        challenge = (query.get("challenge") or [""])[0]
        if scope["method"] != "GET" or not _CHALLENGE.fullmatch(challenge):
            return _error(
                400,
                "bad_request",
                f"send GET {HELLO_PATH}?challenge= and {2 * CHALLENGE_BYTES} hex digits",
            )
        return JSONResponse({"proof": proof(self.secret, challenge)})


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
