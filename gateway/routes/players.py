"""A player's data across every board (docs/api.md §17): access and erasure."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import PlayerIdPath, guarded_router, gw
from gateway.schemas import ErasureOut, ErasureStatusOut, PlayerDataOut, error_responses

router = guarded_router("players")


@router.get("/v1/players/{player_id}/data", response_model=PlayerDataOut, responses=error_responses(404),
            summary="Everything FlowRank holds about a player (admin)")
@access(Permission.ADMIN)
async def player_data(player_id: PlayerIdPath, request: Request):
    """Per board: the player view, the history, held events and awards. 404
    `PLAYER_NOT_FOUND` when FlowRank holds nothing about the player."""
    data = await gw(request).engine.player_data(player_id)
    return Response(orjson.dumps(render.player_data(data)), media_type="application/json")  # orjson: Fragments


@router.delete("/v1/players/{player_id}", status_code=202, response_model=ErasureOut, responses=error_responses(404),
               summary="Erase a player from every board (admin)")
@access(Permission.ADMIN)
async def erase_player(player_id: PlayerIdPath, request: Request):
    """Durable before the answer; from then on the player is gone from every read. Forgetting on disk
    follows within `--erasure-deadline-s` (`GET /v1/erasures/{erasure_id}`). 404 `PLAYER_NOT_FOUND`
    when FlowRank holds nothing about the player."""
    got = await gw(request).engine.erase_player(player_id)
    return Response(orjson.dumps(render.erasure(got)), status_code=202, media_type="application/json")


@router.get("/v1/erasures/{erasure_id}", response_model=ErasureStatusOut, responses=error_responses(404),
            summary="An erasure's status (admin)")
@access(Permission.ADMIN)
async def erasure(erasure_id: str, request: Request):
    """`pending` or `complete`, with times. 404 `ERASURE_NOT_FOUND` for an unknown id."""
    got = await gw(request).engine.erasure(erasure_id)
    return Response(orjson.dumps(render.erasure_status(got)), media_type="application/json")
