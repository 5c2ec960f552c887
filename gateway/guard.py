"""Per-route access control, rate limiting and body limits, in that order.

Each route function is tagged with :func:`access` (its permission and
whether it reads or writes). :class:`GuardedRoute` runs the checks *before*
FastAPI reads or validates anything, so an unauthenticated client gets 401
whatever its body holds, and a 9 MiB body is refused (413) while it is being
read: the Content-Length header is checked first and then the bytes actually
received are counted, since chunked bodies carry no length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fastapi import Request
from fastapi.routing import APIRoute

from engine.core.errors import BatchTooLarge, ValidationFailed

from gateway.auth import Permission, Principal, token_accepted

PRE_AUTH = "flowrank.principal"  # scope key: gateway.hot authenticated and charged this request already

@dataclass(frozen=True)
class Access:
    permission: Permission | None  # None: public (health, metrics)
    kind: str = "read"  # rate-limit bucket: "read" | "write"


def access(permission: Permission | None, kind: str = "read") -> Callable:
    """Tag an endpoint with what it needs. Apply *below* ``@router.get(...)``."""

    def tag(fn):
        fn.__flowrank_access__ = Access(permission, kind)
        return fn

    return tag


def principal_of(request: Request) -> Principal:
    return request.state.principal


async def _read_limited(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise ValidationFailed("Content-Length is not a number.", None) from None
        if declared > limit:
            raise BatchTooLarge(f"The body is larger than {limit} bytes.", None)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise BatchTooLarge(f"The body is larger than {limit} bytes.", None)
        chunks.append(chunk)
    return b"".join(chunks)


class GuardedRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any):
        super().__init__(path, endpoint, **kwargs)
        acc: Access | None = getattr(endpoint, "__flowrank_access__", None)
        if acc is not None and acc.permission is not None:  # /openapi.json: what credentials this route takes
            security: list[dict] = [{"HTTPBearer": []}]
            if "GET" in self.methods and token_accepted(acc.permission, "GET"):
                security.append({"AccessToken": []})
            self.openapi_extra = {**(self.openapi_extra or {}), "security": security}

    def get_route_handler(self) -> Callable[[Request], Any]:
        inner = super().get_route_handler()
        acc: Access | None = getattr(self.endpoint, "__flowrank_access__", None)
        if acc is None:
            raise RuntimeError(f"route {self.path} has no @access(...) tag")

        async def handler(request: Request):
            gw = request.app.state.gateway
            if acc.permission is not None:
                principal = request.scope.get(PRE_AUTH)  # set by gateway.hot when it hands a request over
                if principal is None:
                    creds = gw.credentials
                    principal = creds.authenticate(request.headers.get("authorization"),
                                               request.scope.get("query_string", b""))
                    creds.authorize(principal, acc.permission, request.method, request.path_params.get("board_id"))
                    gw.limiter.check(principal, acc.kind)
                request.state.principal = principal
            if request.method in ("POST", "PUT", "PATCH"):
                body = await _read_limited(request, gw.settings.max_body_bytes)
                try:
                    body.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValidationFailed("The body is not valid JSON (not UTF-8).", None) from None
                request._body = body  # noqa: SLF001  (FastAPI reads the cached body)
            return await inner(request)

        return handler
