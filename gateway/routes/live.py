"""Reconciliation and the live SSE stream (docs/api.md §9)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, guarded_router, gw
from gateway.schemas import ChangesOut, error_responses

router = guarded_router("live")


@router.get("/v1/boards/{board_id}/changes", response_model=ChangesOut, responses=error_responses(404),
            summary="Contiguous deltas after a version, or a snapshot when they are gone")
@access(Permission.READ)
async def changes(
    board_id: BoardIdPath,
    request: Request,
    since_version: Annotated[int, Query(ge=0, description="The client's last applied version.")],
):
    return JSONResponse(render.changes(await gw(request).engine.changes(board_id, since_version)))


_SSE_DOC = {
    200: {
        "description": "`text/event-stream`: `event: snapshot` then `event: delta` messages (`id:` = version).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def _last_event_id(raw: str | None) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 19 else None


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
    resume = _last_event_id(last_event_id)
    if resume is None:
        resume = since_version
    sub = await hub.subscribe(board_id, top, resume)
    return StreamingResponse(
        hub.stream(sub),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
