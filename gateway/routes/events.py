"""Score events (docs/api.md §7)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import guarded_router, gw
from gateway.schemas import EventsOut, error_responses
from gateway.validation import events_from_body, parse_json_body

router = guarded_router("events")

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EventBatchIn"}}},
    }
}


@router.post("/v1/events", response_model=EventsOut, responses=error_responses(413), openapi_extra=_BODY_DOC,
             summary="Submit a batch of score events (game_server, admin)")
@access(Permission.SUBMIT, "write")
async def submit_events(request: Request):
    """Validates the whole batch first (any bad event: 422 naming it, nothing
    applied), then answers once every event is durably appended and applied."""
    g = gw(request)
    body = parse_json_body(await request.body())
    events = events_from_body(body, g.settings.max_batch_events)
    results = await g.engine.submit(events)  # outcomes are counted by the engine (stats()["outcomes"])
    return JSONResponse({"results": [render.result(r) for r in results]})
