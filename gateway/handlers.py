"""The one place errors become HTTP (STYLE §7).

* :class:`FlowRankError` → its status and ``{"error": {code, message, field}}``
  (+ ``Retry-After`` on 429/503).
* FastAPI/pydantic validation → 422 ``VALIDATION_FAILED`` naming the first
  bad field as an API path (``events[3].value``); malformed JSON → 422.
* Starlette HTTP errors (unknown route 404, wrong method 405, …) → the same
  body shape; a 405's ``Allow`` names every method the path answers.
* Anything else → 500 ``INTERNAL`` with a generic message; the traceback goes
  to the log, never to the client.
"""

from __future__ import annotations

import logging
import math
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from engine.core.errors import FlowRankError

from gateway.validation import loc_to_field

log = logging.getLogger("flowrank.gateway")

_HTTP_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    413: "BATCH_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_FAILED",
    429: "RATE_LIMITED",
    503: "OVERLOADED",
}


def error_body(code: str, message: str, field: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "field": field}}


def error_response(err: FlowRankError) -> JSONResponse:
    status = err.status if 400 <= int(err.status) <= 599 else 500
    headers = {}
    if status in (429, 503):
        ra = err.retry_after if err.retry_after is not None else 1
        headers["Retry-After"] = str(max(1, math.ceil(ra)))
    leader = getattr(err, "leader", None)
    if leader:  # NOT_LEADER (docs/api.md §19): where the active node is
        headers["X-FlowRank-Leader"] = leader
    if status >= 500 and err.code == "INTERNAL":
        return JSONResponse(error_body("INTERNAL", "Internal error.", None), status_code=500)
    return JSONResponse(err.to_body(), status_code=status, headers=headers)


def _clean_msg(msg: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg


def validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if not errors:
        return JSONResponse(error_body("VALIDATION_FAILED", "The request is invalid.", None), status_code=422)
    first = errors[0]
    if first.get("type") == "json_invalid":
        return JSONResponse(error_body("VALIDATION_FAILED", "The body is not valid JSON.", None), status_code=422)
    loc = tuple(first.get("loc", ()))
    field = loc_to_field(loc)
    if loc == ("body",) or (loc and loc[0] == "body" and field is None):
        msg = "The body must be a JSON object of the documented shape."
    else:
        msg = _clean_msg(str(first.get("msg", "invalid")))
        msg = f"{field}: {msg}." if field else msg
    return JSONResponse(error_body("VALIDATION_FAILED", msg, field), status_code=422)


def allowed_methods(request: Request) -> list[str]:
    """Every method /openapi.json documents for this path (Starlette's own 405 names only the first
    route that matched the path, e.g. ``POST`` for ``/v1/boards`` although ``GET`` is there too, and
    nothing at all when the routes come from included routers). Undocumented routes (``/docs``, …):
    the methods of the top-level routes that match the path."""
    table = getattr(request.app.state, "allow_table", None)
    if table is None:
        table = []
        for template, item in request.app.openapi().get("paths", {}).items():
            regex = re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$")
            table.append((regex, {m.upper() for m in item if m in _HTTP_METHODS}))
        request.app.state.allow_table = table
    path = request.scope.get("path", "")
    methods = {m for regex, ms in table if regex.match(path) for m in ms}
    if not methods:
        for route in request.app.router.routes:
            if getattr(route, "methods", None) and route.matches(request.scope)[0] != Match.NONE:
                methods.update(route.methods)
    return sorted(methods)


_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def install(app: FastAPI) -> None:
    @app.exception_handler(FlowRankError)
    async def _flowrank(request: Request, exc: FlowRankError):
        if exc.status >= 500 and exc.code == "INTERNAL":
            log.error("internal engine error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
        if exc.status_code == 404:
            msg = "No such route."
        elif exc.status_code == 405:
            msg = "This route does not accept that method."
        elif isinstance(exc.detail, str):
            msg = exc.detail
        else:
            msg = "The request was rejected."
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return JSONResponse(error_body(code, msg, None), status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _anything(request: Request, exc: Exception):
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(error_body("INTERNAL", "Internal error.", None), status_code=500)
