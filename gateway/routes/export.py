"""Export (docs/api.md §13): every ranked row of a board at one pinned version, streamed.

``GET /v1/boards/{id}/export?format=csv|jsonl`` (admin, moderator). The rows
come from :meth:`engine.client.EngineClient.export`: column chunks of the
board at the version the export pinned (spill files on the shards, merged a
block at a time; docs/http.md "Export"). Each chunk is rendered from its
columns and sent before the next is read, so the bytes in flight are one
chunk whatever the board's size. ``X-Board-Version`` names the version.

* CSV (RFC 4180, CRLF line ends): ``rank,player_id,value,achieved_at,metadata``;
  ``metadata`` is the row's compact JSON (quoted as any CSV field holding a
  comma or a quote is), empty when the row has none.
* JSON Lines: one object per row with the same fields; ``metadata`` is left
  out when there is none, as in every other read (docs/api.md §13).
* ``?ties=competition`` adds each row's ``tied_rank`` (§13): a last CSV column
  ``tied_rank``, a ``tied_rank`` field after ``rank`` in JSON Lines.

The first chunk is read before the response starts, so an unknown board is a
plain 404 error body. A failure after that (the engine failing mid-stream) can
no longer change the status: the connection is closed before the end of the
body, which an HTTP client sees as an incomplete response, never as a short
export that looks whole.
"""

from __future__ import annotations

import re
from typing import AsyncIterator, Literal

import orjson
from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from engine.export import Block, Chunk
from engine.timefmt import format_timestamps

from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, Ties, guarded_router, gw
from gateway.schemas import error_responses

router = guarded_router("export")

PAGE_ROWS = 8_192  # rows rendered per chunk: ~0.5 MB of CSV, ~10 ms of the event loop
CSV_HEADER = "rank,player_id,value,achieved_at,metadata"
MEDIA = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


_CSV_SPECIAL = re.compile(r'[,"\r\n]')  # a field holding one of these is quoted (RFC 4180)
_CSV_SPECIAL_B = re.compile(rb'[,"\r\n]')
_JSON_ESCAPE_B = re.compile(rb'[\x00-\x1f"\\]')  # what a JSON string must escape


def _csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if _CSV_SPECIAL.search(text) else text


def _ids(rows: Block) -> tuple[bytes, list[str]]:
    """The chunk's id bytes and ids (one decode of the arena when it is ASCII)."""
    raw = rows.id_bytes.tobytes()
    o = rows.id_offsets.tolist()
    if raw.isascii():
        text = raw.decode("ascii")
        return raw, [text[a:b] for a, b in zip(o, o[1:])]
    return raw, [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(o, o[1:])]


def _metas(rows: Block) -> list[str] | None:
    """Each row's metadata as text ("" when none), or None when no row has any."""
    o = rows.meta_offsets.tolist()
    if o[-1] == o[0]:
        return None
    raw = rows.meta_bytes.tobytes()
    return [raw[a:b].decode("utf-8") for a, b in zip(o, o[1:])]


def csv_rows(chunk: Chunk, ties: bool = False) -> bytes:
    """CSV lines of a chunk (no header), as :mod:`csv` writes them with
    minimal quoting and CRLF ends; with ``ties`` a last ``tied_rank`` column.
    From the chunk's columns, O(rows): one regex scan of the id bytes decides
    whether any id needs quoting (ranks, values and timestamps never do);
    metadata, when a row has some, is its compact JSON as one field."""
    rows = chunk.rows
    if not rows.rows:
        return b""
    raw, ids = _ids(rows)
    if _CSV_SPECIAL_B.search(raw) is not None:
        ids = [_csv_field(i) for i in ids]
    cols: list = [range(chunk.first_rank, chunk.first_rank + rows.rows), ids, rows.value.tolist(),
                  format_timestamps(rows.achieved)]
    metas = _metas(rows)
    line = "%d,%s,%d,%s,"
    if metas is not None:
        cols.append([_csv_field(m) for m in metas])
        line += "%s"
    if ties:
        assert chunk.tied_rank is not None
        cols.append(chunk.tied_rank.tolist())
        line += ",%d"
    line += "\r\n"
    return "".join([line % x for x in zip(*cols)]).encode("utf-8", "surrogatepass")


def jsonl_rows(chunk: Chunk, ties: bool = False) -> bytes:
    """JSON Lines of a chunk, one object per row, byte for byte what orjson
    writes for ``{"rank", ["tied_rank",] "player_id", "value", "achieved_at"
    [, "metadata"]}`` (``metadata`` only when the row has some, as in every
    read). From the chunk's columns, O(rows); an id that JSON must escape is
    escaped by orjson."""
    rows = chunk.rows
    if not rows.rows:
        return b""
    raw, ids = _ids(rows)
    if _JSON_ESCAPE_B.search(raw) is not None:
        ids = [orjson.dumps(i).decode("utf-8")[1:-1] for i in ids]
    cols: list = [range(chunk.first_rank, chunk.first_rank + rows.rows)]
    line = '{"rank":%d,'
    if ties:
        assert chunk.tied_rank is not None
        cols.append(chunk.tied_rank.tolist())
        line += '"tied_rank":%d,'
    cols += [ids, rows.value.tolist(), format_timestamps(rows.achieved)]
    line += '"player_id":"%s","value":%d,"achieved_at":"%s"'
    metas = _metas(rows)
    if metas is not None:
        cols.append([',"metadata":' + m if m else "" for m in metas])
        line += "%s"
    line += "}\n"
    return "".join([line % x for x in zip(*cols)]).encode("utf-8", "surrogatepass")


async def _body(first: Chunk, rest: AsyncIterator[Chunk], fmt: str, ties: bool) -> AsyncIterator[bytes]:
    render = csv_rows if fmt == "csv" else jsonl_rows
    try:
        head = (CSV_HEADER + (",tied_rank" if ties else "") + "\r\n").encode() if fmt == "csv" else b""
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
