"""Export (docs/api.md §13): every ranked row of a board at one pinned version, streamed.

``GET /v1/boards/{id}/export?format=csv|jsonl`` (admin, moderator). The rows
come from :meth:`engine.router.api.EngineClient.export`: column chunks of the
board at the version the export pinned (spill files on the shards, merged a
block at a time; docs/http.md "Export"). Each chunk is rendered from its
columns and sent before the next is read, so the bytes in flight are one
chunk whatever the board's size; a chunk is rendered by one numba kernel
(:mod:`gateway.export_format`). ``X-Board-Version`` names the version.

* CSV (RFC 4180, CRLF line ends): ``rank,player_id,value,achieved_at,metadata``;
  ``metadata`` is the row's compact JSON (quoted as any CSV field holding a
  comma or a quote is), empty when the row has none.
* JSON Lines: one object per row with the same fields; ``metadata`` is left
  out when there is none, as in every other read (docs/api.md §13).
* ``?ties=competition`` adds each row's ``tied_rank`` (§13): a last CSV column
  ``tied_rank``, a ``tied_rank`` field after ``rank`` in JSON Lines.
* A board with subscores (§14) adds a last CSV column ``subscores`` (a compact
  JSON array) and a last JSON Lines field ``subscores``.

The first chunk is read before the response starts, so an unknown board is a
plain 404 error body. A failure after that (the engine failing mid-stream) can
no longer change the status: the connection is closed before the end of the
body, which an HTTP client sees as an incomplete response, never as a short
export that looks whole.
"""

from __future__ import annotations

from typing import AsyncIterator, Literal

from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from engine.core.export import Chunk

from gateway.auth import Permission
from gateway.export_format import csv_bytes, jsonl_bytes
from gateway.guard import access
from gateway.routes.common import BoardIdPath, Ties, guarded_router, gw
from gateway.schemas import error_responses

router = guarded_router("export")

PAGE_ROWS = 8_192  # rows per chunk: ~0.5 MB of CSV, a few ms of the event loop (merge and render)
CSV_HEADER = "rank,player_id,value,achieved_at,metadata"
MEDIA = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


async def _body(first: Chunk, rest: AsyncIterator[Chunk], fmt: str, ties: bool) -> AsyncIterator[bytes]:
    render = csv_bytes if fmt == "csv" else jsonl_bytes
    try:
        subs = ",subscores" if first.subscores is not None else ""  # a board with subscores (docs/api.md §14)
        head = (CSV_HEADER + (",tied_rank" if ties else "") + subs + "\r\n").encode() if fmt == "csv" else b""
        yield head + render(first, ties)
        async for chunk in rest:
            yield render(chunk, ties)
    finally:
        await rest.aclose()  # type: ignore[attr-defined]  # an async generator: its spill files go now


_DOC = {
    200: {
        "description": "Every ranked row, best first, at the version named by `X-Board-Version`.",
        "headers": {"X-Board-Version": {"description": "The board version of every row.",
                                        "schema": {"type": "integer"}}},
        "content": {"text/csv": {"schema": {"type": "string"}},
                    "application/x-ndjson": {"schema": {"type": "string"}}},
    }
}


@router.get("/v1/boards/{board_id}/export", response_class=StreamingResponse,
            responses={**error_responses(404), **_DOC},
            summary="Every ranked row at one pinned version, streamed as CSV or JSON Lines")
@access(Permission.MODERATE)
async def export(
    board_id: BoardIdPath,
    request: Request,
    fmt: Literal["csv", "jsonl"] = Query("csv", alias="format", description="`csv` (default) or `jsonl`."),
    ties: Ties = None,
):
    chunks = gw(request).engine.export(board_id, PAGE_ROWS, ties=ties is not None)
    try:
        first = await chunks.__anext__()
    except BaseException:
        await chunks.aclose()  # type: ignore[attr-defined]
        raise
    name = f"{board_id.replace(':', '_')}-v{first.version}.{fmt}"
    return StreamingResponse(
        _body(first, chunks, fmt, ties is not None),
        media_type=MEDIA[fmt],
        headers={"X-Board-Version": str(first.version), "Cache-Control": "no-store",
                 "Content-Disposition": f'attachment; filename="{name}"'},
    )
