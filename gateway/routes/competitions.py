"""Competitions (docs/api.md §16): league cohorts (reader) and prize awards (admin).

The two cohort reads are hot routes as well (:mod:`gateway.hot` serves them
with the same :func:`gateway.hot.cohort`); these declarations document them
and answer what the lean path hands over. Joining is in
:mod:`gateway.routes.boards`, beside the board settings it belongs to.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import Path, Query, Request

from engine.core.league import MAX_TIERS

from gateway import hot, render
from gateway.auth import Permission
from gateway.guard import access
from gateway.routes.common import BoardIdPath, PageCursor, PlayerIdPath, Ties, guarded_router, gw, json_bytes, page_limit
from gateway.schemas import AwardsOut, CohortOut, CohortsOut, TierOut, error_responses
from gateway.validation import decode_cursor, encode_cursor

router = guarded_router("competitions")

#: The version part of an awards cursor (``<version>.<offset>``, as every cursor): awards never change
#: once logged, so a cursor pins nothing and its version part is 0 (any version is accepted back).
AWARDS_CURSOR_VERSION = 0
#: A cohorts cursor (``<version>.<offset>``) names the page's last cohort in its offset part: ``tier << 32 |
#: number``. Cohorts are only ever added, so the next page starts right after it whatever was added since.
COHORT_CURSOR_SHIFT = 32

CohortPath = Annotated[
    str,
    Path(description="`<tier>-<n>`, as cohort reads name it; any other text is a 404 `COHORT_NOT_FOUND`.",
         examples=["1-1"]),
]


@router.get("/v1/boards/{board_id}/players/{player_id}/cohort", response_model=CohortOut,
            responses=error_responses(404), summary="The player's league cohort, ranked locally, with zones")
@access(Permission.READ)
async def player_cohort(board_id: BoardIdPath, player_id: PlayerIdPath, request: Request, ties: Ties = None):
    """The cohort the player was placed in when they entered the league board.
    404 `PLAYER_NOT_FOUND` when they have not entered, `COHORT_NOT_FOUND` on a
    board that is not a league."""
    return json_bytes(await hot.cohort(gw(request), board_id, player_id, None, ties is not None))


@router.get("/v1/boards/{board_id}/cohorts/{cohort}", response_model=CohortOut, responses=error_responses(404),
            summary="A league cohort by id, ranked locally, with zones")
@access(Permission.READ)
async def cohort(board_id: BoardIdPath, cohort: CohortPath, request: Request, ties: Ties = None):
    """404 `COHORT_NOT_FOUND` for an unknown or malformed cohort id, and on a
    board that is not a league."""
    return json_bytes(await hot.cohort(gw(request), board_id, None, cohort, ties is not None))


@router.get("/v1/boards/{board_id}/cohorts", response_model=CohortsOut, responses=error_responses(404),
            summary="A league's cohorts, by tier then cohort number")
@access(Permission.READ)
async def cohorts(
    board_id: BoardIdPath,
    request: Request,
    tier: Annotated[int | None, Query(ge=1, le=MAX_TIERS, description="Only this tier's cohorts.")] = None,
    limit: Annotated[int, page_limit("Cohorts")] = 100,
    cursor: PageCursor = None,
):
    """Each cohort's id, tier and `members` (players placed in it), by tier then cohort number
    (docs/api.md §18); every page but the last holds `limit` cohorts. A series answers from its current
    instance (`board_id` names it). 404 `COHORT_NOT_FOUND` on a board that is not a league."""
    after = None
    if cursor is not None:
        key = decode_cursor(cursor)[1]
        after = (key >> COHORT_CURSOR_SHIFT, key & ((1 << COHORT_CURSOR_SHIFT) - 1))
    page = await gw(request).engine.cohorts(board_id, tier, after, limit)
    more = None if page.after is None else encode_cursor(page.version, (page.after[0] << COHORT_CURSOR_SHIFT)
                                                        | page.after[1])
    return json_bytes(orjson.dumps(render.cohorts(page, more)))


@router.get("/v1/boards/{board_id}/players/{player_id}/tier", response_model=TierOut, responses=error_responses(404),
            summary="The tier a player has on a league, or would enter it at")
@access(Permission.READ)
async def player_tier(board_id: BoardIdPath, player_id: PlayerIdPath, request: Request):
    """`entered`: whether the player was placed in a cohort (their cohort's tier); else the tier they would
    enter at, carried by next-season (or, on a series, from the instances before), else 1 (docs/api.md §18).
    A series answers from its current instance. 404 `COHORT_NOT_FOUND` on a board that is not a league."""
    return json_bytes(orjson.dumps(render.tier(await gw(request).engine.tier(board_id, player_id))))


@router.get("/v1/boards/{board_id}/awards", response_model=AwardsOut, responses=error_responses(404),
            summary="The board's prize awards, in award order (admin)")
@access(Permission.ADMIN)
async def awards(
    board_id: BoardIdPath,
    request: Request,
    limit: Annotated[int, page_limit("Awards")] = 100,
    cursor: PageCursor = None,
):
    """Every page but the last holds `limit` awards. A board without prizes,
    or not FINALIZED yet, has none."""
    start = 0 if cursor is None else decode_cursor(cursor)[1]
    page = await gw(request).engine.awards(board_id, start, limit)
    more = None if page.next_cursor is None else encode_cursor(AWARDS_CURSOR_VERSION, page.next_cursor)
    return json_bytes(orjson.dumps(render.awards(page, more)))
