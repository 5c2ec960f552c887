"""Boards, season state and the next season (docs/api.md §5, §13)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from engine.core.model import (
    DEFAULT_FINALIZE_AFTER_S,
    DEFAULT_MAX_PLAUSIBLE_TIME_MS,
    BoardSpec,
    EntrySpec,
    LeagueSpec,
    Prize,
)
from engine.core.subscores import check_directions
from engine.core.windows import Recurrence, series_check

from gateway import render
from gateway.auth import Permission
from gateway.guard import access, principal_of
from gateway.routes.common import BoardIdPath, PlayerIdPath, guarded_router, gw
from gateway.schemas import (
    BoardCreate,
    BoardList,
    BoardOut,
    InstancesOut,
    JoinOut,
    JoinsIn,
    JoinsOut,
    NextSeasonIn,
    PrizeIn,
    StateIn,
    error_responses,
)
from gateway.validation import check_reward

router = guarded_router("boards")


@router.post("/v1/boards", status_code=201, response_model=BoardOut, responses=error_responses(409),
             summary="Create a board (admin)")
@access(Permission.ADMIN, "write")
async def create_board(body: BoardCreate, request: Request):
    g = gw(request)
    recurrence = None
    if body.recurrence is not None:  # a series (docs/api.md §15): the one parser names any bad field
        recurrence = Recurrence.parse(body.recurrence.model_dump())
        series_check(body.board_id)
    spec = BoardSpec(
        board_id=body.board_id,
        policy=body.policy,
        shards=body.shards if body.shards is not None else g.default_shards,
        max_plausible_time_ms=body.max_plausible_time_ms or DEFAULT_MAX_PLAUSIBLE_TIME_MS,
        review_above=body.review_above,
        closes_at=body.closes_at,
        finalize_after_s=DEFAULT_FINALIZE_AFTER_S if body.finalize_after_s is None else body.finalize_after_s,
        subscores=check_directions(body.policy, body.subscores),
        recurrence=recurrence,
        entry=None if body.entry is None else EntrySpec(**body.entry.model_dump()),
        league=None if body.league is None else LeagueSpec(**body.league.model_dump()),
        prizes=_prizes(body.prizes or []),
    )
    info = await g.engine.create_board(spec)
    return JSONResponse(render.board(info), status_code=201)


def _prizes(prizes: list[PrizeIn]) -> tuple[Prize, ...]:
    """The engine's prizes, each reward kept as canonical JSON text; the engine checks
    the ranges (ValidationFailed naming ``prizes[i].ranks``, docs/api.md §16)."""
    return tuple(Prize(p.ranks[0], p.ranks[1], check_reward(p.reward, f"prizes[{i}].reward"))
                 for i, p in enumerate(prizes))


@router.get("/v1/boards", response_model=BoardList, responses=error_responses(), summary="List boards")
@access(Permission.READ)
async def list_boards(request: Request):
    boards = await gw(request).engine.list_boards()
    scope = principal_of(request).board_ids  # a token for some boards lists only those (docs/api.md §12)
    if scope is not None:
        boards = [b for b in boards if b.board_id in scope]
    return JSONResponse({"boards": [render.board(b) for b in boards]})


@router.get("/v1/boards/{board_id}", response_model=BoardOut, responses=error_responses(404), summary="One board")
@access(Permission.READ)
async def get_board(board_id: BoardIdPath, request: Request):
    return JSONResponse(render.board(await gw(request).engine.board(board_id)))


@router.get("/v1/boards/{board_id}/instances", response_model=InstancesOut, responses=error_responses(404),
            summary="A series' instances, latest window first")
@access(Permission.READ)
async def instances(board_id: BoardIdPath, request: Request):
    """One entry per window's instance of the series (docs/api.md §15); 404 when
    ``board_id`` is not a series."""
    return JSONResponse(render.instances(await gw(request).engine.instances(board_id)))


@router.post("/v1/boards/{board_id}/state", response_model=BoardOut, responses=error_responses(404, 409),
             summary="Move a board's season state forward (admin)")
@access(Permission.ADMIN, "write")
async def set_state(board_id: BoardIdPath, body: StateIn, request: Request):
    return JSONResponse(render.board(await gw(request).engine.set_state(board_id, body.state)))


@router.post("/v1/boards/{board_id}/next-season", status_code=201, response_model=BoardOut,
             responses=error_responses(404, 409), summary="Create the board's next season (admin)")
@access(Permission.ADMIN, "write")
async def next_season(board_id: BoardIdPath, body: NextSeasonIn, request: Request):
    info = await gw(request).engine.next_season(board_id, body.season, body.closes_at, body.finalize_after_s)
    return JSONResponse(render.board(info), status_code=201)


@router.post("/v1/boards/{board_id}/players/{player_id}/join", status_code=201, response_model=JoinOut,
             responses={200: {"model": JoinOut, "description": "The player had joined before: the same body."},
                        **error_responses(404, 409)},
             summary="Join a competition (game_server, admin)")
@access(Permission.SUBMIT, "write")
async def join(board_id: BoardIdPath, player_id: PlayerIdPath, request: Request):
    """201 with the player's 0-based position the first time; 200 with the
    same body on every later join, whatever the board's state (docs/api.md
    §16). 409 `BOARD_FULL` / `BOARD_NOT_OPEN`. Durable before the answer."""
    got = await gw(request).engine.join(board_id, player_id)
    return JSONResponse(render.join(got), status_code=201 if got.created else 200)


@router.post("/v1/boards/{board_id}/joins", response_model=JoinsOut, responses=error_responses(404),
             summary="Join many players at once (game_server, admin)")
@access(Permission.SUBMIT, "write")
async def joins(board_id: BoardIdPath, body: JoinsIn, request: Request):
    """1 to 1,000 distinct players, each answered in request order as the single join would answer it
    (docs/api.md §18): `status` 201 with `position`, 200 with the same body, or 409 with the `error` it
    would have had. A series joins its current instance (`board_id` names it). The new joins are durable
    together (one log record) before the answer, and the request counts once against rate limits. A
    repeated id, or any other bad input, is 422 and joins no one."""
    got = await gw(request).engine.joins(board_id, body.player_ids)
    return JSONResponse(render.joins(got, body.player_ids))
