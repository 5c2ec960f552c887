"""Reconciliation and the live SSE stream (docs/api.md §9)."""

from __future__ import annotations

import asyncio
from typing import Annotated, AsyncIterator, Callable

from fastapi import Header, Query, Request
import orjson
from fastapi.responses import Response, StreamingResponse

from engine.core.errors import ValidationFailed

from gateway import render
from gateway.auth import Permission
from gateway.guard import access, principal_of
from gateway.routes.common import BoardIdPath, Ties, cursor_query, guarded_router, gw
from gateway.schemas import ChangesOut, error_responses
from gateway.validation import decode_cursor, encode_cursor

router = guarded_router("live")


@router.get("/v1/boards/{board_id}/changes", response_model=ChangesOut, responses=error_responses(404, 410),
            summary="Contiguous deltas after a version, or a snapshot (paged) when they are gone")
@access(Permission.READ)
async def changes(
    board_id: BoardIdPath,
    request: Request,
    since_version: Annotated[int | None, Query(ge=0, description="The client's last applied version "
                                               "(required without `cursor`).")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Snapshot entries per response (1-10,000).")] = 10_000,
    cursor: Annotated[str | None, cursor_query("`next_cursor` of the previous snapshot page; `since_version` "
                                               "is then ignored.")] = None,
    ties: Ties = None,
):
    if cursor is None and since_version is None:
        raise ValidationFailed("since_version is required (or a cursor from a snapshot page).", "since_version")
    pinned = decode_cursor(cursor) if cursor is not None else None
    ch = await gw(request).engine.changes(board_id, since_version, limit, pinned, ties=ties is not None)
    body = render.changes(ch)
    if ch.kind == "snapshot":
        body["next_cursor"] = encode_cursor(*ch.next_cursor) if ch.next_cursor is not None else None
    return Response(orjson.dumps(body), media_type="application/json")  # orjson: metadata Fragments


_SSE_DOC = {
    200: {
        "description": "`text/event-stream`: `event: snapshot` then `event: delta` messages (`id:` = version).",
        # OpenAPI 3.1: the schema of a text/event-stream describes one event (its fields as strings)
        "content": {"text/event-stream": {"schema": {
            "type": "object",
            "required": ["event", "id", "data"],
            "properties": {
                "event": {"type": "string", "enum": ["snapshot", "delta"]},
                "id": {"type": "string", "pattern": "^(0|[1-9][0-9]*)$", "description": "The board version."},
                "data": {"type": "string", "contentMediaType": "application/json",
                         "description": "`snapshot`: `{version, entries}`; `delta`: `{base_version, version, "
                                        "changes}` (docs/api.md §9)."},
            },
        }}},
    }
}


def _last_event_id(raw: str | None) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 19 else None


async def _until(stream: AsyncIterator[str], expires_ms: int, now_ms: Callable[[], int]) -> AsyncIterator[str]:
    """``stream`` until the wall clock reaches ``expires_ms``; closes ``stream`` either way."""
    it = stream.__aiter__()
    try:
        while True:
            left_s = (expires_ms - now_ms()) / 1000.0
            if left_s <= 0:
                return
            try:
                msg = await asyncio.wait_for(it.__anext__(), left_s)
            except (StopAsyncIteration, asyncio.TimeoutError):
                return
            yield msg
    finally:
        await it.aclose()  # type: ignore[attr-defined]


@router.get("/v1/boards/{board_id}/live", response_class=StreamingResponse,
            responses={**error_responses(404), **_SSE_DOC}, summary="Server-Sent Events of the top-N window")
@access(Permission.READ)
async def live(
    board_id: BoardIdPath,
    request: Request,
    top: Annotated[int, Query(ge=1, le=1000, description="Window size N (1-1000).")] = 100,
    since_version: Annotated[int | None, Query(ge=0, description="Resume after this version.")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", description="Resume (wins over the query).")]
    = None,
):
    hub = gw(request).hub
    hub.start()
    current = (await gw(request).engine.board(board_id)).current
    if current is not None:  # a series (docs/api.md §15): the window of its current instance, as at connect time
        board_id = current
    resume = _last_event_id(last_event_id)
    if resume is None:
        resume = since_version
    sub = await hub.subscribe(board_id, top, resume)
    stream = hub.stream(sub)
    expires_ms = principal_of(request).expires_ms
    if expires_ms is not None:  # a token's stream ends when the token does (a reconnect is then 401)
        stream = _until(stream, expires_ms, gw(request).credentials.now_ms)
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
