"""Fixtures for gateway tests: an app over the real engine
(:class:`engine.runtime.local.LocalService`, in memory, two in-process shards, no
Ray) and an httpx client per role. There is no second implementation of the
engine's semantics in the gateway tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from engine.runtime.local import LocalService
from gateway.app import create_app
from gateway.settings import Settings
from tests.loopback import free_port

BOARD = "arena-clash:solo:S7:global"

KEYS = (
    {"name": "ops", "role": "admin", "key": "admin-key"},
    {"name": "gs-eu-1", "role": "game_server", "key": "gs-key"},
    {"name": "mod-1", "role": "moderator", "key": "mod-key"},
    {"name": "web", "role": "reader", "key": "reader-key"},
    {"name": "old", "role": "admin", "key": "revoked-key", "revoked": True},
)
ROLE_KEYS = {"admin": "admin-key", "game_server": "gs-key", "moderator": "mod-key", "reader": "reader-key"}

SEED_EVENTS = [
    {"event_id": "evt-ava-1", "board_id": BOARD, "player_id": "p-ava", "value": 9800, "achieved_at": "2026-11-01T09:58:00Z"},
    {"event_id": "evt-ben-1", "board_id": BOARD, "player_id": "p-ben", "value": 9500, "achieved_at": "2026-11-01T10:01:00Z"},
    {"event_id": "evt-chloe-1", "board_id": BOARD, "player_id": "p-chloe", "value": 9500, "achieved_at": "2026-11-01T10:02:00Z"},
    {"event_id": "evt-dev-1", "board_id": BOARD, "player_id": "p-dev", "value": 9100, "achieved_at": "2026-11-01T10:03:00Z"},
    {"event_id": "evt-eli-1", "board_id": BOARD, "player_id": "p-eli", "value": 8700, "achieved_at": "2026-11-01T10:04:00Z"},
]


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {ROLE_KEYS[role]}"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def open_engine(delta_retention: int = 10_000, n_shards: int = 2) -> LocalService:
    """The real engine, in memory; the caller closes it (``await engine.close()``). An erasure's job
    snapshots at once instead of waiting for a periodic snapshot."""
    return await LocalService.open(data_dir=None, n_shards=n_shards, delta_retention=delta_retention,
                                   erasure_snapshot_wait_s=0.0)


@pytest.fixture
async def engines():
    """A factory of LocalService engines, all closed at teardown."""
    opened: list[LocalService] = []

    async def make(**kw) -> LocalService:
        eng = await open_engine(**kw)
        opened.append(eng)
        return eng

    yield make
    for eng in opened:
        await eng.close()


def settings(**kw) -> Settings:
    base = dict(keys=KEYS, data_dir=None, live_window_ms=20, live_heartbeat_s=0.5)
    base.update(kw)
    return Settings(**base)


class Harness:
    """``app``: the (first) gateway; ``apps``: every gateway; ``engine``: the engine itself."""

    def __init__(self, app, engine, client: httpx.AsyncClient, apps=None):
        self.app, self.engine, self.client = app, engine, client
        self.apps = apps or [app]

    async def seed(self) -> None:
        r = await self.client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        assert r.status_code == 201, r.text
        r = await self.client.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
        assert r.status_code == 200, r.text

    async def board(self, board_id: str = BOARD) -> dict:
        r = await self.client.get(f"/v1/boards/{board_id}", headers=H("reader"))
        assert r.status_code == 200, r.text
        return r.json()


class RoundRobin(httpx.AsyncBaseTransport):
    """Each request to the next gateway in turn: what a client of ``flowrank
    serve --workers N`` meets, whose connections land on any of N processes."""

    def __init__(self, apps):
        self.transports = [httpx.ASGITransport(app=a, raise_app_exceptions=False) for a in apps]
        self.turn = 0

    async def handle_async_request(self, request):
        t = self.transports[self.turn % len(self.transports)]
        self.turn += 1
        return await t.handle_async_request(request)


async def gateway_apps(engine, workers: int, make_settings, **app_kw) -> tuple[list, list]:
    """``workers`` gateway apps over ``engine``: with one, the app holds the engine
    (as ``flowrank serve`` does); with more, each app holds a RemoteEngine to one
    EngineHost over ``engine``, through the pickled bytes a Ray actor carries,
    and a read replica over the engine's shards (as ``flowrank serve --workers N``
    does). Returns (apps, remote engines)."""
    if workers == 1:
        return [create_app(make_settings(), engine, **app_kw)], []
    from engine.runtime.host import EngineHost, LocalChannel  # noqa: PLC0415
    from engine.runtime.remote import RemoteEngine  # noqa: PLC0415

    versions = tempfile.mkdtemp(prefix="fr-versions-")
    host = EngineHost(engine, version_path=os.path.join(versions, "versions"))
    # each with a read replica over the engine's shards, as a worker reads the shard actors
    remotes = [await RemoteEngine(LocalChannel(host), replica_transport=engine.router.t).connect()
               for _ in range(workers)]
    app_kw.setdefault("token_secret", b"s" * 32)  # the workers of one data directory share its secret

    async def close_host():
        await host.close()
        shutil.rmtree(versions, ignore_errors=True)

    return [create_app(make_settings(), r, **app_kw) for r in remotes], [r.close for r in remotes] + [close_host]


async def close_apps(apps, closers) -> None:
    for app in apps:
        await app.state.gateway.hub.close()
    for close in closers:
        await close()


def pytest_collection_modifyitems(config, items):
    """A test marked ``one_worker(why)`` checks one gateway process's own state
    (its rate-limit buckets, its metrics): it runs with the 1-worker harness only."""
    keep, drop = [], []
    for item in items:
        one = item.get_closest_marker("one_worker") is not None
        (drop if one and "2-workers" in item.name else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
async def harness(request):
    """The app over the real engine; run once with one gateway and once with two
    gateway workers sharing one engine host, requests alternating between them."""
    marker = request.node.get_closest_marker("settings")
    kw = dict(marker.kwargs) if marker else {}
    engine = await open_engine(kw.pop("delta_retention", 10_000))
    apps, remotes = await gateway_apps(engine, request.param, lambda: settings(**kw))
    async with httpx.AsyncClient(transport=RoundRobin(apps), base_url="http://test") as client:
        yield Harness(apps[0], engine, client, apps)
    await close_apps(apps, remotes)
    await engine.close()


@pytest.fixture
async def seeded(harness):
    await harness.seed()
    return harness


@contextmanager
def thread_server(make_settings=settings, wrap=None, workers: int = 1, **engine_kw):
    """uvicorn in a thread over a fresh LocalService opened on that thread's
    loop (httpx's ASGITransport buffers whole responses, so SSE needs a socket;
    schemathesis calls from its own loop). Yields the base URL. ``workers`` > 1:
    that many gateway apps, each with its own server on the same port
    (``SO_REUSEPORT``, as ``flowrank serve --workers N``) and its own
    RemoteEngine to one EngineHost over the engine."""
    import uvicorn  # noqa: PLC0415

    from gateway.startup_errors import bind  # noqa: PLC0415

    port = free_port()
    holder: dict = {"servers": []}

    def run():
        async def main():
            engine = await open_engine(**engine_kw)
            apps, remotes = await gateway_apps(engine, workers, make_settings)
            try:
                servers = []
                for app in apps:
                    if wrap is not None:  # an ASGI wrapper around the app (tests that break it on purpose)
                        app = wrap(app)
                    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                        timeout_graceful_shutdown=1))
                    servers.append(srv.serve(sockets=[bind("127.0.0.1", port, reuse_port=True)]))
                    holder["servers"].append(srv)
                await asyncio.gather(*servers)
            finally:
                await close_apps(apps, remotes)
                await engine.close()

        asyncio.run(main())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    else:
        raise RuntimeError("gateway thread server did not become ready")
    try:
        yield url
    finally:
        for srv in holder["servers"]:
            srv.should_exit = True
        t.join(10)
