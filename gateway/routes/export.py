"""Export (docs/api.md §13): every ranked row of a board at one pinned version, streamed.

``GET /v1/boards/{id}/export?format=csv|jsonl`` (admin, moderator). The rows
come from :meth:`engine.client.EngineClient.export`, the /changes snapshot view
of the board's version when the export started (docs/api.md §9), page by page;
each page is rendered and sent before the next is read, so the bytes in flight
are one page whatever the board's size. ``X-Board-Version`` names the version.

* CSV (RFC 4180, CRLF line ends): ``rank,player_id,value,achieved_at,metadata``;
  ``metadata`` is the row's compact JSON (quoted as any CSV field holding a
  comma or a quote is), empty when the row has none.
* JSON Lines: one object per row with the same fields; ``metadata`` is left
  out when there is none, as in every other read (docs/api.md §13).
* ``?ties=competition`` adds each row's ``tied_rank`` (§13): a last CSV column
  ``tied_rank``, a ``tied_rank`` field after ``rank`` in JSON Lines.

The first page is read before the response starts, so an unknown board is a
plain 404 error body. A failure after that (the engine failing mid-stream) can
no longer change the status: the connection is closed before the end of the
body, which an HTTP client sees as an incomplete response, never as a short
export that looks whole.
"""

from __future__ import annotations

import re
from typing import AsyncIterator, Literal, Sequence

import orjson
from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from engine.model import Page, RankedEntry
from engine.timefmt import format_timestamps

from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, Ties, guarded_router, gw
from gateway.schemas import error_responses

router = guarded_router("export")

PAGE_ROWS = 5_000  # rows rendered per chunk: ~0.3 MB of CSV, a few ms of the event loop
CSV_HEADER = "rank,player_id,value,achieved_at,metadata"
MEDIA = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


_CSV_SPECIAL = re.compile(r'[,"\r\n]')  # a field holding one of these is quoted (RFC 4180)


def _csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if _CSV_SPECIAL.search(text) else text


def csv_rows(entries: Sequence[RankedEntry], ties: bool = False) -> bytes:
    """CSV lines of ``entries`` (no header), as :mod:`csv` writes them with
    minimal quoting and CRLF ends; with ``ties`` a last ``tied_rank`` column.
    O(rows); one regex scan decides whether any player id of the page needs
    quoting (ranks, values and timestamps never do); metadata, when a row
    has some, is its compact JSON as one field."""
    stamps = format_timestamps([e.achieved_at for e in entries])
    ids = [e.player_id for e in entries]
    if _CSV_SPECIAL.search("".join(ids)) is not None:
        ids = [_csv_field(i) for i in ids]
    metas = [_csv_field(e.metadata.decode("utf-8")) if e.metadata else "" for e in entries]
    if ties:
        lines = [f"{e.rank},{pid},{e.value},{ts},{m},{e.tied_rank}\r\n"
                 for e, pid, ts, m in zip(entries, ids, stamps, metas)]
    else:
        lines = [f"{e.rank},{pid},{e.value},{ts},{m}\r\n" for e, pid, ts, m in zip(entries, ids, stamps, metas)]
    return "".join(lines).encode("utf-8")


def jsonl_rows(entries: Sequence[RankedEntry], ties: bool = False) -> bytes:
    """JSON Lines of ``entries``, one object per row (``tied_rank`` after
    ``rank`` with ``ties``, as in every read; ``metadata`` last when the row
    has some). O(rows)."""
    stamps = format_timestamps([e.achieved_at for e in entries])
    dumps = orjson.dumps
    if ties:
        rows = [{"rank": e.rank, "tied_rank": e.tied_rank, "player_id": e.player_id, "value": e.value,
                 "achieved_at": ts} for e, ts in zip(entries, stamps)]
    else:
        rows = [{"rank": e.rank, "player_id": e.player_id, "value": e.value, "achieved_at": ts}
                for e, ts in zip(entries, stamps)]
    for row, e in zip(rows, entries):
        if e.metadata:
            row["metadata"] = orjson.Fragment(e.metadata)
    return b"".join(dumps(row) + b"\n" for row in rows)


async def _body(first: Page, rest: AsyncIterator[Page], fmt: str, ties: bool) -> AsyncIterator[bytes]:
    render = csv_rows if fmt == "csv" else jsonl_rows
    try:
        head = (CSV_HEADER + (",tied_rank" if ties else "") + "\r\n").encode() if fmt == "csv" else b""
        yield head + render(first.entries, ties)
        async for page in rest:
            yield render(page.entries, ties)
    finally:
        await rest.aclose()  # type: ignore[attr-defined]  # an async generator: release the pinned view now


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
    pages = gw(request).engine.export(board_id, PAGE_ROWS, ties=ties is not None)
    try:
        first = await pages.__anext__()
    except BaseException:
        await pages.aclose()
        raise
    name = f"{board_id.replace(':', '_')}-v{first.version}.{fmt}"
    return StreamingResponse(
        _body(first, pages, fmt, ties is not None),
        media_type=MEDIA[fmt],
        headers={"X-Board-Version": str(first.version), "Cache-Control": "no-store",
                 "Content-Disposition": f'attachment; filename="{name}"'},
    )
