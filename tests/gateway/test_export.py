"""GET /v1/boards/{id}/export over HTTP (docs/api.md §13): CSV and JSON Lines at one
pinned version, in the order of the board's top pages, roles, 3 partitions."""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

from engine.core.timefmt import format_timestamp, format_timestamps
from gateway.app import create_app
from tests.gateway.conftest import BOARD, H, Harness, open_engine, settings, thread_server

pytestmark = pytest.mark.anyio

PLAYERS = 12_000  # > 1 export chunk (gateway.routes.export.PAGE_ROWS = 8,192)


def _event(i: int, player: str, value: int) -> dict:
    return {"event_id": f"e-{i}", "board_id": BOARD, "player_id": player, "value": value,
            "achieved_at": 1_793_527_500_000 + (i * 37) % 100_000}


def _players(n: int) -> list[dict]:
    # many ties on value; a few ids that CSV must quote
    odd = {7: 'p,comma', 8: 'p"quote', 9: "p-ünï ✓"}
    return [_event(i, odd.get(i, f"p-{i}"), (i * 7919) % 500) for i in range(n)]


async def _load(client: httpx.AsyncClient, events: list[dict], shards: int = 3) -> None:
    r = await client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": shards},
                          headers=H("admin"))
    assert r.status_code == 201, r.text
    for i in range(0, len(events), 10_000):
        r = await client.post("/v1/events", json={"events": events[i:i + 10_000]}, headers=H("game_server"))
        assert r.status_code == 200, r.text


async def _top_pages(client: httpx.AsyncClient) -> tuple[int, list[dict]]:
    r = await client.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000}, headers=H("reader"))
    assert r.status_code == 200, r.text
    body = r.json()
    version, entries, cursor = body["version"], list(body["entries"]), body["next_cursor"]
    while cursor:
        r = await client.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000, "cursor": cursor}, headers=H("reader"))
        assert r.status_code == 200, r.text
        assert r.json()["version"] == version
        entries += r.json()["entries"]
        cursor = r.json()["next_cursor"]
    return version, entries


def _parse_csv(text: str) -> list[dict]:
    lines = text.split("\r\n")
    assert lines[0] == "rank,player_id,value,achieved_at,metadata" and lines[-1] == ""
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    for row in rows:
        assert row.pop("metadata") == ""  # no metadata yet: the column is there, empty
        row["rank"], row["value"] = int(row["rank"]), int(row["value"])
    return rows


@pytest.fixture
async def h3():
    """An app over a LocalService with 3 in-process shards; the board gets 3 partitions."""
    engine = await open_engine(n_shards=3)
    app = create_app(settings(), engine)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Harness(app, engine, client)
    await app.state.gateway.hub.close()
    await engine.close()


async def test_csv_and_jsonl_equal_the_top_pages_at_the_version_header(h3):
    await _load(h3.client, _players(PLAYERS))
    version, top = await _top_pages(h3.client)
    assert len(top) == PLAYERS and [e["rank"] for e in top] == list(range(1, PLAYERS + 1))

    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"format": "csv"}, headers=H("admin"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["x-board-version"] == str(version)
    assert _parse_csv(r.text) == top

    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"format": "jsonl"}, headers=H("moderator"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["x-board-version"] == str(version)
    assert r.text.endswith("\n")
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert rows == top  # same fields as a top entry; no "metadata" key while rows carry none

    r = await h3.client.get(f"/v1/boards/{BOARD}/export", headers=H("admin"))  # csv by default
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")


async def test_ties_competition_adds_tied_rank_as_the_top_pages_have_it(h3):
    await _load(h3.client, _players(PLAYERS))  # values mod 500: runs of ~24 equal values, across page edges
    r = await h3.client.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000, "ties": "competition"},
                            headers=H("reader"))
    body = r.json()
    top, cursor = list(body["entries"]), body["next_cursor"]
    while cursor:
        page = (await h3.client.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000, "cursor": cursor,
                                                                         "ties": "competition"},
                                    headers=H("reader"))).json()
        top += page["entries"]
        cursor = page["next_cursor"]
    assert any(e["tied_rank"] != e["rank"] for e in top[4_999:5_001])  # a tie across the first page edge
    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"format": "jsonl", "ties": "competition"},
                            headers=H("admin"))
    assert [json.loads(line) for line in r.text.splitlines()] == top
    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"ties": "competition"}, headers=H("admin"))
    assert r.text.startswith("rank,player_id,value,achieved_at,metadata,tied_rank\r\n")
    rows = list(csv.DictReader(io.StringIO(r.text, newline="")))
    assert [int(row["tied_rank"]) for row in rows] == [e["tied_rank"] for e in top]
    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"ties": "dense"}, headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "ties"


async def test_an_empty_board_exports_the_header_only(h3):
    await _load(h3.client, [])
    r = await h3.client.get(f"/v1/boards/{BOARD}/export", headers=H("admin"))
    assert r.status_code == 200 and r.text == "rank,player_id,value,achieved_at,metadata\r\n"
    assert r.headers["x-board-version"] == "0"
    r = await h3.client.get(f"/v1/boards/{BOARD}/export", params={"format": "jsonl"}, headers=H("admin"))
    assert r.status_code == 200 and r.text == "" and r.headers["x-board-version"] == "0"


async def test_roles_unknown_board_and_bad_format(h3):
    await _load(h3.client, _players(10))
    url = f"/v1/boards/{BOARD}/export"
    for role in ("reader", "game_server"):
        r = await h3.client.get(url, headers=H(role))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN", (role, r.text)
    r = await h3.client.get(url)
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHENTICATED"
    for role in ("admin", "moderator"):
        assert (await h3.client.get(url, headers=H(role))).status_code == 200
    r = await h3.client.get(url, params={"format": "xml"}, headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_FAILED"
    assert r.json()["error"]["field"] == "format"
    r = await h3.client.get("/v1/boards/no:such:board:x/export", headers=H("admin"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "BOARD_NOT_FOUND"


def test_writes_during_an_export_do_not_change_what_it_returns():
    """A real socket: the export is read slowly while a writer moves the bottom
    rows to the top and adds new players; the export still equals the top
    pages read before the writes, at the version of its header."""
    with thread_server(n_shards=3) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            events = _players(PLAYERS)
            r = c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 3}, headers=H("admin"))
            assert r.status_code == 201, r.text
            for i in range(0, len(events), 10_000):
                assert c.post("/v1/events", json={"events": events[i:i + 10_000]},
                              headers=H("game_server")).status_code == 200
            before = c.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000}, headers=H("reader")).json()
            version, top = before["version"], list(before["entries"])
            cursor = before["next_cursor"]
            while cursor:
                page = c.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000, "cursor": cursor},
                             headers=H("reader")).json()
                top += page["entries"]
                cursor = page["next_cursor"]

            with c.stream("GET", f"/v1/boards/{BOARD}/export", params={"format": "jsonl"}, headers=H("admin")) as r:
                assert r.status_code == 200 and r.headers["x-board-version"] == str(version)
                chunks = r.iter_bytes()
                got = [next(chunks)]  # the export has started: its version is pinned
                moved = [_event(PLAYERS + k, top[-1 - k]["player_id"], 10_000 + k) for k in range(50)]
                moved += [_event(PLAYERS + 100 + k, f"new-{k}", 20_000) for k in range(50)]
                w = c.post("/v1/events", json={"events": moved}, headers=H("game_server"))
                assert w.status_code == 200, w.text
                assert c.get(f"/v1/boards/{BOARD}", headers=H("reader")).json()["version"] == version + 100
                got += list(chunks)
            rows = [json.loads(line) for line in b"".join(got).splitlines()]
            assert rows == top

            after = c.get(f"/v1/boards/{BOARD}/export", headers=H("admin"))
            assert after.headers["x-board-version"] == str(version + 100)
            assert _parse_csv(after.text)[0]["player_id"].startswith("new-")


def test_format_timestamps_equals_format_timestamp():
    from engine.core.timefmt import MAX_MS, MIN_MS

    values = [MIN_MS, MAX_MS, -1, 0, 1, 999, 1_793_527_500_000, -62_000_000_000_000, 951_782_400_000]
    values += list(range(1_700_000_000_000, 1_700_000_000_000 + 86_400_000 * 400, 86_400_000 + 1))
    assert format_timestamps(values) == [format_timestamp(v) for v in values]
    assert format_timestamps([]) == []


def _chunk(entries, ties: bool = False):
    from engine.core.export import Block, Chunk, TiedRanks

    rows = Block.of([-e.value for e in entries], [e.achieved_at for e in entries], [e.value for e in entries],
                    [e.achieved_at for e in entries], [e.player_id for e in entries], [e.metadata for e in entries])
    first = entries[0].rank if entries else 1
    return Chunk(1, first, rows, TiedRanks().of(first, rows.value) if ties else None)


def test_csv_rows_write_what_the_csv_module_writes():
    from engine.core.model import RankedEntry
    from gateway.export_format import csv_bytes as csv_rows

    plain = [RankedEntry(i + 1, f"p-{i}", 100 - i, 1_793_527_500_000 + i) for i in range(20)]
    odd = plain[:3] + [RankedEntry(4, "a,b", 1, 0), RankedEntry(5, 'q"x', 2, 5), RankedEntry(6, "ü ✓ ", 3, -7),
                       RankedEntry(7, " lead", -4, 9, metadata=b'{"a":"x,\\"y"}'), RankedEntry(8, "r", -4, 9)]
    for page in (plain, odd, []):
        for ties in (False, True):
            out = io.StringIO()
            tied = _chunk(page, ties).tied_rank
            csv.writer(out, lineterminator="\r\n").writerows(
                (e.rank, e.player_id, e.value, format_timestamp(e.achieved_at), (e.metadata or b"").decode())
                + ((int(tied[k]),) if ties else ()) for k, e in enumerate(page))
            assert csv_rows(_chunk(page, ties), ties).decode("utf-8") == out.getvalue()


def test_jsonl_rows_write_what_orjson_writes():
    import orjson

    from engine.core.model import RankedEntry
    from gateway.export_format import jsonl_bytes as jsonl_rows

    ids = ["p-1", 'q"x', "back\\slash", "ü ✓", "tab\there", "😀", "a,b", "nl\nx"]
    metas = [None, b"{}", b'{"k":"\xc3\xa9","n":[1,2.5,null]}', None, b'{"q":"\\""}', None, None, b'{"a":1}']
    page = [RankedEntry(i + 10, pid, 50 - i // 2, -62_135_596_800_000 + i * 10**9, None, m)
            for i, (pid, m) in enumerate(zip(ids, metas))]
    for ties in (False, True):
        chunk = _chunk(page, ties)
        want = b""
        for k, e in enumerate(page):
            row: dict = {"rank": e.rank}
            if ties:
                row["tied_rank"] = int(chunk.tied_rank[k])
            row |= {"player_id": e.player_id, "value": e.value, "achieved_at": format_timestamp(e.achieved_at)}
            if e.metadata:
                row["metadata"] = orjson.Fragment(e.metadata)
            want += orjson.dumps(row) + b"\n"
        assert jsonl_rows(chunk, ties) == want
    assert jsonl_rows(_chunk([]), False) == b""


def _engine_of(holder: dict):
    def wrap(app):
        holder["app"] = app
        return app
    return wrap


def _held_spills() -> list[str]:
    """Spill files this process holds open (the gateway and the shards share it here)."""
    from tests.open_files import open_paths

    return [t for t in open_paths() if ".spill" in t]


def _wait_until(cond, seconds: float = 10.0) -> bool:
    import time

    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_a_client_that_goes_away_or_a_failure_midway_leaves_no_spill_file(monkeypatch):
    """A real socket: the client reads the first bytes and hangs up; then the
    engine fails after the first bytes, and the client sees the connection
    closed before the end of the body. Either way the spill files go."""
    import os
    import time

    from engine.core import export as export_mod

    holder: dict = {}
    with thread_server(n_shards=3, wrap=_engine_of(holder)) as url:
        engine = holder["app"].state.gateway.engine
        with httpx.Client(base_url=url, timeout=30) as c:
            r = c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 3}, headers=H("admin"))
            assert r.status_code == 201
            events = _players(40_000)
            for i in range(0, len(events), 10_000):
                assert c.post("/v1/events", json={"events": events[i:i + 10_000]},
                              headers=H("game_server")).status_code == 200

            real = export_mod.Merge.take

            def slow(self):  # the export outlasts the client, whatever the socket buffers hold
                time.sleep(0.2)
                return real(self)

            monkeypatch.setattr(export_mod.Merge, "take", slow)
            with c.stream("GET", f"/v1/boards/{BOARD}/export", headers=H("admin")) as r:
                assert r.status_code == 200
                next(r.iter_bytes())
                assert _held_spills() != []  # open while the body is sent
            assert _wait_until(lambda: _held_spills() == [])
            monkeypatch.undo()
            dirs = [core.spill_dir for core in engine.cores]
            assert all(d and os.listdir(d) == [] for d in dirs)

            calls = {"n": 0}

            def failing(self):
                calls["n"] += 1
                if calls["n"] == 2:
                    raise OSError("disk gone")
                return real(self)

            monkeypatch.setattr(export_mod.Merge, "take", failing)
            with pytest.raises(httpx.RemoteProtocolError):
                with c.stream("GET", f"/v1/boards/{BOARD}/export", headers=H("admin")) as r:
                    assert r.status_code == 200
                    b"".join(r.iter_bytes())
            assert calls["n"] == 2
            assert _wait_until(lambda: _held_spills() == [])
            assert all(os.listdir(d) == [] for d in dirs)
            monkeypatch.undo()
            full = c.get(f"/v1/boards/{BOARD}/export", headers=H("admin"))
            assert full.text.count("\r\n") == 40_001
