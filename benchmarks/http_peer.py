"""The FastAPI + Redis peer of ``python -m benchmarks http``: what a careful
team would put in front of Redis to serve FlowRank's contract.

    python -m benchmarks.http_peer --redis-port 6379 --port 8100 --keys keys.json

* **Same routes and JSON shapes** as ``flowrank serve`` for what the HTTP
  benchmark drives: ``POST /v1/boards`` (best_score only), ``POST /v1/events``,
  ``GET /v1/boards/{b}/top``, ``GET /v1/boards/{b}/players/{p}`` (exact rank),
  ``GET /v1/boards/{b}/players/{p}/around``; errors as
  ``{"error": {"code", "message", "field"}}``; ``Authorization: Bearer``
  keys from the same keys file.
* **Equal semantics**, through :mod:`benchmarks.redis_peer`'s Lua library
  (one ``FCALL`` per event, pipelined per batch): ``SET NX`` dedup with the
  content fingerprint, the exact lexicographic zset (value, then achieved_at,
  then player id), a row guarded so only a strict improvement replaces it;
  ``redis-server`` is started by the benchmark with ``appendonly yes``,
  ``appendfsync always`` (acknowledged = fsynced, like FlowRank's log).
  Batches are validated by FlowRank's own rules
  (:func:`gateway.validation.events_from_body`), so both sides refuse the same
  bodies. Reads are one round trip each: ``ZRANGE`` + ``GET version`` in one
  ``MULTI`` (a consistent cut), ``fr_rank``/``fr_around`` plus the row and the
  version likewise.
* **Ordinary FastAPI**: redis-py asyncio, one connection pool, FastAPI's
  default ``JSONResponse``; one uvicorn worker, like the FlowRank gateway.

Not carried over (documented differences): ``row_version`` is the board
version of the read (the peer keeps no per-row version), cursors are not
pinned to a version, and only ``best_score`` boards exist.
"""

from __future__ import annotations

import argparse
import json
import struct
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from benchmarks.redis_peer import (
    DEFAULT_DEDUP_TTL_S,
    INT64_MAX,
    LUA_LIBRARY,
    _OFF,
    decode_member,
    fingerprint,
)
from engine.core.errors import FlowRankError
from engine.core.timefmt import format_timestamp
from gateway.validation import encode_cursor, expand_events, parse_json_body

_QQ = struct.Struct(">QQ")
_OUTCOMES = {"F": "APPLIED_FIRST_SCORE", "B": "APPLIED_NEW_BEST", "R": "REJECTED_NOT_AN_IMPROVEMENT",
             "D": "DUPLICATE_IGNORED", "C": "REJECTED_EVENT_ID_CONFLICT", "T": "REJECTED_INVALID_TIMING"}
MAX_BATCH = 10_000


def _err(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status)


class _Keys:
    def __init__(self, board_id: str):
        tag = "{" + board_id + "}"
        self.zset, self.rows, self.version, self.event = f"fr:{tag}:z", f"fr:{tag}:m", f"fr:{tag}:v", f"fr:{tag}:e:"


def create_peer(redis_port: int, keys_file: str, redis_host: str = "127.0.0.1") -> FastAPI:
    with open(keys_file, encoding="utf-8") as f:
        roles = {k["key"]: k["role"] for k in json.load(f)["keys"]}
    pool = aioredis.ConnectionPool(host=redis_host, port=redis_port, max_connections=64)
    r = aioredis.Redis(connection_pool=pool)
    boards: dict[str, _Keys] = {}
    ttl = str(DEFAULT_DEDUP_TTL_S)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await r.function_load(LUA_LIBRARY, replace=True)
        for b in await r.smembers("fr:boards"):
            boards[b.decode()] = _Keys(b.decode())
        yield
        await r.aclose()

    app = FastAPI(title="FlowRank peer: FastAPI + Redis", lifespan=lifespan)

    def role_of(request: Request) -> str | None:
        auth = request.headers.get("authorization") or ""
        scheme, _, key = auth.partition(" ")
        return roles.get(key.strip()) if scheme.lower() == "bearer" else None

    def denied(request: Request, allowed: tuple[str, ...]) -> JSONResponse | None:
        role = role_of(request)
        if role is None:
            return _err(401, "UNAUTHENTICATED", "Unknown or revoked key.")
        if role not in allowed:
            return _err(403, "FORBIDDEN", "This role may not do this.")
        return None

    def entries(first_rank: int, members) -> list[dict]:
        out = []
        for i, m in enumerate(members):
            pid, value, at = decode_member("best_score", m)
            out.append({"rank": first_rank + i, "player_id": pid, "value": value, "achieved_at": format_timestamp(at)})
        return out

    @app.post("/v1/boards", status_code=201)
    async def create_board(request: Request):
        if (d := denied(request, ("admin",))) is not None:
            return d
        body = await request.json()
        board_id = body["board_id"]
        if board_id in boards:
            return _err(409, "BOARD_EXISTS", "A board with that id exists.", "board_id")
        await r.sadd("fr:boards", board_id)
        boards[board_id] = _Keys(board_id)
        return JSONResponse({"board_id": board_id, "policy": "best_score", "state": "ACTIVE", "version": 0, "size": 0,
                             "shards": 1, "max_plausible_time_ms": None, "review_above": None}, status_code=201)

    @app.post("/v1/events")
    async def submit(request: Request):
        if (d := denied(request, ("game_server", "admin"))) is not None:
            return d
        try:
            events, origin = expand_events(parse_json_body(await request.body()), MAX_BATCH)
        except FlowRankError as e:
            return JSONResponse(e.to_body(), status_code=e.status)
        pipe = r.pipeline(transaction=False)
        slots = []
        if origin is not None:  # events for several boards (board_ids): each one Lua call for all its boards
            replies = iter(await _fan_out(pipe, events, origin, ttl))
            results = []
            for e in events:
                code, version = next(replies)
                results.append({"event_id": e.event_id, "board_id": e.board_id, "outcome": _OUTCOMES[code.decode()],
                                "version": int(version)})
            return JSONResponse({"results": results})
        for e in events:
            k = boards.get(e.board_id)
            if k is None:
                slots.append(None)
                continue
            member = _QQ.pack(INT64_MAX - e.value, e.achieved_at + _OFF) + e.player_id.encode("utf-8")
            pipe.fcall("fr_apply_best", 4, k.zset, k.rows, k.version, k.event + e.event_id,
                       e.player_id, member, fingerprint(e), ttl)
            slots.append(len(slots))
        replies = iter(await pipe.execute()) if any(s is not None for s in slots) else iter(())
        results = []
        for e, s in zip(events, slots):
            if s is None:
                results.append({"event_id": e.event_id, "outcome": "REJECTED_UNKNOWN_SEASON", "version": 0})
            else:
                code, version = next(replies)
                results.append({"event_id": e.event_id, "outcome": _OUTCOMES[code.decode()], "version": int(version)})
        return JSONResponse({"results": results})

    async def _fan_out(pipe, events, origin: list[int], ttl) -> list:
        """(code, version) per (event, board) row: one fr_apply_best_many call per event (its rows are
        consecutive). Every board must exist (the benchmark creates them)."""
        i = 0
        while i < len(events):
            j = i
            while j < len(events) and origin[j] == origin[i]:
                j += 1
            e = events[i]
            member = _QQ.pack(INT64_MAX - e.value, e.achieved_at + _OFF) + e.player_id.encode("utf-8")
            keys = []
            for row in events[i:j]:
                k = boards[row.board_id]
                keys += [k.zset, k.rows, k.version, k.event + row.event_id]
            pipe.fcall("fr_apply_best_many", len(keys), *keys, e.player_id, member, fingerprint(e), ttl)
            i = j
        flat = await pipe.execute()
        return [(codes[b], codes[b + 1]) for codes in flat for b in range(0, len(codes), 2)]

    @app.get("/v1/boards/{board_id}/top")
    async def top(board_id: str, request: Request, limit: int = 10):
        if (d := denied(request, ("reader", "game_server", "moderator", "admin"))) is not None:
            return d
        k = boards.get(board_id)
        if k is None:
            return _err(404, "BOARD_NOT_FOUND", "No such board.", "board_id")
        if not 1 <= limit <= 1000:
            return _err(422, "VALIDATION_FAILED", "limit: must be 1-1000.", "limit")
        async with r.pipeline(transaction=True) as pipe:
            pipe.zrange(k.zset, 0, limit)
            pipe.get(k.version)
            members, version = await pipe.execute()
        version = int(version or 0)
        more = len(members) > limit
        return JSONResponse({"version": version, "entries": entries(1, members[:limit]),
                             "next_cursor": encode_cursor(version, limit) if more else None})

    @app.get("/v1/boards/{board_id}/players/{player_id}")
    async def player(board_id: str, player_id: str, request: Request):
        if (d := denied(request, ("reader", "game_server", "moderator", "admin"))) is not None:
            return d
        k = boards.get(board_id)
        if k is None:
            return _err(404, "BOARD_NOT_FOUND", "No such board.", "board_id")
        async with r.pipeline(transaction=True) as pipe:
            pipe.hget(k.rows, player_id)
            pipe.fcall_ro("fr_rank", 2, k.zset, k.rows, player_id)
            pipe.get(k.version)
            member, rank, version = await pipe.execute()
        if member is None:
            return _err(404, "PLAYER_NOT_FOUND", "The player has no row on this board.", "player_id")
        _, value, at = decode_member("best_score", member)
        version = int(version or 0)
        return JSONResponse({"version": version, "player_id": player_id, "rank": int(rank) + 1, "value": value,
                             "achieved_at": format_timestamp(at), "status": "ACTIVE", "approximate": False,
                             "rank_error_bound": None, "row_version": version})

    @app.get("/v1/boards/{board_id}/players/{player_id}/around")
    async def around(board_id: str, player_id: str, request: Request, radius: int = 1):
        if (d := denied(request, ("reader", "game_server", "moderator", "admin"))) is not None:
            return d
        k = boards.get(board_id)
        if k is None:
            return _err(404, "BOARD_NOT_FOUND", "No such board.", "board_id")
        if not 0 <= radius <= 100:
            return _err(422, "VALIDATION_FAILED", "radius: must be 0-100.", "radius")
        async with r.pipeline(transaction=True) as pipe:
            pipe.fcall_ro("fr_around", 2, k.zset, k.rows, player_id, radius)
            pipe.get(k.version)
            got, version = await pipe.execute()
        if got is None:
            return _err(404, "PLAYER_NOT_FOUND", "The player has no row on this board.", "player_id")
        return JSONResponse({"version": int(version or 0), "player_id": player_id,
                             "entries": entries(int(got[0]) + 1, got[1:])})

    @app.get("/readyz")
    async def readyz():
        await r.ping()
        return {"ready": True}

    return app


def main(argv=None) -> int:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args(argv)
    app = create_peer(args.redis_port, args.keys)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
