"""Every node of one log answers alike (docs/api.md §19): two ``flowrank serve --log postgresql://…``
processes on different, empty data directories, one after the other, share the generated keys, the
token signing secret, the webhook secret and the erasure key through the log's database
(engine.log.shared_settings): a token minted on the first is accepted by the second, and the admin key
the first generated works on the second."""

from __future__ import annotations

import json
import socket

import httpx
import psycopg

from tests.e2e.test_serve_kill import BOARD, make_events

LEASE_S = "1.5"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keys(path) -> dict[str, str]:
    return {e["role"]: e["key"] for e in json.loads(path.read_text())["keys"]}


def test_a_token_and_the_generated_keys_of_one_node_work_on_the_next(served_factory, pg_url, tmp_path):
    hook = f"http://127.0.0.1:{_closed_port()}/hook"  # --webhook-url: the engine loads the webhook secret too
    extra = ("--log", pg_url, "--lease-s", LEASE_S, "--webhook-url", hook)
    first = served_factory("local", extra=extra, tmp=tmp_path / "a", keys=False)
    first.start()
    keys_a = first.data / "keys.json"
    assert f"flowrank: keys in {keys_a}" in first.tail(400), first.tail()
    admin = {"Authorization": f"Bearer {_keys(keys_a)['admin']}"}
    r = httpx.post(f"{first.url}/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 2},
                   headers=admin, timeout=30)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{first.url}/v1/events", json={"events": make_events(0, 50)}, timeout=30,
                   headers={"Authorization": f"Bearer {_keys(keys_a)['game_server']}"})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{first.url}/v1/tokens", json={"board_ids": [BOARD], "ttl_s": 3600}, headers=admin, timeout=30)
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    top = f"/v1/boards/{BOARD}/top?limit=10"
    on_first = httpx.get(f"{first.url}{top}", params={"access_token": token}, timeout=30)
    assert on_first.status_code == 200, on_first.text
    assert first.terminate() == 0, first.tail()  # a clean stop releases the lease: the next node takes it now

    second = served_factory("local", extra=extra, tmp=tmp_path / "b", keys=False)
    second.start()  # another machine: an empty data directory, the same log
    keys_b = second.data / "keys.json"
    assert keys_b.read_bytes() == keys_a.read_bytes()  # the log's keys, written where serve says they are
    assert f"flowrank: keys in {keys_b}" in second.tail(400), second.tail()
    on_second = httpx.get(f"{second.url}{top}", params={"access_token": token}, timeout=30)
    assert on_second.status_code == 200, (on_second.text, second.tail())
    assert on_second.json()["entries"] == on_first.json()["entries"]
    bearer = httpx.get(f"{second.url}{top}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert bearer.status_code == 200, bearer.text
    info = httpx.get(f"{second.url}/v1/cluster", headers=admin, timeout=30)  # the first node's admin key
    assert info.status_code == 200 and info.json()["role"] == "active", info.text
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert httpx.get(f"{second.url}{top}", params={"access_token": forged}, timeout=30).status_code == 401
    # one copy of each secret, in the database; none in either data directory
    with psycopg.connect(pg_url, autocommit=True) as conn:
        names = {n for (n,) in conn.execute("SELECT name FROM flowrank_settings").fetchall()}
    assert names == {"keys.json", "token_secret", "webhook_secret", "erasure.key"}, names
    for served in (first, second):
        assert not {"token_secret", "webhook_secret", "erasure.key"} & {p.name for p in served.data.iterdir()}
    assert second.terminate() == 0, second.tail()
