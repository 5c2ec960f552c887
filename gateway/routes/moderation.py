"""Quarantine, decisions, invalidations and history (docs/api.md §10; moderator, admin)."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from engine.core.model import Invalidation, QuarantineDecision

from gateway import render
from gateway.auth import Permission
from gateway.guard import access, principal_of
from gateway.routes.common import BoardIdPath, EventIdPath, PlayerIdPath, guarded_router, gw
from gateway.schemas import (
    DecisionIn,
    DecisionOut,
    ErrorBody,
    HistoryOut,
    InvalidationIn,
    InvalidationOut,
    QuarantineOut,
    error_responses,
)

router = guarded_router("moderation")


@router.get("/v1/boards/{board_id}/quarantine", response_model=QuarantineOut, responses=error_responses(404),
            summary="Held events not yet decided (moderator)")
@access(Permission.MODERATE)
async def quarantine(board_id: BoardIdPath, request: Request):
    held = await gw(request).engine.quarantine(board_id)
    return JSONResponse({"events": [render.held(h) for h in held]})


@router.post("/v1/boards/{board_id}/quarantine/{event_id}", response_model=DecisionOut,
             responses=error_responses(404, 409), summary="Apply or reject a held event (moderator)")
@access(Permission.MODERATE, "write")
async def decide(board_id: BoardIdPath, event_id: EventIdPath, body: DecisionIn, request: Request):
    decision = QuarantineDecision(
        board_id=board_id,
        event_id=event_id,
        decision=body.decision,
        reason=body.reason,
        moderator=body.moderator or principal_of(request).name,
    )
    return JSONResponse(render.decision(await gw(request).engine.decide(decision)))


@router.post("/v1/boards/{board_id}/invalidations", response_model=InvalidationOut,
             responses=error_responses(404, 409), summary="Invalidate an applied event (moderator)")
@access(Permission.MODERATE, "write")
async def invalidate(board_id: BoardIdPath, body: InvalidationIn, request: Request):
    inv = Invalidation(
        board_id=board_id,
        event_id=body.event_id,
        reason=body.reason,
        moderator=body.moderator or principal_of(request).name,
    )
    return JSONResponse(render.invalidation(await gw(request).engine.invalidate(inv)))


@router.get("/v1/boards/{board_id}/players/{player_id}/history", response_model=HistoryOut,
            responses={**error_responses(404), 410: {"model": ErrorBody, "description": (
                "`BOARD_ARCHIVED`: only for a board archived by a FlowRank older than the archive history "
                "(archive format 1); an ARCHIVED board answers its history from its archive.")}},
            summary="Every event of a player in log order (moderator)")
@access(Permission.MODERATE)
async def history(board_id: BoardIdPath, player_id: PlayerIdPath, request: Request):
    entries = await gw(request).engine.history(board_id, player_id)
    body = {"player_id": player_id, "events": [render.history(h) for h in entries]}
    return Response(orjson.dumps(body), media_type="application/json")  # orjson: metadata Fragments
