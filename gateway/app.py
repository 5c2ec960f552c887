"""The FastAPI application: a thin shell over an :class:`EngineClient`.

>>> # app = create_app(Settings(keys=({"name": "ops", "role": "admin", "key": "k"},)), engine)
"""

from __future__ import annotations

import os
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from engine.router.api import EngineClient
from engine.core.model import INT64_MAX, INT64_MIN

from gateway import handlers, hot
from gateway.auth import Credentials, KeyStore, load_keystore
from gateway.cors import Cors
from gateway.friends import FriendsProvider, build_friends
from gateway.limits import RateLimiter
from gateway.live import LiveHub
from gateway.metrics import Metrics, MetricsMiddleware
from gateway.routes import boards, competitions, events, export, live, moderation, ops, players, reads, tokens, ui
from gateway.schemas import EventBatchIn
from gateway.settings import Settings
from gateway.tokens import TokenSigner, load_secret
from gateway.viewcache import ViewCache
from gateway.warm import Warmup

DESCRIPTION = """FlowRank's public HTTP API (see docs/api.md and docs/http.md).

Every `/v1` request carries `Authorization: Bearer <key>`; the GET routes
open to a reader also take a read-only token from `POST /v1/tokens`, as
`Authorization: Bearer <token>` or `?access_token=<token>` (docs/api.md §12).
`/healthz`, `/readyz`, `/metrics` and the `/ui` pages need no credential.
Every non-2xx answer is `{"error": {"code", "message", "field"}}`.
"""


@dataclass
class Gateway:
    """Everything a route needs, hung on ``app.state.gateway``."""

    settings: Settings
    engine: EngineClient
    keys: KeyStore
    credentials: Credentials  # keys and tokens: what gateway.guard and gateway.hot authenticate with
    limiter: RateLimiter
    friends: FriendsProvider
    hub: LiveHub
    cache: ViewCache
    metrics: Metrics
    default_shards: int
    pages: hot.PageBytes = None  # type: ignore[assignment]  # encoded top pages by (board, version, window)
    warmup: Warmup | None = None  # flowrank serve: kernels warming; /readyz is 503 until done (gateway.warm)

    def __post_init__(self):
        if self.pages is None:
            self.pages = hot.PageBytes()


class FlowRankApp(FastAPI):
    """FastAPI, with the hot routes (:mod:`gateway.hot`) dispatched before its stack.

    FastAPI still declares, documents and validates every route; a hot
    request is answered by :class:`gateway.hot.HotRoutes` unless it needs
    FastAPI's validation. ``hot_routes = None`` sends everything through FastAPI.
    """

    hot_routes: hot.HotRoutes | None = None
    cors: Cors | None = None  # --cors-origin: wraps every /v1 request, lean or not

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if self.cors is not None and scope["path"].startswith("/v1/"):
                await self.cors(scope, receive, send, self._dispatch)
                return
            # _dispatch inlined: without --cors-origin a request pays one attribute test, no extra call
            if self.hot_routes is not None and not scope.get("root_path"):
                found = hot.match(scope["method"], scope["path"])
                if found is not None:
                    await self.hot_routes(scope, receive, send, *found)
                    return
        await super().__call__(scope, receive, send)

    async def _dispatch(self, scope, receive, send) -> None:
        """The lean dispatcher, else FastAPI (what :class:`gateway.cors.Cors` wraps)."""
        if self.hot_routes is not None and not scope.get("root_path"):
            found = hot.match(scope["method"], scope["path"])
            if found is not None:
                await self.hot_routes(scope, receive, send, *found)
                return
        await super().__call__(scope, receive, send)

    async def fastapi_call(self, scope, receive, send) -> None:
        await super().__call__(scope, receive, send)


def create_app(
    settings: Settings,
    engine_client: EngineClient,
    *,
    keys: KeyStore | None = None,
    friends: FriendsProvider | None = None,
    clock=None,
    wall_clock=None,
    token_secret: bytes | None = None,
    warmup: Warmup | None = None,
) -> FastAPI:
    """Build the app. ``keys``/``friends``/``clock`` override what ``settings`` would build (tests);
    ``wall_clock`` (epoch seconds) dates tokens, ``token_secret`` replaces the data directory's;
    ``warmup``: what must finish before ``/readyz`` answers 200 (gateway.warm; None: nothing).

    The app does not close ``engine_client``: whoever built it does (the CLI
    does so after the server drained).
    """
    clock = clock or time.monotonic
    if keys is None:
        keys, _ = load_keystore(settings.keys, settings.keys_file, settings.data_dir)
    if friends is None:
        friends = build_friends(settings.friends_file, settings.friends_url, settings.friends_timeout_s,
                                settings.friends_cache_ttl_s, settings.friends_cache_entries,
                                settings.max_ranked_subset)
    hub = LiveHub(
        engine_client,
        window_s=settings.live_window_ms / 1000.0,
        queue_size=settings.live_queue_size,
        max_total=settings.live_max_subscribers,
        max_per_board=settings.live_max_per_board,
        heartbeat_s=settings.live_heartbeat_s,
    )
    default_shards = (settings.shards or getattr(engine_client, "default_shards", None)
                      or getattr(getattr(engine_client, "cfg", None), "default_shards", None) or os.cpu_count() or 1)

    def _stats() -> dict:
        return engine_client.stats()

    gateway = Gateway(
        settings=settings,
        engine=engine_client,
        keys=keys,
        credentials=Credentials(keys, TokenSigner(token_secret or load_secret(settings.data_dir, settings.log_url)),
                                wall_clock or time.time),
        limiter=RateLimiter(
            read=(settings.read_rate_per_s, settings.read_burst),
            write=(settings.write_rate_per_s, settings.write_burst),
            clock=clock,
        ),
        friends=friends,
        hub=hub,
        cache=ViewCache(settings.view_cache_entries, settings.view_cache_max_age_ms, clock=clock),
        metrics=Metrics(_stats, lambda: hub.subscriber_count),
        default_shards=int(default_shards),
        warmup=warmup,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        hub.start()
        try:
            yield
        finally:
            await hub.close()
            await friends.aclose()

    app = FlowRankApp(
        title="FlowRank",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    handlers.install(app)
    for module in (boards, events, reads, competitions, live, moderation, players, export, tokens):
        app.include_router(module.router)
    app.include_router(ui.router)
    app.include_router(ops.router)
    app.include_router(ops.public)
    app.add_middleware(MetricsMiddleware, metrics_getter=lambda: gateway.metrics)
    if settings.lean_routes:
        app.hot_routes = hot.HotRoutes(gateway, app.fastapi_call)
    if settings.cors_origins:
        app.cors = Cors(settings.cors_origins)
    _document_manual_bodies(app)
    return app


def _document_manual_bodies(app: FastAPI) -> None:
    """Add the hand-validated events body to the OpenAPI components."""

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes,
            openapi_version=app.openapi_version,
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        doc = EventBatchIn.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in doc.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["EventBatchIn"] = doc
        comps = schema["components"]
        schemes = comps.setdefault("securitySchemes", {})
        schemes["HTTPBearer"] = {
            "type": "http", "scheme": "bearer",
            "description": "`Authorization: Bearer <key>` (docs/api.md §2), or a token from `POST /v1/tokens` "
                           "on the GET routes open to a reader (§12)."}
        schemes["AccessToken"] = {
            "type": "apiKey", "in": "query", "name": "access_token",
            "description": "A token from `POST /v1/tokens` (never a key: 401), on the GET routes open to a "
                           "reader, for the token's boards (docs/api.md §12)."}
        _exact_int64_bounds(schema)
        _require_since_version(schema)
        _no_null_parameters(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _exact_int64_bounds(node) -> None:
    """FastAPI's OpenAPI models hold ``maximum``/``minimum`` as floats, which turns the int64 bounds into
    ±9.223372036854776e18 (= ±2**63): a client or a schema-driven test would then take 2**63 as a valid
    value. Put the exact integers back."""
    if isinstance(node, dict):
        for key, exact in (("maximum", INT64_MAX), ("minimum", INT64_MIN)):
            v = node.get(key)
            if isinstance(v, float) and v == float(exact):
                node[key] = exact
        for v in node.values():
            _exact_int64_bounds(v)
    elif isinstance(node, list):
        for v in node:
            _exact_int64_bounds(v)


def _require_since_version(schema: dict) -> None:
    """``/changes`` needs ``since_version`` (docs/api.md §9); the route also takes a snapshot page's
    ``cursor`` alone (``since_version`` is then ignored), which OpenAPI cannot say ("one of two
    parameters"), so the document states the contract's form: ``since_version`` required."""
    op = schema.get("paths", {}).get("/v1/boards/{board_id}/changes", {}).get("get")
    for param in (op or {}).get("parameters", ()):
        if param.get("name") == "since_version" and param.get("in") == "query":
            param["required"] = True


def _no_null_parameters(schema: dict) -> None:
    """An optional query/path/header parameter ``X | None`` is documented by FastAPI as ``anyOf [X, null]``,
    but a URL cannot carry a JSON null (``?cursor=null`` is the string "null", refused): leaving the
    parameter out is its null. Keep ``X`` (with the parameter's description and title)."""
    for path_item in schema.get("paths", {}).values():
        for op in path_item.values():
            for param in op.get("parameters", ()) if isinstance(op, dict) else ():
                sub = param.get("schema", {})
                alts = sub.get("anyOf")
                if isinstance(alts, list) and {"type": "null"} in alts:
                    rest = [a for a in alts if a != {"type": "null"}]
                    sub.pop("anyOf")
                    if "default" in sub and sub["default"] is None:
                        del sub["default"]
                    if len(rest) == 1:
                        sub.update({k: v for k, v in rest[0].items() if k not in sub})
                    else:
                        sub["anyOf"] = rest
