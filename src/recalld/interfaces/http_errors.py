"""The HTTP API's one error shape, ``{"error": {"code", "message"}}``, and the handlers that
give it to every refusal: ours (:class:`ApiError`), the library's
(:class:`~recalld.errors.RecalldError`), FastAPI's validation and routing errors, and the
unexpected."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from recalld.errors import (
    ConflictError,
    EmbedderError,
    InvalidInputError,
    NotFoundError,
    RecalldError,
    StoreError,
)
from recalld.interfaces.exposure import public_message
from recalld.requests import describe_errors

log = logging.getLogger("recalld.http")

ERROR_CODES: Mapping[int, str] = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "too_large",
    415: "unsupported_media_type", 421: "misdirected", 422: "invalid_input",
    429: "rate_limited", 500: "internal", 503: "unavailable",
}  # fmt: skip
"""A status and its code: a table, one pair each."""


class ApiError(Exception):
    """An answer other than success, in the one error shape."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
    body = {"error": {"code": ERROR_CODES.get(status, "error"), "message": message}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def status_of(exc: RecalldError) -> int:
    """The HTTP status of one of recalld's errors."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    if isinstance(exc, StoreError | EmbedderError):
        return 503
    return 503


def methods_of(app: FastAPI, scope: Scope) -> list[str]:
    """Every method the routes of this path answer (a 405's ``Allow``): Starlette names only
    those of the first route that matched the path."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches({**scope, "method": "GET"})
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods - {"HEAD"})


async def _api_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.headers)


async def _recalld_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, RecalldError)
    return error_response(status_of(exc), public_message(exc))


async def _validation_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "the request body is not valid JSON")
    return error_response(422, describe_errors(errors, skip=("body", "query", "path")))


async def _http_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"no such resource: {request.method} {request.url.path}"
    if exc.status_code == 405:
        allowed = methods_of(request.app, request.scope)
        headers["Allow"] = ", ".join(allowed)
        message = f"{request.method} is not allowed here; use {' or '.join(allowed)}"
    return error_response(exc.status_code, message, headers)


async def _unexpected(request: Request, exc: Exception) -> Any:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server log")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every refusal of ``app`` in the one error shape."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RecalldError, _recalld_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
