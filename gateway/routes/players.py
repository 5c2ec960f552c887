"""A player's data across every board (docs/api.md §17, "access")."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import PlayerIdPath, guarded_router, gw
from gateway.schemas import PlayerDataOut, error_responses

router = guarded_router("players")


@router.get("/v1/players/{player_id}/data", response_model=PlayerDataOut, responses=error_responses(404),
            summary="Everything FlowRank holds about a player (admin)")
@access(Permission.ADMIN)
async def player_data(player_id: PlayerIdPath, request: Request):
    """Per board: the player view, the history, held events and awards. 404
    `PLAYER_NOT_FOUND` when FlowRank holds nothing about the player."""
    data = await gw(request).engine.player_data(player_id)
    return Response(orjson.dumps(render.player_data(data)), media_type="application/json")  # orjson: Fragments
