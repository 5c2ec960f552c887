"""/metrics over the real LocalService: every docs/api.md §11 series, read from the
engine's own ``stats()`` keys (and a broken or odd ``stats()`` never breaks
the scrape)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.core.histogram import Histogram
from gateway.metrics import EngineStatsCollector, Metrics, quantiles
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


@pytest.mark.one_worker("HTTP request series are counted by the gateway process that served the request "
                        "(docs/http.md, 'Several gateways'); the engine series are checked with 2 workers below")
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
    # ingest-to-rank lag and fsync latency: histograms since start (one observation per ingest cycle),
    # and per-process quantiles over the engine's recent samples
    for name in ("flowrank_ingest_to_rank_seconds", "flowrank_log_fsync_seconds"):
        count = get(m, f"{name}_count")
        assert count >= 2 and get(m, f"{name}_bucket", le="+Inf") == count, name
        assert 0 <= get(m, f"{name}_sum") < 5 * count, name
        assert get(m, f"{name}_window_samples") == count, name  # fewer than 4,096 cycles: the window is all
        for q in ("0.5", "0.9", "0.99", "1.0"):
            assert 0 <= get(m, f"{name}_window", quantile=q) < 5, (name, q)
        assert get(m, f"{name}_window", quantile="0.5") <= get(m, f"{name}_window", quantile="1.0")
    # per-shard rows: the six players over the engine's shards
    shard_rows = {k[1][0][1]: v for k, v in m.items() if k[0] == "flowrank_shard_rows"}
    assert set(shard_rows) == {str(i) for i in range(len(seeded.engine.cores))} and sum(shard_rows.values()) == 5
    # queue depth, live subscribers, storage errors, dead letters, snapshot pauses
    assert get(m, "flowrank_ingest_queue_depth") == 0
    assert get(m, "flowrank_live_subscribers") == 0
    assert get(m, "flowrank_ready") == 1  # what /readyz answers
    assert get(m, "flowrank_storage_errors_total") == 0
    assert get(m, "flowrank_dead_letters") == 0
    assert get(m, "flowrank_snapshot_pause_seconds_window_samples") == 0
    assert get(m, "flowrank_snapshot_pause_seconds_count") == 0
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
    assert fams["flowrank_log_fsync_seconds_window"].samples == []  # no samples yet: no quantiles
    assert "flowrank_log_fsync_seconds" not in fams  # no histograms in these stats: none exported
    assert fams["flowrank_engine_n"].samples[0].value == 4
    assert {s.labels["quantile"]: s.value for s in fams["flowrank_engine_extra_seconds"].samples}["1.0"] == 0.3
    assert "flowrank_engine_weird" not in fams


def test_quantiles_nearest_rank():
    assert quantiles([float(i) for i in range(1, 101)], (0.5, 0.99, 1.0)) == [(0.5, 51.0), (0.99, 100.0), (1.0, 100.0)]


# ---- histograms: Prometheus exposition that sums across gateway processes ----------------------


def _engine_stats(fsync: list[float], lag: list[float]) -> dict:
    """What RouterClient.router_stats() reports after these observations (the real Histogram)."""
    hists = {}
    for key, xs in (("fsync_seconds", fsync), ("ingest_to_rank_seconds", lag), ("snapshot_pause_seconds", [])):
        h = Histogram()
        for x in xs:
            h.observe(x)
        hists[key] = h.snapshot()
    return {"fsync_seconds": fsync, "ingest_to_rank_seconds": lag, "histograms": hists}


def _exposition(stats: dict) -> str:
    metrics = Metrics(lambda: stats, lambda: 0)
    metrics.observe("/v1/events", "POST", 200, 0.003)
    return generate_latest(metrics.registry).decode()


def _histograms(text: str) -> dict[str, dict]:
    """name -> {"buckets": [(le, cumulative)], "sum", "count"}, parsed by prometheus_client's text parser,
    checked to be a real histogram family (cumulative buckets ending in +Inf, _count = +Inf bucket)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.type != "histogram":
            continue
        series: dict = {}
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            key = tuple(sorted(labels.items()))
            d = series.setdefault(key, {"buckets": []})
            if s.name.endswith("_bucket"):
                d["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                d["sum"] = s.value
            elif s.name.endswith("_count"):
                d["count"] = s.value
        for key, d in series.items():
            les = [le for le, _ in d["buckets"]]
            counts = [n for _, n in d["buckets"]]
            assert les == sorted(les) and les[-1] == math.inf, (fam.name, les)
            assert counts == sorted(counts), (fam.name, counts)  # cumulative: never decreasing
            assert d["count"] == counts[-1] and "sum" in d, fam.name
            out[fam.name if not key else f"{fam.name}{dict(key)}"] = d
    return out


def test_latency_histograms_are_cumulative_and_sum_across_processes():
    a_fsync, a_lag = [0.0004, 0.002, 0.002, 0.7, 12.0], [0.001, 0.03]
    b_fsync, b_lag = [0.0005, 0.004, 3.0], [0.0002, 0.0002, 0.2, 0.2]
    a = _histograms(_exposition(_engine_stats(a_fsync, a_lag)))
    b = _histograms(_exposition(_engine_stats(b_fsync, b_lag)))
    for name, xs in (("flowrank_log_fsync_seconds", a_fsync + b_fsync),
                     ("flowrank_ingest_to_rank_seconds", a_lag + b_lag)):
        # what Prometheus' sum by (le) does over two scrapes: add bucket by bucket
        summed = [(le, na + nb) for (le, na), (le_b, nb) in zip(a[name]["buckets"], b[name]["buckets"], strict=True)
                  if le == le_b or pytest.fail("bucket bounds differ between processes")]
        # oracle: the same observations counted in one place, bound by bound (le is inclusive)
        assert summed == [(le, sum(1 for x in xs if x <= le)) for le, _ in summed], name
        assert a[name]["count"] + b[name]["count"] == len(xs)
        assert a[name]["sum"] + b[name]["sum"] == pytest.approx(sum(xs))
    assert a["flowrank_snapshot_pause_seconds"]["count"] == 0
    # the gateway's own request histogram is a histogram family too
    assert any(k.startswith("flowrank_http_request_seconds") for k in a)


async def test_histograms_from_the_real_engine_count_every_ingest_cycle(seeded):
    c = seeded.client
    before = _histograms((await c.get("/metrics")).text)["flowrank_log_fsync_seconds"]["count"]
    for i in range(3):
        r = await c.post("/v1/events", json={"events": [
            {"event_id": f"evt-h{i}", "board_id": BOARD, "player_id": f"p-h{i}", "value": 100 + i,
             "achieved_at": "2026-11-01T10:05:00Z"}]}, headers=H("game_server"))
        assert r.status_code == 200
    h = _histograms((await c.get("/metrics")).text)
    assert h["flowrank_log_fsync_seconds"]["count"] == before + 3  # one durable append per batch
    assert h["flowrank_ingest_to_rank_seconds"]["count"] == before + 3


def test_histogram_rejects_bad_bounds_and_counts_le_inclusively():
    with pytest.raises(ValueError):
        Histogram(())
    with pytest.raises(ValueError):
        Histogram((1.0, 1.0))
    h = Histogram((0.1, 1.0))
    for x in (0.1, 1.0, 1.0000001, 0.0):
        h.observe(x)
    assert h.snapshot().cumulative == (2, 3, 4)
