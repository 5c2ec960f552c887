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
    info = cluster_info(g.engine)
    if info["role"] != "active":  # a standby of its log (docs/api.md §19)
        headers = {"Retry-After": "1"} | ({"X-FlowRank-Leader": info["leader"]} if info["leader"] else {})
        return JSONResponse(error_body("NOT_LEADER", "This node is a standby: writes go to the active node.", None),
                            status_code=503, headers=headers)
    return JSONResponse(error_body("OVERLOADED", "Not ready to accept writes.", None), status_code=503,
                        headers={"Retry-After": "1"})


def cluster_info(engine) -> dict:
    """The engine's ``cluster_info()`` (docs/api.md §19); an engine without one (a gateway worker's remote
    engine) answers as the active node of its own log."""
    info = getattr(engine, "cluster_info", None)
    if info is not None:
        return info()
    return {"role": "active", "node": None, "epoch": 0, "leader": None, "log_end": None, "applied": None,
            "lag_records": 0, "lag_s": 0.0, "takeovers": 0}


@public.get("/readyz/reads", response_model=Ready, summary="200 when this node's reads have caught up with its log "
            "to within 1 s (no key)", responses={503: {"model": ErrorBody, "description": "`OVERLOADED`: behind."}})
@access(None)
async def readyz_reads(request: Request):
    g = gw(request)
    if g.warmup is not None and not g.warmup.done:
        return JSONResponse(error_body("OVERLOADED", g.warmup.describe(), None), status_code=503,
                            headers={"Retry-After": "1"})
    info = cluster_info(g.engine)
    if info["lag_records"] == 0 or (info["lag_s"] is not None and info["lag_s"] <= 1.0):
        return JSONResponse({"ready": True})
    return JSONResponse(error_body("OVERLOADED", f"Reads are {info['lag_records']} records behind the log.", None),
                        status_code=503, headers={"Retry-After": "1"})


@router.get("/v1/cluster", summary="This node's role on its log, epoch, leader and lag (admin)",
            responses=error_responses())
@access(Permission.ADMIN)
async def cluster(request: Request):
    return JSONResponse(cluster_info(gw(request).engine))


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
    g.metrics.set_cluster(cluster_info(g.engine))
    return Response(generate_latest(g.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/boards/{board_id}/checksum", response_model=ChecksumOut, responses=error_responses(404),
            summary="Hash over every row, identical after any replay (admin)")
@access(Permission.ADMIN)
async def checksum(board_id: BoardIdPath, request: Request):
    return JSONResponse(render.checksum(await gw(request).engine.checksum(board_id)))
