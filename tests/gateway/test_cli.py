"""CLI parsing and the client's retry contract."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.cli import build_parser, settings_from_args
from gateway.client import FlowRankClient


def test_serve_options_per_api_section_1():
    args = build_parser().parse_args([
        "serve", "--data-dir", "/d", "--host", "0.0.0.0", "--port", "9000", "--shards", "4", "--keys", "k.json",
        "--friends-file", "f.json", "--friends-url", "http://fr", "--delta-retention", "7", "--dedup-retention", "9",
        "--ray-address", "auto"])
    s = settings_from_args(args)
    assert (s.data_dir, s.host, s.port, s.shards, s.keys_file, s.friends_file, s.friends_url) == (
        "/d", "0.0.0.0", 9000, 4, "k.json", "f.json", "http://fr")
    assert (s.delta_retention, s.dedup_retention, s.ray_address) == (7, 9, "auto")
    d = settings_from_args(build_parser().parse_args(["serve"]))
    assert (d.data_dir, d.host, d.port, d.shards, d.ray_address) == ("./flowrank-data", "127.0.0.1", 8000, None, None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--shards", "0"])


def test_client_retries_reuse_the_same_event_ids():
    bodies = []

    def handler(request: httpx.Request):
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            return httpx.Response(429, headers={"Retry-After": "1"},
                                  json={"error": {"code": "RATE_LIMITED", "message": "slow", "field": None}})
        if len(bodies) == 2:
            raise httpx.ConnectError("boom")
        return httpx.Response(200, json={"results": [{"event_id": "e1", "outcome": "DUPLICATE_IGNORED", "version": 1}]})

    slept = []
    c = FlowRankClient("http://x", "k", transport=httpx.MockTransport(handler), sleep=slept.append)
    ev = {"event_id": "e1", "board_id": "g:m:s:x", "player_id": "p", "value": 1, "achieved_at": 1}
    assert c.submit([ev])[0]["outcome"] == "DUPLICATE_IGNORED"
    assert len(bodies) == 3 and all(b == {"events": [ev]} for b in bodies)
    assert slept[0] >= 1.0


def test_client_raises_typed_errors():
    def handler(request):
        return httpx.Response(404, json={"error": {"code": "BOARD_NOT_FOUND", "message": "no", "field": "board_id"}})

    c = FlowRankClient("http://x", "k", transport=httpx.MockTransport(handler))
    with pytest.raises(Exception) as ei:
        c.board("g:m:s:x")
    assert ei.value.code == "BOARD_NOT_FOUND" and ei.value.field == "board_id"


def test_rank_mirror_rows_reach_the_engine_and_must_not_be_negative(capsys):
    """--rank-mirror-rows (docs/http.md "Reads"): the default, 0 (no mirrors), and into the engine host's kwargs."""
    from gateway.workers import engine_kwargs  # noqa: PLC0415

    default = settings_from_args(build_parser().parse_args(["serve"]))
    off = settings_from_args(build_parser().parse_args(["serve", "--rank-mirror-rows", "0"]))
    assert (default.rank_mirror_rows, off.rank_mirror_rows) == (4_000_000, 0)
    assert engine_kwargs(off)["rank_mirror_rows"] == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--rank-mirror-rows", "-1"])
    assert "must be 0 or more" in capsys.readouterr().err


def test_ray_dashboard_is_opt_in():
    assert settings_from_args(build_parser().parse_args(["serve"])).ray_dashboard is False
    assert settings_from_args(build_parser().parse_args(["serve", "--ray-dashboard"])).ray_dashboard is True


@pytest.mark.parametrize("keep_alive, idle_s, kept", [(None, 6.0, True), ("1", 2.5, False)])
def test_an_idle_keep_alive_connection_outlives_uvicorns_five_seconds(tmp_path, keep_alive, idle_s, kept):
    """`flowrank serve` keeps an idle connection open for --keep-alive seconds
    (default 75): a client that reuses a connection after 6 s idle is served,
    where uvicorn's default of 5 s closes it under the client."""
    import http.client
    import time

    from tests.chaos.harness import Server

    server = Server(tmp_path, engine="local", shards=1,
                    extra_args=() if keep_alive is None else ("--keep-alive", keep_alive))
    try:
        server.start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

        def ready() -> int:
            conn.request("GET", "/readyz")
            r = conn.getresponse()
            r.read()
            return r.status

        assert ready() == 200
        time.sleep(idle_s)
        if kept:
            assert ready() == 200
        else:
            with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                ready()
        conn.close()
    finally:
        server.cleanup()


def test_keep_alive_must_be_positive():
    for bad in ("0", "-3", "nan", "inf", "soon"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--keep-alive", bad])
    assert build_parser().parse_args(["serve"]).keep_alive == 75.0


def test_workers_need_the_ray_engine(capsys):
    from gateway.cli import main

    assert main(["serve", "--workers", "2", "--engine", "local"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flowrank: error: --workers needs the Ray engine") and err.count("\n") == 1
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--workers", bad])
    assert build_parser().parse_args(["serve"]).workers == 1
