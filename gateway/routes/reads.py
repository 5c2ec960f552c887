"""Reads (docs/api.md §8): top pages, one player, around a player, friends, explicit subsets.

Every answer carries ``version``. With ``?max_staleness_ms=N`` an answer may
come from the gateway's view cache and then carries ``stale_ms``.
"""

from __future__ import annotations

from typing import Annotated, Awaitable, Callable

from fastapi import Query, Request
from fastapi.responses import JSONResponse

from engine.errors import ValidationFailed

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, PlayerIdPath, guarded_router, gw
from gateway.schemas import PlayerOut, SubsetIn, TopOut, WindowOut, error_responses
from gateway.validation import decode_cursor, encode_cursor

router = guarded_router("reads")

Staleness = Annotated[
    int | None,
    Query(ge=0, le=86_400_000, description="Allow a cached answer up to this many ms old; adds `stale_ms`."),
]


async def _maybe_cached(request: Request, key: tuple, staleness: int | None, fetch: Callable[[], Awaitable[dict]]):
    if staleness is None:
        return JSONResponse(await fetch())
    return JSONResponse(await gw(request).cache.get(key, staleness, fetch))


@router.get("/v1/boards/{board_id}/top", response_model=TopOut, responses=error_responses(404, 410),
            summary="Top of the board, paginated with pinned-version cursors")
@access(Permission.READ)
async def top(
    board_id: BoardIdPath,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="Entries per page (1-1000).")] = 10,
    cursor: Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page.")] = None,
    max_staleness_ms: Staleness = None,
):
    offset, at_version = 0, None
    if cursor is not None:
        at_version, offset = decode_cursor(cursor)
    engine = gw(request).engine

    async def fetch() -> dict:
        page = await engine.top(board_id, offset, limit + 1, at_version=at_version)
        entries = page.entries[:limit]
        more = len(page.entries) > limit
        return {
            "version": page.version,
            "entries": render.entries(entries),
            "next_cursor": encode_cursor(page.version, offset + limit) if more else None,
        }

    return await _maybe_cached(request, ("top", board_id, offset, limit, at_version), max_staleness_ms, fetch)


@router.get("/v1/boards/{board_id}/players/{player_id}", response_model=PlayerOut, responses=error_responses(404),
            summary="One player's rank and row")
@access(Permission.READ)
async def player(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    approximate: Annotated[bool, Query(description="Answer from per-shard statistics (±rank_error_bound).")] = False,
    max_staleness_ms: Staleness = None,
):
    engine = gw(request).engine

    async def fetch() -> dict:
        if approximate:
            view = await engine.approximate_player(board_id, player_id)
            body = render.player(view)
            body["approximate"] = True
            if body["rank_error_bound"] is None:
                body["rank_error_bound"] = 0
            return body
        body = render.player(await engine.player(board_id, player_id))
        body["approximate"] = False
        return body

    return await _maybe_cached(request, ("player", board_id, player_id, approximate), max_staleness_ms, fetch)


@router.get("/v1/boards/{board_id}/players/{player_id}/around", response_model=WindowOut,
            responses=error_responses(404), summary="Ranks r-radius..r+radius around a player, clamped")
@access(Permission.READ)
async def around(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    radius: Annotated[int, Query(ge=0, le=100, description="Neighbours on each side (0-100).")] = 1,
    max_staleness_ms: Staleness = None,
):
    engine = gw(request).engine

    async def fetch() -> dict:
        page = await engine.around(board_id, player_id, radius)
        return {"version": page.version, "player_id": player_id, "entries": render.entries(page.entries)}

    return await _maybe_cached(request, ("around", board_id, player_id, radius), max_staleness_ms, fetch)


@router.get("/v1/boards/{board_id}/players/{player_id}/friends", response_model=WindowOut,
            responses=error_responses(404), summary="The player's friends ranked locally (1..k)")
@access(Permission.READ)
async def friends(
    board_id: BoardIdPath,
    player_id: PlayerIdPath,
    request: Request,
    max_staleness_ms: Staleness = None,
):
    """The eligible set is the friends provider's list for ``player_id`` (the
    player themself is not added). The list itself is never returned."""
    g = gw(request)

    async def fetch() -> dict:
        ids = await g.friends.friends_of(player_id)
        ids = ids[: g.settings.max_ranked_subset]
        page = await g.engine.ranked_subset(board_id, ids)
        return {"version": page.version, "player_id": player_id, "entries": render.entries(page.entries)}

    return await _maybe_cached(request, ("friends", board_id, player_id), max_staleness_ms, fetch)


@router.post("/v1/boards/{board_id}/ranked-subset", response_model=WindowOut, responses=error_responses(404, 413),
             summary="An explicit set of players ranked locally (1..k)")
@access(Permission.READ)
async def ranked_subset(board_id: BoardIdPath, body: SubsetIn, request: Request):
    g = gw(request)
    if len(body.player_ids) > g.settings.max_ranked_subset:
        raise ValidationFailed(f"At most {g.settings.max_ranked_subset} player ids.", "player_ids")
    ids = list(dict.fromkeys(body.player_ids))
    page = await g.engine.ranked_subset(board_id, ids)
    return JSONResponse({"version": page.version, "entries": render.entries(page.entries)})
