"""/metrics over the real LocalService: every docs/api.md §11 series, read from the
engine's own ``stats()`` keys (and a broken or odd ``stats()`` never breaks
the scrape)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import EngineStatsCollector, quantiles
from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(m: dict, name: str, **labels) -> float:
    return m[(name, tuple(sorted(labels.items())))]


async def scrape(c) -> dict:
    r = await c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


async def test_every_api_series_from_the_real_engine(seeded):
    c = seeded.client
    r = await c.post("/v1/events", json={"events": [
        {"event_id": "evt-101", "board_id": BOARD, "player_id": "p-dev", "value": 9700,
         "achieved_at": "2026-11-01T10:05:00Z"},
        {"event_id": "evt-ava-1", "board_id": BOARD, "player_id": "p-ava", "value": 9800,
         "achieved_at": "2026-11-01T09:58:00Z"},
    ]}, headers=H("game_server"))
    assert [x["outcome"] for x in r.json()["results"]] == ["APPLIED_NEW_BEST", "DUPLICATE_IGNORED"]
    assert (await c.get(f"/v1/boards/{BOARD}/top", headers=H("reader"))).status_code == 200
    m = await scrape(c)
    # events by outcome (engine counts, so every ingest path is covered)
    assert get(m, "flowrank_events_total", outcome="APPLIED_FIRST_SCORE") == 5
    assert get(m, "flowrank_events_total", outcome="APPLIED_NEW_BEST") == 1
    assert get(m, "flowrank_events_total", outcome="DUPLICATE_IGNORED") == 1
    # request latency by route template
    assert get(m, "flowrank_http_request_seconds_count", route="/v1/boards/{board_id}/top", method="GET") == 1
    assert get(m, "flowrank_http_request_seconds_count", route="/v1/events", method="POST") == 2
    assert get(m, "flowrank_http_requests_total", route="/v1/events", method="POST", status="200") == 2
    # ingest-to-rank lag and fsync latency: quantiles over the engine's recent samples
    for name in ("flowrank_ingest_to_rank_seconds", "flowrank_log_fsync_seconds"):
        assert get(m, f"{name}_window_samples") >= 2, name
        for q in ("0.5", "0.9", "0.99", "1.0"):
            assert 0 <= get(m, name, quantile=q) < 5, (name, q)
        assert get(m, name, quantile="0.5") <= get(m, name, quantile="1.0")
    # per-shard rows: the six players over the engine's shards
    shard_rows = {k[1][0][1]: v for k, v in m.items() if k[0] == "flowrank_shard_rows"}
    assert set(shard_rows) == {str(i) for i in range(len(seeded.engine.cores))} and sum(shard_rows.values()) == 5
    # queue depth, live subscribers, storage errors, dead letters, snapshot pauses
    assert get(m, "flowrank_ingest_queue_depth") == 0
    assert get(m, "flowrank_live_subscribers") == 0
    assert get(m, "flowrank_storage_errors_total") == 0
    assert get(m, "flowrank_dead_letters") == 0
    assert get(m, "flowrank_snapshot_pause_seconds_window_samples") == 0
    assert get(m, "flowrank_engine_log_end_offset") >= 2  # board + one columnar score record per ingest cycle


async def test_metrics_needs_no_key_and_is_not_rate_limited(seeded):
    for _ in range(3):
        assert (await seeded.client.get("/metrics")).status_code == 200


def test_collector_survives_broken_and_odd_stats():
    def boom():
        raise RuntimeError("stats down")

    assert list(EngineStatsCollector(boom).collect()) == []
    odd = EngineStatsCollector(lambda: {"outcomes": {"APPLIED": "x"}, "shard_rows": {0: None}, "fsync_seconds": [],
                                        "weird": object(), "extra_seconds": [0.1, 0.3], "n": 4})
    fams = {f.name: f for f in odd.collect()}
    assert fams["flowrank_events"].samples == []
    assert fams["flowrank_log_fsync_seconds"].samples == []  # no samples yet: no quantiles
    assert fams["flowrank_engine_n"].samples[0].value == 4
    assert {s.labels["quantile"]: s.value for s in fams["flowrank_engine_extra_seconds"].samples}["1.0"] == 0.3
    assert "flowrank_engine_weird" not in fams


def test_quantiles_nearest_rank():
    assert quantiles([float(i) for i in range(1, 101)], (0.5, 0.99, 1.0)) == [(0.5, 51.0), (0.99, 100.0), (1.0, 100.0)]
