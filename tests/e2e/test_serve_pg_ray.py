"""``flowrank serve --log postgresql://…`` with the default engine (embedded Ray: the writer in the
engine's process, the log actor's ``LogServer`` reading the database for the shard actors' recovery):
the machine is lost mid-ingest (SIGKILL of the server's process group, its data directory thrown away)
and a node on a fresh data directory against the same log serves every acknowledged event
(tests/e2e/test_serve_pg.py covers ``--engine local``)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.e2e.test_serve_kill import H, Ingest, check_intact, create_board, ingest_then

LEASE_S = "1.5"


@pytest.mark.slow
def test_on_ray_a_lost_machine_loses_no_acknowledged_event_a_new_node_serves_them_all(served_factory, pg_url,
                                                                                     tmp_path):
    first = served_factory("ray", extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "a")
    first.start()
    create_board(first.url)
    ingest = Ingest(first.url, start=0, batches=400)
    asyncio.run(ingest_then(first, ingest, first.kill, after_batches=12))
    assert ingest.acked_batches >= 12 and len(ingest.sent) > len(ingest.acked)  # killed with batches in flight
    assert first.strays() == [], "a Ray process of the killed node outlived it"
    second = served_factory("ray", extra=("--log", pg_url, "--lease-s", LEASE_S), tmp=tmp_path / "b")
    killed_at = time.monotonic()
    second.start()  # another machine: an empty data directory, its own Ray, the same log
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
