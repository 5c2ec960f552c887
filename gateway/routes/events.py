"""Score events (docs/api.md §7)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from gateway import hot
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import guarded_router, gw
from gateway.schemas import EventsOut, error_responses

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
    return Response(await hot.submit(gw(request), await request.body()), media_type="application/json")
