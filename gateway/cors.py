"""CORS for the ``/v1`` routes (docs/api.md §12), as a wrapper of raw ASGI.

``flowrank serve --cors-origin ORIGIN`` (repeatable, ``*`` allowed) builds one
:class:`Cors`; :class:`gateway.app.FlowRankApp` consults it before it picks
the lean dispatcher or FastAPI, so both paths answer alike. Without the
option there is no :class:`Cors` and a request pays one attribute test.

* A request to ``/v1/…`` whose ``Origin`` is allowed gets
  ``Access-Control-Allow-Origin`` (the origin itself, or ``*`` when ``*`` is
  configured), ``Access-Control-Expose-Headers`` and ``Vary: Origin`` added to
  its response, whatever its status.
* A preflight (``OPTIONS`` with ``Origin`` and
  ``Access-Control-Request-Method``) from an allowed origin is answered here:
  204 with the allowed methods and headers. Preflights are not authenticated
  (browsers never send credentials on them).
* Any other origin gets no CORS header at all, exactly as without the option.

Each check is O(number of request headers).
"""

from __future__ import annotations

import re
from typing import Iterable

ALLOW_METHODS = b"GET, POST, OPTIONS"
ALLOW_HEADERS = b"authorization, content-type, last-event-id"
EXPOSE_HEADERS = b"retry-after, x-board-version"  # 429/503 waits; the pinned version of an export (§13)
MAX_AGE = b"600"

_ORIGIN = re.compile(r"^https?://[^/?#\s]+$")


def parse_origin(text: str) -> str:
    """``*`` or ``scheme://host[:port]`` (lowercased, as browsers send it); else ValueError."""
    text = text.strip()
    if text == "*":
        return text
    if not _ORIGIN.match(text):
        raise ValueError(f"{text!r} is not an origin: '*' or scheme://host[:port], no path (e.g. https://example.com)")
    return text.lower()


class Cors:
    def __init__(self, origins: Iterable[str]):
        parsed = {parse_origin(o) for o in origins}
        self.any = "*" in parsed
        self.origins = frozenset(parsed - {"*"})

    def allowed(self, scope) -> bytes | None:
        """The ``Origin`` header of this request if it is allowed, else None."""
        for k, v in scope["headers"]:
            if k == b"origin":
                return v if self.any or v.decode("latin-1").lower() in self.origins else None
        return None

    def _common(self, origin: bytes) -> list[tuple[bytes, bytes]]:
        if self.any:
            return [(b"access-control-allow-origin", b"*")]
        return [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]

    async def __call__(self, scope, receive, send, app) -> None:
        """Run ``app`` for a ``/v1`` request, adding CORS headers for an allowed origin."""
        origin = self.allowed(scope)
        if origin is None:
            await app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and any(k == b"access-control-request-method" for k, _ in scope["headers"]):
            headers = self._common(origin) + [
                (b"access-control-allow-methods", ALLOW_METHODS),
                (b"access-control-allow-headers", ALLOW_HEADERS),
                (b"access-control-max-age", MAX_AGE),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        extra = self._common(origin) + [(b"access-control-expose-headers", EXPOSE_HEADERS)]

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await app(scope, receive, send_with_cors)
