"""Read-only tokens (docs/api.md §12): ``POST /v1/tokens`` and what a token may
read, over the real engine; the signer and the secret file directly."""

from __future__ import annotations

import os
import stat
import time

from urllib.parse import urlencode

import httpx
import pytest

from engine.core.errors import Unauthenticated
from gateway.app import create_app
from gateway.cli import main as cli_main
from gateway.tokens import SECRET_FILE, TokenSigner, load_secret
from tests.gateway.conftest import BOARD, KEYS, SEED_EVENTS, H, open_engine, settings, thread_server

OTHER = "arena-clash:duo:S7:global"
T0 = 1_800_000_000.0  # the fake wall clock's start (epoch seconds)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self) -> float:
        return self.now


class App:
    """An app over the real engine, with a hand-driven wall clock."""

    def __init__(self, app, engine, client, clock):
        self.app, self.engine, self.client, self.clock = app, engine, client, clock

    async def mint(self, role: str = "reader", boards=(BOARD,), ttl_s: int = 900) -> str:
        r = await self.client.post("/v1/tokens", json={"board_ids": None if boards is None else list(boards),
                                                       "ttl_s": ttl_s}, headers=H(role))
        assert r.status_code == 201, r.text
        return r.json()["token"]


async def _open(keys=KEYS, data_dir=None, token_secret=None, **kw):
    engine = await open_engine()
    clock = Clock()
    app = create_app(settings(keys=keys, data_dir=data_dir, **kw), engine, wall_clock=clock, token_secret=token_secret)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t")
    return App(app, engine, client, clock)


async def _close(a: App):
    await a.client.aclose()
    await a.app.state.gateway.hub.close()
    await a.engine.close()


@pytest.fixture
async def tapp():
    a = await _open()
    for board in (BOARD, OTHER):
        r = await a.client.post("/v1/boards", json={"board_id": board, "policy": "best_score"}, headers=H("admin"))
        assert r.status_code == 201, r.text
    r = await a.client.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    yield a
    await _close(a)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def in_url(path: str, token: str) -> str:
    """``path`` with ``access_token`` added to its query (httpx's ``params=`` would replace the query)."""
    return f"{path}{'&' if '?' in path else '?'}{urlencode({'access_token': token})}"


# GET routes open to a reader: the lean dispatcher's (top, players, around, friends) and FastAPI's.
READER_GETS = [
    f"/v1/boards/{BOARD}",
    f"/v1/boards/{BOARD}/top?limit=3",
    f"/v1/boards/{BOARD}/players/p-ava",
    f"/v1/boards/{BOARD}/players/p-ava/around?radius=1",
    f"/v1/boards/{BOARD}/players/p-ava/friends",
    f"/v1/boards/{BOARD}/changes?since_version=0",
]


@pytest.mark.anyio
@pytest.mark.parametrize("role", ["reader", "game_server", "moderator", "admin"])
async def test_any_role_mints(tapp, role):
    r = await tapp.client.post("/v1/tokens", json={"board_ids": [BOARD, BOARD], "ttl_s": 60}, headers=H(role))
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"token", "expires_at", "board_ids"}
    assert body["board_ids"] == [BOARD]  # duplicates dropped
    assert body["expires_at"] == "2027-01-15T08:01:00.000Z"  # T0 + 60 s
    for k in ("admin-key", "gs-key", "mod-key", "reader-key"):
        assert k not in body["token"]


@pytest.mark.anyio
async def test_ttl_defaults_to_900_and_null_means_every_board(tapp):
    r = await tapp.client.post("/v1/tokens", json={"board_ids": None}, headers=H("reader"))
    assert r.status_code == 201, r.text
    assert r.json()["board_ids"] is None
    assert r.json()["expires_at"] == "2027-01-15T08:15:00.000Z"
    token = r.json()["token"]
    for board in (BOARD, OTHER):
        assert (await tapp.client.get(f"/v1/boards/{board}", headers=bearer(token))).status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("body,field", [
    ({"board_ids": [BOARD], "ttl_s": 0}, "ttl_s"),
    ({"board_ids": [BOARD], "ttl_s": 86_401}, "ttl_s"),
    ({"board_ids": [BOARD], "ttl_s": "900"}, "ttl_s"),
    ({"board_ids": [BOARD], "ttl_s": 9.5}, "ttl_s"),
    ({"board_ids": [BOARD], "ttl_s": True}, "ttl_s"),
    ({"ttl_s": 900}, "board_ids"),
    ({"board_ids": [], "ttl_s": 900}, "board_ids"),
    ({"board_ids": ["not a board"], "ttl_s": 900}, "board_ids[0]"),
    ({"board_ids": BOARD, "ttl_s": 900}, "board_ids"),
])
async def test_bad_mint_requests_are_422(tapp, body, field):
    r = await tapp.client.post("/v1/tokens", json=body, headers=H("reader"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED"
    assert r.json()["error"]["field"] == field


@pytest.mark.anyio
async def test_ttl_bounds_are_inclusive(tapp):
    for ttl in (1, 86_400):
        r = await tapp.client.post("/v1/tokens", json={"board_ids": [BOARD], "ttl_s": ttl}, headers=H("reader"))
        assert r.status_code == 201, r.text


@pytest.mark.anyio
async def test_minting_needs_a_key(tapp):
    assert (await tapp.client.post("/v1/tokens", json={"board_ids": None})).status_code == 401
    token = await tapp.mint()
    r = await tapp.client.post("/v1/tokens", json={"board_ids": None}, headers=bearer(token))
    assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["header", "query"])
async def test_token_reads_every_reader_get(tapp, mode):
    token = await tapp.mint("admin")
    for path in READER_GETS:
        if mode == "header":
            r = await tapp.client.get(path, headers=bearer(token))
        else:
                r = await tapp.client.get(in_url(path, token))
        assert r.status_code == 200, (path, r.text)
        assert r.json() == (await tapp.client.get(path, headers=H("reader"))).json()


@pytest.mark.anyio
async def test_token_only_reads(tapp):
    """Read-only whatever minted it: no POST (not even a reader's ranked-subset), no moderator or admin GET."""
    token = await tapp.mint("admin")
    ev = {"event_id": "e-tok", "board_id": BOARD, "player_id": "p-x", "value": 1, "achieved_at": 1}
    refused = [
        ("POST", f"/v1/boards/{BOARD}/ranked-subset", {"player_ids": ["p-ava"]}),
        ("POST", "/v1/events", {"events": [ev]}),
        ("POST", "/v1/boards", {"board_id": "g:m:s:tok", "policy": "best_score"}),
        ("POST", f"/v1/boards/{BOARD}/state", {"state": "FROZEN"}),
        ("POST", f"/v1/boards/{BOARD}/invalidations", {"event_id": "evt-ava-1"}),
        ("GET", f"/v1/boards/{BOARD}/quarantine", None),
        ("GET", f"/v1/boards/{BOARD}/players/p-ava/history", None),
        ("GET", f"/v1/boards/{BOARD}/checksum", None),
        ("GET", f"/v1/boards/{BOARD}/export", None),
    ]
    for method, path, body in refused:
        for url, headers in ((path, bearer(token)), (in_url(path, token), {})):
            r = await tapp.client.request(method, url, json=body, headers=headers)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["code"] == "FORBIDDEN"
    assert (await tapp.client.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()["state"] == "OPEN"
    r = await tapp.client.get(f"/v1/boards/{BOARD}/players/p-x", headers=H("reader"))
    assert r.status_code == 404  # the event was not applied


@pytest.mark.anyio
async def test_token_only_for_its_boards(tapp):
    token = await tapp.mint(boards=(BOARD,))
    other_paths = [p.replace(BOARD, OTHER) for p in READER_GETS]
    for path in other_paths:
        for url, headers in ((path, bearer(token)), (in_url(path, token), {})):
            r = await tapp.client.get(url, headers=headers)
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"]["code"] == "FORBIDDEN"
    r = await tapp.client.get("/v1/boards", headers=bearer(token))
    assert r.status_code == 200
    assert [b["board_id"] for b in r.json()["boards"]] == [BOARD]  # lists only its boards
    r = await tapp.client.get("/v1/boards", headers=H("reader"))
    assert {b["board_id"] for b in r.json()["boards"]} == {BOARD, OTHER}


@pytest.mark.anyio
async def test_expired_token_is_401(tapp):
    token = await tapp.mint(ttl_s=10)
    tapp.clock.now = T0 + 9.999
    assert (await tapp.client.get(READER_GETS[1], headers=bearer(token))).status_code == 200
    tapp.clock.now = T0 + 10
    for path in READER_GETS:
        for url, headers in ((path, bearer(token)), (in_url(path, token), {})):
            r = await tapp.client.get(url, headers=headers)
            assert r.status_code == 401, (path, r.text)
            assert r.json()["error"]["code"] == "UNAUTHENTICATED"
            assert "expired" in r.json()["error"]["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("role", ["reader", "admin"])
async def test_raw_key_in_url_is_401(tapp, role):
    key = H(role)["Authorization"].split()[1]
    for path in READER_GETS:
        r = await tapp.client.get(in_url(path, key))
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["code"] == "UNAUTHENTICATED"
        assert key not in r.text
    # ... even beside a valid header: the URL credential is refused, not ignored
    r = await tapp.client.get(in_url(READER_GETS[1], key), headers=H(role))
    assert r.status_code == 401


@pytest.mark.anyio
async def test_one_credential_per_request(tapp):
    token = await tapp.mint()
    r = await tapp.client.get(in_url(READER_GETS[1], token), headers=bearer(token))
    assert r.status_code == 401
    r = await tapp.client.get(in_url(in_url(READER_GETS[1], token), token))
    assert r.status_code == 401
    r = await tapp.client.get(in_url(READER_GETS[1], ""))
    assert r.status_code == 401


@pytest.mark.anyio
async def test_forged_or_damaged_tokens_are_401(tapp):
    token = await tapp.mint(boards=(BOARD,))
    head, payload, mac = token.split(".")
    other = TokenSigner(b"x" * 32).mint("web", None, int(T0 * 1000) + 60_000)  # right shape, wrong secret
    widened = TokenSigner(b"x" * 32).mint("web", None, int(T0 * 1000) + 60_000).split(".")[1]
    for bad in (other, f"{head}.{widened}.{mac}", f"{head}.{payload}.{mac[:-2]}", f"{head}.{payload}",
                f"{head}..{mac}", "fr1.", "fr1.%%%.###", token + "x"):
        r = await tapp.client.get(READER_GETS[1], headers=bearer(bad))
        assert r.status_code == 401, (bad, r.text)
        r = await tapp.client.get(in_url(READER_GETS[1], bad))
        assert r.status_code == 401, (bad, r.text)


@pytest.mark.anyio
async def test_a_token_dies_with_its_key():
    """Same secret, and the minting key later revoked (or removed): its tokens are 401."""
    secret = os.urandom(32)
    a = await _open(token_secret=secret)
    try:
        token = await a.mint("reader", boards=None)
    finally:
        await _close(a)
    revoked = tuple({**k, "revoked": True} if k["name"] == "web" else k for k in KEYS)
    for keys in (revoked, tuple(k for k in KEYS if k["name"] != "web"), KEYS):
        b = await _open(keys=keys, token_secret=secret)
        try:
            r = await b.client.get("/v1/boards", headers=bearer(token))
            assert r.status_code == (200 if keys is KEYS else 401), r.text
        finally:
            await _close(b)


@pytest.mark.anyio
async def test_token_has_the_rate_limit_of_its_key():
    """A token spends its minting key's bucket: the key's own rate, shared with the key."""
    keys = tuple({**k, "rate_per_s": 0.001, "burst": 4} if k["name"] == "web" else k for k in KEYS)
    a = await _open(keys=keys)
    try:
        await a.client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        token = await a.mint("reader")  # 1 of 4
        codes = [(await a.client.get(READER_GETS[1], headers=bearer(token))).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = await a.client.get(READER_GETS[1], headers=H("reader"))
        assert r.status_code == 429 and "Retry-After" in r.headers  # the key's bucket is the one spent
        admin = await a.mint("admin")  # other keys are not affected
        assert (await a.client.get(READER_GETS[1], headers=bearer(admin))).status_code == 200
    finally:
        await _close(a)


@pytest.mark.anyio
async def test_tokens_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    a = await _open(data_dir=str(data))
    try:
        await a.client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        token = await a.mint("reader", boards=None)
    finally:
        await _close(a)
    path = data / SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_bytes()
    b = await _open(data_dir=str(data))  # a new process on the same data directory
    try:
        assert (await b.client.get("/v1/boards", headers=bearer(token))).status_code == 200
    finally:
        await _close(b)
    assert path.read_bytes() == secret
    c = await _open(data_dir=str(tmp_path / "elsewhere"))  # another data directory: another secret
    try:
        assert (await c.client.get("/v1/boards", headers=bearer(token))).status_code == 401
    finally:
        await _close(c)


def test_memory_mode_secret_is_per_process():
    assert load_secret(None) != load_secret(None)
    assert len(load_secret(None)) == 32


def test_damaged_secret_file_is_named(tmp_path):
    (tmp_path / SECRET_FILE).write_text("not hex\n")
    with pytest.raises(ValueError, match=SECRET_FILE):
        load_secret(tmp_path)


def test_damaged_secret_refuses_to_start_in_one_line(tmp_path, capsys):
    (tmp_path / SECRET_FILE).write_text("not hex\n")
    code = cli_main(["serve", "--data-dir", str(tmp_path), "--engine", "local", "--port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert err[0].startswith("flowrank: error:") and SECRET_FILE in err[0] and "Traceback" not in err[0]


def test_secret_file_is_created_whole_once(tmp_path):
    first = load_secret(tmp_path / "d")
    assert load_secret(tmp_path / "d") == first
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [SECRET_FILE]  # no temp file left


def test_signer_round_trip_and_expiry():
    s = TokenSigner(b"s" * 32)
    tok = s.mint("web", ("a:b:c:d",), expires_ms=5_000)
    claims = s.verify(tok, now_ms=4_999)
    assert (claims.key_name, claims.board_ids, claims.expires_ms) == ("web", ("a:b:c:d",), 5_000)
    with pytest.raises(Unauthenticated, match="expired"):
        s.verify(tok, now_ms=5_000)
    with pytest.raises(Unauthenticated):
        TokenSigner(b"t" * 32).verify(tok, now_ms=0)


def test_live_stream_with_access_token():
    """An EventSource cannot send a header: the SSE stream takes ?access_token= (socket server)."""
    with thread_server() as url:
        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"},
                          headers=H("admin")).status_code == 201
            assert c.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server")).status_code == 200
            token = c.post("/v1/tokens", json={"board_ids": [BOARD], "ttl_s": 60}, headers=H("reader")).json()["token"]
            with c.stream("GET", f"/v1/boards/{BOARD}/live", params={"top": 3, "access_token": token}) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                lines = []
                for line in r.iter_lines():
                    lines.append(line)
                    if line.startswith("data:"):
                        break
                assert lines[0] == "event: snapshot"
                assert '"player_id":"p-ava"' in lines[-1]
            r = c.get(f"/v1/boards/{BOARD}/live", params={"access_token": "reader-key"})
            assert r.status_code == 401


def test_a_tokens_live_stream_ends_when_the_token_does():
    """A stream opened with a token that expires is closed at ``expires_at`` (heartbeats every 0.5 s here)."""
    with thread_server() as url:
        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"},
                          headers=H("admin")).status_code == 201
            token = c.post("/v1/tokens", json={"board_ids": [BOARD], "ttl_s": 1}, headers=H("reader")).json()["token"]
            started = time.monotonic()
            with c.stream("GET", in_url(f"/v1/boards/{BOARD}/live", token)) as r:
                assert r.status_code == 200
                lines = list(r.iter_lines())  # returns once the server ends the stream
            assert lines[0] == "event: snapshot"
            assert time.monotonic() - started < 3.0
            assert c.get(in_url(f"/v1/boards/{BOARD}/live", token)).status_code == 401
