"""``flowrank serve --log postgresql://…`` as real processes (docs/api.md §19), on the session's
PostgreSQL primary with a synchronous standby (tests/conftest.py ``pg_cluster``).

* The machine is lost (SIGKILL of the node mid-ingest, its data directory thrown away): a node
  started on a fresh data directory against the same log takes the lease once the dead node's
  expires and serves every acknowledged event, the board equal to the fold of what survived.
* The active node is paused longer than its lease (SIGSTOP) and another node takes over: once
  resumed, the old node can never append (fenced by epoch in the append's transaction); its
  writes answer ``503 NOT_LEADER`` naming the new active node, its ``/readyz`` is 503 and
  ``/v1/cluster`` says ``standby``; nothing it was sent after the takeover is in the log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from tests.e2e.test_serve_kill import BOARD, H, Ingest, check_intact, create_board, ingest_then, make_events

LEASE_S = "1.5"


def _sse_message(lines) -> dict:
    """The next SSE message (event, id, data) of a stream's lines, heartbeat comments skipped."""
    msg: dict = {}
    for line in lines:
        if not line:
            if "event" in msg:
                return msg
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        msg[key] = value.strip()
    raise AssertionError("the stream ended")


def _get(url: str, path: str, role: str = "admin") -> dict:
    r = httpx.get(f"{url}{path}", headers=H(role), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_lost_machine_loses_no_acknowledged_event_a_new_node_serves_them_all(served_factory, pg_url, tmp_path,
                                                                               engine):
    """The machine is lost mid-ingest (SIGKILL of the server's process group, its data directory thrown
    away): a node on a fresh data directory against the same log serves every acknowledged event. With
    the Ray engine the writer is in the engine's process and the log actor reads the database for the
    shard actors' recovery."""
    first = served_factory(engine, extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "a")
    first.start()
    create_board(first.url)
    ingest = Ingest(first.url, start=0, batches=400)
    asyncio.run(ingest_then(first, ingest, first.kill, after_batches=12))
    assert ingest.acked_batches >= 12 and len(ingest.sent) > len(ingest.acked)  # killed with batches in flight
    assert first.strays() == [], "a process of the killed node outlived it"
    second = served_factory(engine, extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "b")
    killed_at = time.monotonic()
    second.start()  # another machine: an empty data directory, the same log
    took = time.monotonic() - killed_at
    try:
        check_intact(second.url, ingest.acked, ingest.sent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server log:\n{second.tail()}") from None
    info = httpx.get(f"{second.url}/v1/cluster", headers=H("admin"), timeout=10).json()
    assert info["role"] == "active" and info["epoch"] >= 2 and info["leader"] == second.url, info
    assert took < 90, took
    assert second.terminate() == 0, second.tail()
    assert second.strays() == []


def test_a_paused_active_is_fenced_and_answers_not_leader_after_a_takeover(served_factory, pg_url, tmp_path):
    a = served_factory("local", extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "a")
    a.start()
    create_board(a.url)
    r = httpx.post(f"{a.url}/v1/events", json={"events": make_events(0, 50)}, headers=H("game_server"), timeout=30)
    assert r.status_code == 200, r.text
    epoch_a = httpx.get(f"{a.url}/v1/cluster", headers=H("admin"), timeout=10).json()["epoch"]
    os.killpg(a.proc.pid, signal.SIGSTOP)  # paused past its lease
    try:
        b = served_factory("local", extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "b")
        b.start()
        r = httpx.post(f"{b.url}/v1/events", json={"events": make_events(50, 50)}, headers=H("game_server"),
                       timeout=30)
        assert r.status_code == 200, r.text
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)
    info_b = httpx.get(f"{b.url}/v1/cluster", headers=H("admin"), timeout=10).json()
    assert info_b["role"] == "active" and info_b["epoch"] > epoch_a, info_b
    # the old active, resumed: every write is refused, at first by the fence in the append's transaction,
    # then (its lease renewal has failed) naming the new active node
    deadline = time.monotonic() + 10
    while True:
        r = httpx.post(f"{a.url}/v1/events", json={"events": make_events(1000, 5, prefix="late")},
                       headers=H("game_server"), timeout=30)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "NOT_LEADER", r.text
        assert r.headers["Retry-After"] == "1"
        if r.headers.get("X-FlowRank-Leader") == b.url or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.headers.get("X-FlowRank-Leader") == b.url, (r.headers, a.tail())
    ready = httpx.get(f"{a.url}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "NOT_LEADER"
    assert ready.headers.get("X-FlowRank-Leader") == b.url
    info_a = httpx.get(f"{a.url}/v1/cluster", headers=H("admin"), timeout=10).json()
    assert info_a["role"] == "standby" and info_a["leader"] == b.url, info_a
    assert httpx.get(f"{b.url}/readyz", timeout=10).status_code == 200
    # nothing the old node was sent after the takeover reached the log: the new node has 100 events
    board = httpx.get(f"{b.url}/v1/boards/{BOARD}", headers=H("admin"), timeout=10).json()
    late = httpx.get(f"{b.url}/v1/boards/{BOARD}/players/p0/history", headers=H("moderator"), timeout=10).json()
    assert not [e for e in late["events"] if e["event_id"].startswith("late")]
    assert board["size"] == 40
    # and it became a standby without a restart: it follows the new active's writes
    r = httpx.post(f"{b.url}/v1/events", json={"events": make_events(100, 50)}, headers=H("game_server"), timeout=30)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 15
    while _get(a.url, f"/v1/boards/{BOARD}")["version"] != _get(b.url, f"/v1/boards/{BOARD}")["version"]:
        assert time.monotonic() < deadline, a.tail()
        time.sleep(0.05)
    assert _get(a.url, f"/v1/boards/{BOARD}/checksum") == _get(b.url, f"/v1/boards/{BOARD}/checksum")
    assert httpx.get(f"{a.url}/readyz/reads", timeout=10).status_code == 200
    assert b.terminate() == 0, b.tail()
    # and takes the log over again once b is gone
    deadline = time.monotonic() + 15
    while httpx.get(f"{a.url}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, a.tail()
        time.sleep(0.1)
    r = httpx.post(f"{a.url}/v1/events", json={"events": make_events(150, 10)}, headers=H("game_server"), timeout=30)
    assert r.status_code == 200, r.text
    assert a.terminate() == 0, a.tail()


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_hot_standby_follows_refuses_writes_and_takes_over_when_the_active_dies(served_factory, pg_url, tmp_path,
                                                                                   engine):
    """--standby: reads at the version it applied (equal to the active's once caught up, same checksum),
    writes 503 NOT_LEADER naming the active; the active SIGKILLed mid-ingest, the standby takes over
    within the lease and serves every acknowledged event, continuing the same versions. With the Ray
    engine, each node is its own embedded Ray instance (two on this machine)."""
    a = served_factory(engine, extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "a")
    a.start()
    create_board(a.url)
    b = served_factory(engine, extra=("--log", pg_url, "--lease-s", LEASE_S, "--standby"), tmp=tmp_path / "b")
    b.start(ready="/readyz/reads")
    r = httpx.post(f"{a.url}/v1/events", json={"events": make_events(0, 300)}, headers=H("game_server"), timeout=30)
    assert r.status_code == 200, r.text
    want = _get(a.url, f"/v1/boards/{BOARD}/checksum")
    deadline = time.monotonic() + 20
    while _get(b.url, f"/v1/boards/{BOARD}")["version"] != _get(a.url, f"/v1/boards/{BOARD}")["version"]:
        assert time.monotonic() < deadline, b.tail()
        time.sleep(0.05)
    assert _get(b.url, f"/v1/boards/{BOARD}/checksum") == want
    top_a, top_b = _get(a.url, f"/v1/boards/{BOARD}/top?limit=100"), _get(b.url, f"/v1/boards/{BOARD}/top?limit=100")
    assert top_a == top_b
    info_b = _get(b.url, "/v1/cluster")
    assert info_b["role"] == "standby" and info_b["leader"] == a.url and info_b["lag_records"] == 0, info_b
    refused = httpx.post(f"{b.url}/v1/events", json={"events": make_events(300, 5)}, headers=H("game_server"),
                         timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "NOT_LEADER", refused.text
    assert refused.headers["X-FlowRank-Leader"] == a.url and refused.headers["Retry-After"] == "1"
    assert httpx.get(f"{b.url}/readyz", timeout=10).status_code == 503
    # a live stream on the standby goes on as the active writes: a snapshot per change window
    with httpx.stream("GET", f"{b.url}/v1/boards/{BOARD}/live", params={"n": 10}, headers=H("admin"),
                      timeout=30) as live:
        lines = live.iter_lines()
        first = _sse_message(lines)
        assert first["event"] == "snapshot"
        r = httpx.post(f"{a.url}/v1/events", json={"events": make_events(400, 40)}, headers=H("game_server"),
                       timeout=30)
        assert r.status_code == 200, r.text
        nxt = _sse_message(lines)
        assert nxt["event"] == "snapshot" and int(nxt["id"]) > int(first["id"]), (first, nxt)
    minted = httpx.post(f"{b.url}/v1/tokens", json={"board_ids": [BOARD], "ttl_s": 60}, headers=H("admin"), timeout=30)
    assert minted.status_code == 503 and minted.json()["error"]["code"] == "NOT_LEADER", minted.text
    assert minted.headers["X-FlowRank-Leader"] == a.url
    # the active dies mid-ingest
    ingest = Ingest(a.url, start=10_000, batches=400)
    asyncio.run(ingest_then(a, ingest, a.kill, after_batches=12))
    killed = time.monotonic()
    while httpx.get(f"{b.url}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() - killed < 30, b.tail()
        time.sleep(0.05)
    took = time.monotonic() - killed
    info = _get(b.url, "/v1/cluster")
    assert info["role"] == "active" and info["epoch"] == info_b["epoch"] + 1, info
    acked = {e["event_id"]: e for e in make_events(0, 300) + make_events(400, 40)} | ingest.acked
    sent = {e["event_id"]: e for e in make_events(0, 300) + make_events(400, 40)} | ingest.sent
    try:
        check_intact(b.url, acked, sent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- standby log:\n{b.tail()}") from None
    assert took < float(LEASE_S) + 5, took
    assert b.terminate() == 0, b.tail()
