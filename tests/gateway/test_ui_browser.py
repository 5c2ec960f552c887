"""The live board page in a real browser (docs/api.md §12).

``flowrank serve --cors-origin …`` runs as a child process on a loopback port;
the page is served by a second tiny HTTP server on another port (another
origin), so every API call it makes is cross-origin: the board read and the
player search carry ``Authorization: Bearer <token>`` (a CORS preflight each),
the live stream is an ``EventSource`` with ``?access_token=``. Debian's
``chromium`` is driven by ``playwright`` (PyPI) through ``executable_path``:
``playwright install`` cannot download here, and CI installs the browser with
apt (``.ci/run``). A missing browser is a failure, not a skip.

The test checks that the snapshot appears, that an event POSTed through the
API shows up as a delta within 1 s of its acknowledgement, the board's state
and version, the player search, and that the page loaded nothing from any
other host. Then it opens the page as FlowRank serves it (same origin, under
its Content-Security-Policy: no refusal may be logged) and with a forged
token (the page says the token was refused). It saves a screenshot in its
tmp directory and prints the path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from benchmarks.processes import Owned
from tests.loopback import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("FLOWRANK_CHROMIUM", "/usr/bin/chromium")
BOARD = "arena-clash:solo:S7:global"
KEYS = {"admin": "ui-admin", "game_server": "ui-gs", "reader": "ui-reader"}
EVENTS = [
    ("p-ava", 9800, "2026-11-01T09:58:00Z"),
    ("p-ben", 9500, "2026-11-01T10:01:00Z"),
    ("p-chloe", 9500, "2026-11-01T10:02:00Z"),
    ("p-dev", 9100, "2026-11-01T10:03:00Z"),
    ("p-eli", 8700, "2026-11-01T10:04:00Z"),
]


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[role]}"}


def _playwright():
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]' (it is in the test extra)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install -y chromium; "
                    ".ci/run does) or point FLOWRANK_CHROMIUM at a Chromium binary")
    return sync_playwright


@pytest.fixture
def server(tmp_path):
    """``flowrank serve`` (local engine) allowing the page server's origin; yields (api url, page origin)."""
    port, page_port = free_port(), free_port()
    page_origin = f"http://127.0.0.1:{page_port}"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": r, "role": r, "key": k} for r, k in KEYS.items()]}))
    log_path = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "gateway", "serve", "--engine", "local", "--data-dir", str(tmp_path / "data"),
           "--keys", str(keys), "--host", "127.0.0.1", "--port", str(port), "--shards", "2", "--shard-actors", "2",
           "--cors-origin", page_origin, "--live-window-ms", "20", "--graceful-timeout", "2"]
    # the child imports this checkout's code, whichever checkout the venv was installed from
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    with open(log_path, "w") as log:
        owned = Owned(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path))
        proc = owned.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"flowrank serve exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"flowrank serve not ready after 60 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield url, page_port
    finally:
        owned.stop()


class PageServer:
    """Serves the page's bytes at any path, from another origin than the API's."""

    def __init__(self, port: int, page: bytes):
        page_bytes = page

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page_bytes)))
                self.end_headers()
                self.wfile.write(page_bytes)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_live_board_in_chromium_from_another_origin(server, tmp_path):
    sync_playwright = _playwright()
    api, page_port = server
    with httpx.Client(base_url=api, timeout=10) as c:
        r = c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "closes_at": "2099-01-01T00:00:00Z",
                                       "finalize_after_s": 600}, headers=H("admin"))
        assert r.status_code == 201, r.text
        events = [{"event_id": f"evt-{p}", "board_id": BOARD, "player_id": p, "value": v, "achieved_at": t}
                  for p, v, t in EVENTS]
        assert c.post("/v1/events", json={"events": events}, headers=H("game_server")).status_code == 200
        r = c.post("/v1/tokens", json={"board_ids": [BOARD], "ttl_s": 300}, headers=H("reader"))
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        page_bytes = c.get(f"/ui/boards/{BOARD}").content  # the page FlowRank serves, re-served elsewhere

        with PageServer(page_port, page_bytes), sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 640})
                requested: list[str] = []
                problems: list[str] = []
                page.on("request", lambda req: requested.append(req.url))
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(str(e)))
                page_origin = f"http://127.0.0.1:{page_port}"
                page.goto(f"{page_origin}/ui/boards/{BOARD}#" + urlencode({"token": token, "api": api}))

                # the snapshot appears, with the board's state and version
                try:
                    page.wait_for_function("document.querySelectorAll('#top tbody tr').length === 5 && "
                                           "document.getElementById('live-status').textContent === 'connected'",
                                           timeout=15_000)
                except Exception as e:
                    raise AssertionError(f"no snapshot on the page: {e}; browser errors: {problems}") from None
                players = page.eval_on_selector_all("#top tbody tr", "rows => rows.map(r => r.dataset.player)")
                assert players == ["p-ava", "p-ben", "p-chloe", "p-dev", "p-eli"]
                page.wait_for_function("document.getElementById('state').textContent === 'OPEN'", timeout=5000)
                assert page.inner_text("#version") == "5"
                assert page.is_visible("#schedule")  # the scheduled close, as GET /v1/boards/{id} states it
                assert page.inner_text("#closes-at") == "2099-01-01T00:00:00.000Z"
                assert page.inner_text("#finalize-after") == "600 s"
                assert page.get_attribute("body", "data-snapshots") == "1"

                # an event POSTed through the API shows up as a delta within 1 s
                ev = {"event_id": "evt-zed", "board_id": BOARD, "player_id": "p-zed", "value": 9900,
                      "achieved_at": "2026-11-01T10:05:00Z"}
                r = c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
                acked = time.monotonic()
                assert r.status_code == 200 and r.json()["results"][0]["version"] == 6, r.text
                page.wait_for_function("document.querySelector('#top tbody tr').dataset.player === 'p-zed'",
                                       timeout=1000)
                seen = time.monotonic() - acked
                assert seen < 1.0, seen
                assert page.get_attribute("body", "data-deltas") == "1"
                assert page.get_attribute("body", "data-snapshots") == "1"  # a delta, not a fresh snapshot
                first = page.eval_on_selector("#top tbody tr", "r => [...r.cells].map(c => c.textContent)")
                assert first[:3] == ["1", "p-zed", "9900"]
                assert page.eval_on_selector("#top tbody tr", "r => r.classList.contains('changed')")
                assert page.inner_text("#version") == "6"

                # player search: exact rank and the players around
                page.fill("#player-id", "p-chloe")
                page.click("#search button")
                page.wait_for_selector("#around:not([hidden])", timeout=5000)
                assert page.inner_text("#player-rank") == "#4"
                around = page.eval_on_selector_all("#around tbody tr", "rows => rows.map(r => r.dataset.player)")
                assert around == ["p-zed", "p-ava", "p-ben", "p-chloe", "p-dev", "p-eli"]
                assert page.eval_on_selector("#around tr.me", "r => r.dataset.player") == "p-chloe"

                shot = tmp_path / "ui-board.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot: {shot}")
                assert shot.stat().st_size > 0

                # the page as FlowRank serves it (same origin, under its Content-Security-Policy) works too,
                # and says so when the token is refused
                same = browser.new_page()
                same.on("pageerror", lambda e: problems.append(str(e)))
                same.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)  # CSP refusals
                same.on("request", lambda req: requested.append(req.url))
                same.goto(f"{api}/ui/boards/{BOARD}#" + urlencode({"token": token}))
                # (functions, not expression strings: the page's CSP forbids the eval of an expression)
                same.wait_for_function("() => document.querySelectorAll('#top tbody tr').length === 6 && "
                                       "document.getElementById('live-status').textContent === 'connected'",
                                       timeout=10_000)
                assert same.inner_text("#version") == "6"
                bad = browser.new_page()
                bad.goto(f"{api}/ui/boards/{BOARD}#token=fr1.forged.token")
                bad.wait_for_function("() => document.getElementById('message').textContent.includes('token')",
                                      timeout=10_000)
            finally:
                browser.close()

    # it loaded nothing from any other host: only the page's origin and the API's
    origins = {f"{u.scheme}://{u.netloc}" for u in map(urlsplit, requested) if u.scheme != "data"}
    assert origins <= {page_origin, api}, origins
    assert any("/live?" in u and "access_token=" in u for u in requested)
    assert problems == [], problems


def test_a_series_page_shows_its_current_window_s_instance(server):
    """/ui/boards/{series} (docs/api.md §15): the page names the current window's instance, shows its top
    (reads on the series answer from it) and streams its deltas."""
    sync_playwright = _playwright()
    api, _ = server
    series = "arena-clash:solo:daily:global"
    now = time.time_ns() // 1_000_000
    with httpx.Client(base_url=api, timeout=10) as c:
        r = c.post("/v1/boards", json={"board_id": series, "policy": "best_score", "recurrence": {"every": "day"}},
                   headers=H("admin"))
        assert r.status_code == 201, r.text
        current = r.json()["current"]
        r = c.post("/v1/events", json={"events": [{"event_id": "s1", "board_id": series, "player_id": "p-ava",
                                                  "value": 10, "achieved_at": now}]}, headers=H("game_server"))
        assert r.json()["results"][0]["board_id"] == current, r.text
        token = c.post("/v1/tokens", json={"board_ids": [series, current], "ttl_s": 300},
                       headers=H("reader")).json()["token"]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page()
                problems: list[str] = []
                page.on("pageerror", lambda e: problems.append(str(e)))
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                page.goto(f"{api}/ui/boards/{series}#" + urlencode({"token": token}))
                page.wait_for_function("() => document.querySelectorAll('#top tbody tr').length === 1 && "
                                       "document.getElementById('live-status').textContent === 'connected' && "
                                       "document.getElementById('window').textContent !== ''", timeout=10_000)
                assert page.is_visible("#series") and page.inner_text("#current") == current
                assert " – " in page.inner_text("#window")
                r = c.post("/v1/events", json={"events": [{"event_id": "s2", "board_id": series,
                                                          "player_id": "p-ben", "value": 20, "achieved_at": now}]},
                           headers=H("game_server"))
                assert r.status_code == 200, r.text
                page.wait_for_function("() => document.querySelector('#top tbody tr').dataset.player === 'p-ben'",
                                       timeout=2000)
                assert problems == [], problems
            finally:
                browser.close()


def test_a_league_page_shows_a_player_s_cohort_with_zones(server, tmp_path):
    """/ui/boards/{league} (docs/api.md §16): the header states the league; the player search shows the
    player's cohort ranked locally with promote/demote badges, and a player who joined without a score
    their cohort (and no rank)."""
    sync_playwright = _playwright()
    api, _ = server
    board = "arena-clash:league:S7:global"
    with httpx.Client(base_url=api, timeout=10) as c:
        r = c.post("/v1/boards", json={"board_id": board, "policy": "best_score",
                                       "league": {"cohort_size": 4, "tiers": 3, "promote": 1, "demote": 1}},
                   headers=H("admin"))
        assert r.status_code == 201, r.text
        assert c.post(f"/v1/boards/{board}/players/p-fay/join", headers=H("game_server")).status_code == 201
        for p, v, t in EVENTS[:3]:
            ev = {"event_id": f"evt-{p}", "board_id": board, "player_id": p, "value": v, "achieved_at": t}
            assert c.post("/v1/events", json={"events": [ev]}, headers=H("game_server")).status_code == 200
        token = c.post("/v1/tokens", json={"board_ids": [board], "ttl_s": 300}, headers=H("reader")).json()["token"]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 640})
                problems: list[str] = []
                page.on("pageerror", lambda e: problems.append(str(e)))
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" and "404" not in m.text
                        else None)  # the player read of p-fay (no row) is a 404 the page shows
                page.goto(f"{api}/ui/boards/{board}#" + urlencode({"token": token}))
                page.wait_for_function("() => document.querySelectorAll('#top tbody tr').length === 3 && "
                                       "!document.getElementById('league').hidden", timeout=10_000)
                assert page.inner_text("#league-info") == "cohorts of 4 · 3 tiers · top 1 up · last 1 down"
                assert not page.is_visible("#cohort-panel")
                page.fill("#player-id", "p-ben")
                page.click("#search button")
                page.wait_for_selector("#cohort-panel:not([hidden]) #cohort tbody tr", timeout=5000)
                assert page.inner_text("#cohort-id") == "1-1"
                assert page.inner_text("#cohort-meta").startswith("tier 1 of 3 · 4 members · 3 ranked")
                rows = page.eval_on_selector_all("#cohort tbody tr", "rows => rows.map(r => [...r.cells].map("
                                                 "c => c.textContent))")
                assert [(r[0], r[1], r[4]) for r in rows] == [("1", "p-ava", "▲ promote"), ("2", "p-ben", ""),
                                                              ("3", "p-chloe", "")]
                assert page.eval_on_selector("#cohort tr.me", "r => r.dataset.player") == "p-ben"
                assert page.eval_on_selector("#cohort .badge", "b => b.className") == "badge promote"
                shot = tmp_path / "ui-league.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot: {shot}")
                # joined, no score yet: no rank, but a cohort
                page.fill("#player-id", "p-fay")
                page.click("#search button")
                page.wait_for_function("() => document.getElementById('player-result').className === 'msg error' "
                                       "&& !document.getElementById('cohort-panel').hidden", timeout=5000)
                assert page.inner_text("#cohort-id") == "1-1"
                assert len(page.query_selector_all("#cohort tbody tr")) == 3
                # not entered at all: the panel says so
                page.fill("#player-id", "p-nobody")
                page.click("#search button")
                page.wait_for_function("() => document.getElementById('cohort-meta').className === 'msg error'",
                                       timeout=5000)
                assert "has not entered" in page.inner_text("#cohort-meta")
                assert problems == [], problems
            finally:
                browser.close()
