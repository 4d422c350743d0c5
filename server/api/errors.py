"""HTTP side of the one error hierarchy: stable code -> HTTP status, JSON error bodies.

Every error response is ``{"error": {"code": ..., "message": ...}}``. Messages never carry
internal details (paths, SQL, tracebacks); unknown failures become ``internal``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clients.errors import CLOSE_POLICY_VIOLATION, CLOSE_TRY_AGAIN_LATER, RETRY_LATER_CODES, MPEError, RetryLater
from server.auth import Forbidden
from server.engine.leasing import BadRequest, NotFound
from server.engine.limits import retry_after_header

log = logging.getLogger("mpe.api")

__all__ = ["BadRequest", "NotFound", "Forbidden", "TooLarge", "RangeNotSatisfiable", "Conflict", "RetryLater",
           "HTTP_STATUS", "error_body", "install_error_handlers", "ws_close_code"]


class TooLarge(MPEError):
    """The request is too large."""

    code = "too_large"


class RangeNotSatisfiable(MPEError):
    """The requested byte range lies outside the resource."""

    code = "range_not_satisfiable"

    def __init__(self, size: int):
        super().__init__(f"the range starts beyond the {size} bytes of this resource")
        self.size = size


class Conflict(MPEError):
    """The request conflicts with the current state."""

    code = "conflict"


class SlowListener(MPEError):
    """The listener fell too far behind and was cut off."""

    code = "too_slow"


# The only place stable codes meet HTTP statuses.
HTTP_STATUS: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "too_large": 413,
    "range_not_satisfiable": 416,
    "invalid_request": 422,
    "rate_limited": 429,  # with Retry-After (docs/api.md "Limits")
    "too_many_queued": 429,  # the team's queued episodes are at their limit
    "busy": 503,
    "internal": 500,
}

# Listen socket: client-side problems close with 1008, overload with 1013, the rest per clients.errors.
_WS_CLIENT = {"unauthorized", "forbidden", "not_found", "bad_request", "invalid_request"}


def ws_close_code(exc: MPEError) -> int:
    """The close code of the listen socket for ``exc``: 1008 for the client's mistakes, 1013 for
    overload, otherwise the error's own."""
    if exc.code in _WS_CLIENT:
        return CLOSE_POLICY_VIOLATION
    if exc.code in RETRY_LATER_CODES or exc.code == "too_slow":
        return CLOSE_TRY_AGAIN_LATER
    return exc.close_code


def error_body(code: str, message: str, retry_after_s: float | None = None) -> dict:
    """The JSON body of every error response: ``{"error": {"code": ..., "message": ...}}``, plus
    ``retry_after_s`` for a limit that knows when to try again."""
    body = {"code": code, "message": message}
    if retry_after_s is not None:
        body["retry_after_s"] = retry_after_s
    return {"error": body}


def error_response(code: str, message: str, status: int | None = None, headers: dict | None = None,
                   retry_after_s: float | None = None) -> JSONResponse:
    status = status or HTTP_STATUS.get(code, 400 if code != "internal" else 500)
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="mpe"', **(headers or {})}
    if retry_after_s is not None:
        headers = {"Retry-After": retry_after_header(retry_after_s), **(headers or {})}
    return JSONResponse(error_body(code, message, retry_after_s), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body",)) or "request"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Turn every failure into a JSON error body with its stable code and HTTP status
    (:data:`HTTP_STATUS`); unexpected ones are logged and answered as ``internal`` (500)."""
    @app.exception_handler(MPEError)
    async def mpe_error(_request: Request, exc: MPEError) -> JSONResponse:
        headers = None
        if isinstance(exc, RangeNotSatisfiable):
            headers = {"Content-Range": f"bytes */{exc.size}"}
        message = exc.message if exc.code != "internal" else "internal error"
        return error_response(exc.code, message, headers=headers,
                              retry_after_s=exc.retry_after_s if isinstance(exc, RetryLater) else None)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response("invalid_request", _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
                413: "too_large"}.get(exc.status_code, "bad_request" if exc.status_code < 500 else "internal")
        message = {"not_found": "no such resource", "method_not_allowed": "method not allowed"}.get(
            code, str(exc.detail) if exc.status_code < 500 else "internal error")
        return error_response(code, message, status=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response("internal", "internal error")
