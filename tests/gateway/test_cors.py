"""CORS (docs/api.md §12): ``--cors-origin`` adds the headers on every /v1
route, lean (gateway.hot) or FastAPI, preflight included; without it, none."""

from __future__ import annotations

import httpx
import pytest

from gateway.app import create_app
from gateway.cli import build_parser, settings_from_args
from gateway.cors import Cors, parse_origin
from tests.gateway.conftest import BOARD, SEED_EVENTS, H, open_engine, settings

SITE = "http://scores.example:8080"

# (method, path, body): a lean-dispatched read, a FastAPI read, a write, an error, an unknown /v1 route
REQUESTS = [
    ("GET", f"/v1/boards/{BOARD}/top?limit=2", None, 200),
    ("GET", f"/v1/boards/{BOARD}", None, 200),
    ("GET", f"/v1/boards/{BOARD}/changes?since_version=0", None, 200),
    ("POST", f"/v1/boards/{BOARD}/ranked-subset", {"player_ids": ["p-ava"]}, 200),
    ("GET", f"/v1/boards/{BOARD}/players/p-nobody", None, 404),
    ("GET", "/v1/nothing-here", None, 404),
]


@pytest.fixture
async def make():
    opened = []

    async def build(origins=()):
        engine = await open_engine()
        app = create_app(settings(cors_origins=tuple(origins)), engine)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                   base_url="http://t")
        opened.append((app, engine, client))
        await client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        await client.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
        return app, client

    yield build
    for app, engine, client in opened:
        await client.aclose()
        await app.state.gateway.hub.close()
        await engine.close()


def cors_headers(r: httpx.Response) -> dict:
    return {k: v for k, v in r.headers.items() if k.startswith("access-control-")}


def preflight(client, path=f"/v1/boards/{BOARD}/top", origin=SITE, method="GET"):
    return client.options(path, headers={"Origin": origin, "Access-Control-Request-Method": method,
                                         "Access-Control-Request-Headers": "authorization"})


@pytest.mark.anyio
async def test_no_option_no_cors_headers(make):
    app, c = await make()
    assert app.cors is None  # the request path pays one attribute test
    for method, path, body, status in REQUESTS:
        r = await c.request(method, path, json=body, headers={**H("reader"), "Origin": SITE})
        assert r.status_code == status, (path, r.text)
        assert cors_headers(r) == {}, path
    r = await preflight(c)
    assert r.status_code == 405 and cors_headers(r) == {}


@pytest.mark.anyio
async def test_allowed_origin_gets_headers_on_every_v1_route(make):
    _, c = await make([SITE, "https://other.example"])
    for method, path, body, status in REQUESTS:
        r = await c.request(method, path, json=body, headers={**H("reader"), "Origin": SITE})
        assert r.status_code == status, (path, r.text)
        assert r.headers["access-control-allow-origin"] == SITE, path
        assert "Origin" in r.headers.get_list("vary"), path
        assert "retry-after" in r.headers["access-control-expose-headers"]
    # refusals too, so a page can read the error body
    r = await c.get(f"/v1/boards/{BOARD}/top", headers={"Origin": SITE})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == SITE


@pytest.mark.anyio
async def test_preflight(make):
    _, c = await make([SITE])
    for path in (f"/v1/boards/{BOARD}/top", f"/v1/boards/{BOARD}/live", "/v1/tokens", "/v1/events"):
        r = await preflight(c, path)
        assert r.status_code == 204, (path, r.text)
        assert r.content == b""
        assert r.headers["access-control-allow-origin"] == SITE
        assert set(r.headers["access-control-allow-methods"].replace(" ", "").split(",")) >= {"GET", "POST"}
        assert r.headers["access-control-allow-headers"] == "authorization, content-type, last-event-id"


@pytest.mark.anyio
async def test_other_origins_get_nothing(make):
    _, c = await make([SITE])
    for origin in ("http://evil.example", "http://scores.example", "https://scores.example:8080"):
        r = await c.get(f"/v1/boards/{BOARD}/top", headers={**H("reader"), "Origin": origin})
        assert r.status_code == 200 and cors_headers(r) == {}, origin
        r = await preflight(c, origin=origin)
        assert r.status_code == 405 and cors_headers(r) == {}, origin
    r = await c.get(f"/v1/boards/{BOARD}/top", headers=H("reader"))  # no Origin: not a CORS request
    assert cors_headers(r) == {}


@pytest.mark.anyio
async def test_star_allows_any_origin(make):
    _, c = await make(["*"])
    r = await c.get(f"/v1/boards/{BOARD}/top", headers={**H("reader"), "Origin": "http://anything.test"})
    assert r.headers["access-control-allow-origin"] == "*"
    r = await preflight(c, origin="null")
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "*"


@pytest.mark.anyio
async def test_only_v1_routes(make):
    _, c = await make(["*"])
    for path in ("/healthz", "/metrics", f"/ui/boards/{BOARD}", "/openapi.json"):
        r = await c.get(path, headers={"Origin": SITE})
        assert r.status_code == 200 and cors_headers(r) == {}, path


def test_cli_flag():
    args = build_parser().parse_args(["serve", "--cors-origin", "https://A.example", "--cors-origin", "*"])
    assert settings_from_args(args).cors_origins == ("https://a.example", "*")
    assert settings_from_args(build_parser().parse_args(["serve"])).cors_origins == ()


@pytest.mark.parametrize("bad", ["example.com", "https://example.com/", "https://example.com/path", "ftp://x", ""])
def test_cli_refuses_what_is_not_an_origin(bad, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", "--cors-origin", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("flowrank: error: argument --cors-origin") and "origin" in err
    with pytest.raises(ValueError):
        parse_origin(bad)


def test_origin_match_is_exact():
    cors = Cors(["https://a.example:8443"])
    scope = {"headers": [(b"origin", b"https://a.example:8443")]}
    assert cors.allowed(scope) == b"https://a.example:8443"
    assert cors.allowed({"headers": [(b"origin", b"https://a.example")]}) is None
    assert cors.allowed({"headers": []}) is None
