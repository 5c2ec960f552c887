"""Reads (docs/api.md §8): top pages, one player, around a player, friends, explicit subsets.

Every answer carries ``version``. With ``?max_staleness_ms=N`` an answer may
come from the gateway's view cache and then carries ``stale_ms``.

These declarations are what /openapi.json documents and what validates a
request :mod:`gateway.hot` hands over; the common request never reaches them
(the lean dispatcher serves it), and both paths build the answer with the
same :mod:`gateway.hot` functions.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request

from gateway import hot
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, PageCursor, PlayerIdPath, Ties, guarded_router, gw, json_bytes, page_limit
from gateway.schemas import PlayerOut, SubsetIn, TopOut, WindowOut, error_responses

router = guarded_router("reads")

Staleness = Annotated[
    int | None,
    Query(ge=0, le=86_400_000, description="Allow a cached answer up to this many ms old; adds `stale_ms`."),
]


@router.get("/v1/boards/{board_id}/top", response_model=TopOut, responses=error_responses(404, 410),
            summary="Top of the board, paginated with pinned-version cursors")
@access(Permission.READ)
async def top(
    board_id: BoardIdPath,
    request: Request,
    limit: Annotated[int, page_limit("Entries")] = 10,
    cursor: PageCursor = None,
    max_staleness_ms: Staleness = None,
    ties: Ties = None,
):
    return json_bytes(await hot.top(gw(request), board_id, limit, cursor, max_staleness_ms, ties is not None))


@router.get("/v1/boards/{board_id}/players/{player_id}", response_model=PlayerOut, responses=error_responses(404),
            summary="One player's rank and row")
@access(Permission.READ)
async def player(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    approximate: Annotated[bool, Query(description="Answer from per-shard statistics (±rank_error_bound).")] = False,
    max_staleness_ms: Staleness = None,
    ties: Ties = None,
):
    return json_bytes(await hot.player(gw(request), board_id, player_id, approximate, max_staleness_ms, ties is not None))


@router.get("/v1/boards/{board_id}/players/{player_id}/around", response_model=WindowOut,
            responses=error_responses(404), summary="Ranks r-radius..r+radius around a player, clamped")
@access(Permission.READ)
async def around(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    radius: Annotated[int, Query(ge=0, le=100, description="Neighbours on each side (0-100).")] = 1,
    max_staleness_ms: Staleness = None,
    ties: Ties = None,
):
    return json_bytes(await hot.around(gw(request), board_id, player_id, radius, max_staleness_ms, ties is not None))


@router.get("/v1/boards/{board_id}/players/{player_id}/friends", response_model=WindowOut,
            responses=error_responses(404), summary="The player's friends ranked locally (1..k)")
@access(Permission.READ)
async def friends(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    max_staleness_ms: Staleness = None,
    ties: Ties = None,
):
    """The eligible set is the friends provider's list for ``player_id`` (the
    player themself is not added). The list itself is never returned."""
    return json_bytes(await hot.friends(gw(request), board_id, player_id, max_staleness_ms, ties is not None))


@router.post("/v1/boards/{board_id}/ranked-subset", response_model=WindowOut, responses=error_responses(404, 413),
             summary="An explicit set of players ranked locally (1..k)")
@access(Permission.READ)
async def ranked_subset(board_id: BoardIdPath, body: SubsetIn, request: Request, ties: Ties = None):
    return json_bytes(await hot.ranked_subset(gw(request), board_id, body.player_ids, ties is not None))
