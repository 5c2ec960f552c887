"""Health, readiness, metrics and the checksum (docs/api.md §1, §10, §11)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from engine.core.errors import FlowRankError

from gateway import render
from gateway.auth import Permission
from gateway.guard import access
from gateway.handlers import error_body
from gateway.routes.common import BoardIdPath, guarded_router, gw
from gateway.schemas import ChecksumOut, ErrorBody, Health, Ready, error_responses

log = logging.getLogger("flowrank.gateway")

REFRESH_TIMEOUT_S = 2.0  # a scrape waits at most this long for current engine stats

public = guarded_router("ops", public=True)
router = guarded_router("ops")


@public.get("/healthz", response_model=Health, summary="200 while the process is alive (no key)")
@access(None)
async def healthz():
    return JSONResponse({"status": "ok"})


@public.get("/readyz", response_model=Ready, summary="200 only when writes can be accepted (no key)",
            responses={503: {"model": ErrorBody, "description": "`OVERLOADED`: not ready yet."}})
@access(None)
async def readyz(request: Request):
    g = gw(request)
    if g.warmup is not None and not g.warmup.done:  # flowrank serve: no request may wait on a compile
        return JSONResponse(error_body("OVERLOADED", g.warmup.describe(), None), status_code=503,
                            headers={"Retry-After": "1"})
    try:
        ok = bool(await g.engine.ready())
    except FlowRankError:
        ok = False
    if ok:
        return JSONResponse({"ready": True})
    return JSONResponse(error_body("OVERLOADED", "Not ready to accept writes.", None), status_code=503,
                        headers={"Retry-After": "1"})


@public.get("/metrics", summary="Prometheus text (no key)", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Metrics."}})
@access(None)
async def metrics(request: Request):
    g = gw(request)
    refresh = getattr(g.engine, "refresh_stats", None)
    try:  # current shard rows (Ray: one call per shard actor); a slow or failing engine keeps the last ones
        if refresh is not None:
            await asyncio.wait_for(refresh(), REFRESH_TIMEOUT_S)
    except Exception:
        log.warning("engine refresh_stats() failed or took over %.1f s; scraping the last stats", REFRESH_TIMEOUT_S,
                    exc_info=True)
    try:
        ready = (g.warmup is None or g.warmup.done) and bool(await asyncio.wait_for(g.engine.ready(), REFRESH_TIMEOUT_S))
    except Exception:  # FlowRankError, a timeout: not ready, as /readyz would answer
        ready = False
    g.metrics.ready.set(1.0 if ready else 0.0)
    return Response(generate_latest(g.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/boards/{board_id}/checksum", response_model=ChecksumOut, responses=error_responses(404),
            summary="Hash over every row, identical after any replay (admin)")
@access(Permission.ADMIN)
async def checksum(board_id: BoardIdPath, request: Request):
    return JSONResponse(render.checksum(await gw(request).engine.checksum(board_id)))
