"""The hot routes as bytes, and a lean ASGI dispatcher in front of FastAPI.

Two halves (docs/http.md, "The hot path"):

* **Bodies as bytes.** :func:`top`, :func:`player`, :func:`around`,
  :func:`friends`, :func:`ranked_subset`, :func:`cohort` and :func:`submit`
  produce the exact JSON of docs/api.md §7-8 and §16 as ``bytes`` (orjson).
  A top page is encoded once per ``(board, version, offset, limit)`` and then
  served from :class:`PageBytes`: every entry at one version is the same
  consistent cut, so the bytes are too. The FastAPI routes in
  :mod:`gateway.routes` call these same functions.
* **Lean dispatch.** :class:`HotRoutes` matches ``(method, path)`` of those
  routes (both cohort reads) on the raw ASGI scope and serves them without
  FastAPI's per-request machinery (routing, dependency solving, response
  classes, middleware). It keeps everything a client can observe: the
  guard's order (401/403, then the rate limit, then the body limits), the
  error bodies and headers (the same :func:`gateway.handlers.error_response`),
  the metrics labels. A request it cannot validate with certainty (a bad
  query value, a bad path id, an odd body) goes to FastAPI, already
  authenticated, with its body replayed, so FastAPI writes the very 422 it
  writes today and the token is spent once.

Each function is O(size of its answer) on top of the engine call.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Awaitable, Callable
from urllib.parse import parse_qsl

import orjson

from engine.core.errors import BatchTooLarge, FlowRankError, ValidationFailed

from gateway import render
from gateway.auth import Permission
from gateway.guard import PRE_AUTH
from gateway.handlers import error_body, error_response
from gateway.validation import (
    BOARD_ID_RE,
    MAX_ID_CHARS,
    decode_cursor,
    decode_batch,
    encode_cursor,
    id_problem,
)

log = logging.getLogger("flowrank.gateway")

JSON = b"application/json"
_INTERNAL = orjson.dumps(error_body("INTERNAL", "Internal error.", None))

MAX_LIMIT = 1000  # the FastAPI declarations (gateway.routes.reads) say the same
MAX_RADIUS = 100
MAX_STALENESS_MS = 86_400_000


class PageBytes:
    """LRU of encoded top pages keyed by ``(board, version, offset, limit)``; O(1)."""

    def __init__(self, max_entries: int = 256):
        self._max = max_entries
        self._data: OrderedDict[tuple, bytes] = OrderedDict()

    def get(self, key: tuple) -> bytes | None:
        body = self._data.get(key)
        if body is not None:
            self._data.move_to_end(key)
        return body

    def put(self, key: tuple, body: bytes) -> None:
        if self._max <= 0:
            return
        self._data[key] = body
        if len(self._data) > self._max:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# ---------------------------------------------------------------- bodies as bytes


async def _cached(g, key: tuple, staleness: int | None, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
    if staleness is None:
        return await fetch()
    return await g.cache.get_bytes(key, staleness, fetch)


def _entries(es) -> list[dict]:
    return render.entries(es)


async def top(g, board_id: str, limit: int, cursor: str | None, staleness: int | None, ties: bool = False) -> bytes:
    offset, at_version = 0, None
    if cursor is not None:
        at_version, offset = decode_cursor(cursor)
    engine, pages = g.engine, g.pages

    async def fetch() -> bytes:
        page = await engine.top(board_id, offset, limit + 1, at_version=at_version, ties=ties)
        key = (page.board_id or board_id, page.version, offset, limit, ties)  # a series: its current instance
        body = pages.get(key)
        if body is None:
            more = len(page.entries) > limit
            body = orjson.dumps({
                "version": page.version,
                "entries": _entries(page.entries[:limit]),
                "next_cursor": encode_cursor(page.version, offset + limit) if more else None,
            })
            pages.put(key, body)
        return body

    return await _cached(g, ("top", board_id, offset, limit, at_version, ties), staleness, fetch)


async def player(g, board_id: str, player_id: str, approximate: bool, staleness: int | None,
                 ties: bool = False) -> bytes:
    engine = g.engine

    async def fetch() -> bytes:
        if approximate:
            body = render.player(await engine.approximate_player(board_id, player_id))
            body["approximate"] = True
            if body["rank_error_bound"] is None:
                body["rank_error_bound"] = 0
        else:
            body = render.player(await engine.player(board_id, player_id, ties=ties))
            body["approximate"] = False
            if ties:
                body.setdefault("tied_rank", None)  # unranked (INVALIDATED): null, as rank is
        return orjson.dumps(body)

    return await _cached(g, ("player", board_id, player_id, approximate, ties), staleness, fetch)


async def around(g, board_id: str, player_id: str, radius: int, staleness: int | None, ties: bool = False) -> bytes:
    engine = g.engine

    async def fetch() -> bytes:
        page = await engine.around(board_id, player_id, radius, ties=ties)
        return orjson.dumps({"version": page.version, "player_id": player_id, "entries": _entries(page.entries)})

    return await _cached(g, ("around", board_id, player_id, radius, ties), staleness, fetch)


async def friends(g, board_id: str, player_id: str, staleness: int | None, ties: bool = False) -> bytes:
    async def fetch() -> bytes:
        ids = await g.friends.friends_of(player_id)
        ids = ids[: g.settings.max_ranked_subset]
        page = await g.engine.ranked_subset(board_id, ids, ties=ties)
        return orjson.dumps({"version": page.version, "player_id": player_id, "entries": _entries(page.entries)})

    return await _cached(g, ("friends", board_id, player_id, ties), staleness, fetch)


async def ranked_subset(g, board_id: str, player_ids: list[str], ties: bool = False) -> bytes:
    if len(player_ids) > g.settings.max_ranked_subset:
        raise ValidationFailed(f"At most {g.settings.max_ranked_subset} player ids.", "player_ids")
    page = await g.engine.ranked_subset(board_id, list(dict.fromkeys(player_ids)), ties=ties)
    return orjson.dumps({"version": page.version, "entries": _entries(page.entries)})


async def cohort(g, board_id: str, player_id: str | None, cohort_id: str | None, ties: bool = False) -> bytes:
    """A league cohort (docs/api.md §16), ``player_id``'s or the one named ``cohort_id``."""
    view = await g.engine.cohort(board_id, player_id=player_id, cohort=cohort_id, ties=ties)
    return orjson.dumps(render.cohort(view))


async def submit(g, raw: bytes) -> bytes:
    batch = decode_batch(raw, g.settings.max_batch_events)
    res = await g.engine.submit_columns(batch)  # outcomes are counted by the engine (stats()["outcomes"])
    board_ids = res.board_ids if res.board_ids is not None else batch.board_ids()
    return render.results(batch.event_ids, res.codes, res.versions, board_ids)


# ---------------------------------------------------------------- lean ASGI dispatch


class _Fallback(Exception):
    """This request needs FastAPI's validation (it will answer 422 exactly as it always did)."""


def _int(raw: str, lo: int, hi: int) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise _Fallback
    v = int(raw)
    if not lo <= v <= hi:
        raise _Fallback
    return v


def _query(scope, allowed: frozenset) -> dict[str, str]:
    qs = scope.get("query_string") or b""
    if not qs:
        return {}
    out: dict[str, str] = {}
    for k, v in parse_qsl(qs.decode("latin-1"), keep_blank_values=True):  # as Starlette parses it
        if k in allowed:
            if k in out:
                raise _Fallback  # a repeated parameter: let FastAPI decide which one counts
            out[k] = v
    return out


def _board(raw: str) -> str:
    if BOARD_ID_RE.fullmatch(raw) is None or raw.endswith("\n"):
        raise _Fallback
    return raw


def _player(raw: str) -> str:
    if not 0 < len(raw) <= MAX_ID_CHARS or id_problem(raw) is not None:
        raise _Fallback
    return raw


def _ties(q: dict) -> bool:
    """``?ties=competition`` (docs/api.md §13); any other value is FastAPI's 422."""
    raw = q.get("ties")
    if raw is None:
        return False
    if raw != "competition":
        raise _Fallback
    return True


def _staleness(q: dict) -> int | None:
    raw = q.get("max_staleness_ms")
    return None if raw is None else _int(raw, 0, MAX_STALENESS_MS)


_TOP_Q = frozenset(("limit", "cursor", "max_staleness_ms", "ties"))
_PLAYER_Q = frozenset(("approximate", "max_staleness_ms", "ties"))
_AROUND_Q = frozenset(("radius", "max_staleness_ms", "ties"))
_FRIENDS_Q = frozenset(("max_staleness_ms", "ties"))
_TIES_Q = frozenset(("ties",))
_BOOL = {"true": True, "false": False, "1": True, "0": False}


async def _get_top(g, scope, parts, body):
    q = _query(scope, _TOP_Q)
    limit = _int(q["limit"], 1, MAX_LIMIT) if "limit" in q else 10
    cursor = q.get("cursor")
    if cursor is not None and not 0 < len(cursor) <= 512:
        raise _Fallback
    return await top(g, _board(parts[3]), limit, cursor, _staleness(q), _ties(q))


async def _get_player(g, scope, parts, body):
    q = _query(scope, _PLAYER_Q)
    approximate = False
    if "approximate" in q:
        approximate = _BOOL.get(q["approximate"])
        if approximate is None:
            raise _Fallback
    return await player(g, _board(parts[3]), _player(parts[5]), approximate, _staleness(q), _ties(q))


async def _get_around(g, scope, parts, body):
    q = _query(scope, _AROUND_Q)
    radius = _int(q["radius"], 0, MAX_RADIUS) if "radius" in q else 1
    return await around(g, _board(parts[3]), _player(parts[5]), radius, _staleness(q), _ties(q))


async def _get_friends(g, scope, parts, body):
    q = _query(scope, _FRIENDS_Q)
    return await friends(g, _board(parts[3]), _player(parts[5]), _staleness(q), _ties(q))


async def _get_player_cohort(g, scope, parts, body):
    return await cohort(g, _board(parts[3]), _player(parts[5]), None, _ties(_query(scope, _TIES_Q)))


async def _get_cohort(g, scope, parts, body):
    """Any cohort id is looked up: a malformed one is the engine's 404 COHORT_NOT_FOUND."""
    return await cohort(g, _board(parts[3]), None, parts[5], _ties(_query(scope, _TIES_Q)))


async def _post_subset(g, scope, parts, body):
    board_id = _board(parts[3])
    if _content_type(scope) != b"application/json":
        raise _Fallback
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _Fallback from None
    ids = doc.get("player_ids") if type(doc) is dict else None
    if type(ids) is not list or len(ids) > min(10_000, g.settings.max_ranked_subset):
        raise _Fallback
    for x in ids:
        if type(x) is not str or not 0 < len(x) <= MAX_ID_CHARS or id_problem(x) is not None:
            raise _Fallback
    return await ranked_subset(g, board_id, ids, _ties(_query(scope, _TIES_Q)))


async def _post_events(g, scope, parts, body):
    return await submit(g, body)


def _content_type(scope) -> bytes | None:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return v.split(b";", 1)[0].strip().lower()
    return None


# (method, number of path segments, fixed segments) -> (handler, template, permission, bucket, reads a body)
_P = Permission
_ROUTES = {
    ("GET", 5, "top"): (_get_top, "/v1/boards/{board_id}/top", _P.READ, "read", False),
    ("GET", 6, "players"): (_get_player, "/v1/boards/{board_id}/players/{player_id}", _P.READ, "read", False),
    ("GET", 7, "around"): (_get_around, "/v1/boards/{board_id}/players/{player_id}/around", _P.READ, "read", False),
    ("GET", 7, "friends"): (_get_friends, "/v1/boards/{board_id}/players/{player_id}/friends", _P.READ, "read",
                            False),
    ("GET", 7, "cohort"): (_get_player_cohort, "/v1/boards/{board_id}/players/{player_id}/cohort", _P.READ, "read",
                           False),
    ("GET", 6, "cohorts"): (_get_cohort, "/v1/boards/{board_id}/cohorts/{cohort}", _P.READ, "read", False),
    ("POST", 5, "ranked-subset"): (_post_subset, "/v1/boards/{board_id}/ranked-subset", _P.READ, "read", True),
    ("POST", 3, "events"): (_post_events, "/v1/events", _P.SUBMIT, "write", True),
}


def match(method: str, path: str):
    """The hot route of ``(method, path)`` and the path split on '/', or None. O(len(path))."""
    if not path.startswith("/v1/"):
        return None
    parts = path.split("/")
    n = len(parts)
    if n == 3:
        key = (method, 3, parts[2])
    elif parts[2] != "boards" or not parts[3]:
        return None
    elif n == 5:
        key = (method, 5, parts[4])
    elif n == 6 and parts[4] in ("players", "cohorts") and parts[5]:
        key = (method, 6, parts[4])
    elif n == 7 and parts[4] == "players" and parts[5]:
        key = (method, 7, parts[6])
    else:
        return None
    route = _ROUTES.get(key)
    return None if route is None else (route, parts)


class _ClientGone(Exception):
    pass


async def _read_body(scope, receive, limit: int) -> bytes:
    """The guard's body rules (gateway.guard._read_limited) over raw ASGI messages."""
    for k, v in scope["headers"]:
        if k == b"content-length":
            try:
                declared = int(v.decode("latin-1"))
            except ValueError:
                raise ValidationFailed("Content-Length is not a number.", None) from None
            if declared > limit:
                raise BatchTooLarge(f"The body is larger than {limit} bytes.", None)
            break
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        if chunk:
            total += len(chunk)
            if total > limit:
                raise BatchTooLarge(f"The body is larger than {limit} bytes.", None)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("The body is not valid JSON (not UTF-8).", None) from None
    return body


def _replay(body: bytes, receive):
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


class HotRoutes:
    """Serves the hot routes of one app; everything else goes to ``fallback`` (the FastAPI stack)."""

    def __init__(self, gateway, fallback):
        self.g = gateway
        self.fallback = fallback

    async def __call__(self, scope, receive, send, route, parts) -> None:
        start = time.perf_counter()
        handler, template, permission, bucket, has_body = route
        g = self.g
        status, principal, body = 500, None, b""
        try:
            try:
                for k, v in scope["headers"]:
                    if k == b"authorization":
                        principal = v.decode("latin-1")
                        break
                creds = g.credentials
                principal = creds.authenticate(principal, scope.get("query_string", b""))
                creds.authorize(principal, permission, scope["method"], parts[3] if len(parts) > 4 else None)
                g.limiter.check(principal, bucket)
                if has_body:
                    body = await _read_body(scope, receive, g.settings.max_body_bytes)
                payload = await handler(g, scope, parts, body)
            except _Fallback:
                status = -1  # handed to FastAPI below, outside this handler's error handling
            except FlowRankError as exc:
                if exc.status >= 500 and exc.code == "INTERNAL":
                    log.error("internal engine error on %s %s", scope["method"], scope["path"], exc_info=exc)
                response = error_response(exc)
                status = response.status_code
                await response(scope, receive, send)
                return
            except _ClientGone:
                status = 499
                return
            except Exception as exc:
                log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
                payload, status = _INTERNAL, 500
            else:
                status = 200
            if status > 0:
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-length", str(len(payload)).encode()), (b"content-type", JSON)]})
                await send({"type": "http.response.body", "body": payload})
        finally:
            if status not in (499, -1):
                g.metrics.observe(template, scope["method"], status, time.perf_counter() - start)
        if status == -1:  # FastAPI answers (its 422), records its own metrics, and raises what it raises
            scope[PRE_AUTH] = principal
            await self.fallback(scope, _replay(body, receive) if has_body else receive, send)
