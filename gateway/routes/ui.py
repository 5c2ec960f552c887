"""The live board page for browsers (docs/api.md §12): ``GET /ui/boards/{board_id}``.

The page (``gateway/ui/board.html``) is static and self-contained: inline
CSS and JS, no build step, nothing loaded from any host. It reads the token
from its URL fragment (never sent to a server), the board id from its path,
and talks to the /v1 API of its own origin (or of ``#api=<origin>``, which
then needs ``--cors-origin``). The page itself needs no credential and says
nothing about the board: every fact on it comes from the API, with the token.

Its Content-Security-Policy lets only the page's own inline script and style
run (by hash) and lets it connect to HTTP(S) APIs; nothing else loads.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import APIRouter, Response

from gateway.routes.common import BoardIdPath
from gateway.schemas import ErrorBody

PAGE = (Path(__file__).resolve().parent.parent / "ui" / "board.html").read_bytes()


def _hashes(tag: str) -> str:
    blocks = re.findall(rb"<" + tag.encode() + rb">(.*?)</" + tag.encode() + rb">", PAGE, re.S)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b).digest()).decode()}'" for b in blocks)


CSP = (f"default-src 'none'; script-src {_hashes('script')}; style-src {_hashes('style')}; "
       "connect-src 'self' http: https:; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

router = APIRouter(tags=["ui"])


@router.get("/ui/boards/{board_id}", response_class=Response, summary="Live board page for browsers (no key)",
            responses={200: {"content": {"text/html": {"schema": {"type": "string"}}},
                             "description": "A self-contained HTML page; open it with `#token=<token>`."},
                        422: {"model": ErrorBody, "description": "`VALIDATION_FAILED`: not a board id."}})
async def board_page(board_id: BoardIdPath):
    """The same bytes for every board: the page reads the board id from its own
    address and the token from its fragment."""
    return Response(PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)
