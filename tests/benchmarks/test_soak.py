"""benchmarks/soak.py: its analysis (drift, slopes, windowed histogram
quantiles) and one short run against a real server."""

from __future__ import annotations

import asyncio
import math

import pytest

from benchmarks.soak import analyse, bucket_quantile, drift, fsync_p99, fsync_reading, p, slope_per_minute, soak


def test_quantile_drift_and_slope():
    assert p([], 0.99) is None and p([3, 1, 2], 0.5) == 2
    assert drift([100, 100, 100, 104, 105, 105]) == pytest.approx(0.05)
    assert drift([1, 2, 3]) is None  # too few samples
    ts = [0, 60, 120, 180]
    assert slope_per_minute(ts, [1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.0)
    assert slope_per_minute(ts, [5.0, None, 5.0, 5.0]) == pytest.approx(0.0)
    assert slope_per_minute(ts, [None, None, 1.0, 2.0]) is None


def test_bucket_quantile_is_windowed_and_interpolated():
    before = {0.001: 10.0, 0.01: 10.0, 0.1: 10.0, math.inf: 10.0}
    after = {0.001: 10.0, 0.01: 60.0, 0.1: 110.0, math.inf: 110.0}  # 100 new: 50 in (1, 10] ms, 50 in (10, 100]
    assert bucket_quantile(before, after, 0.5) == pytest.approx(0.01)
    assert bucket_quantile(before, after, 0.99) == pytest.approx(0.01 + 0.09 * 49 / 50)
    assert bucket_quantile(after, after, 0.99) is None  # nothing observed in the window


def test_fsync_reading_takes_histograms_or_quantile_gauges():
    hist = ('# TYPE flowrank_log_fsync_seconds histogram\n'
            'flowrank_log_fsync_seconds_bucket{le="0.001"} 1.0\nflowrank_log_fsync_seconds_bucket{le="0.01"} 4.0\n'
            'flowrank_log_fsync_seconds_bucket{le="+Inf"} 4.0\nflowrank_log_fsync_seconds_sum 0.01\n'
            'flowrank_log_fsync_seconds_count 4.0\n')
    r = fsync_reading(hist)
    assert r["buckets"][0.01] == 4.0 and fsync_p99(None, r) == pytest.approx(0.001 + 0.009 * (3.96 - 1) / 3)
    gauge = '# TYPE flowrank_log_fsync_seconds gauge\nflowrank_log_fsync_seconds{quantile="0.99"} 0.004\n'
    assert fsync_p99(None, fsync_reading(gauge)) == 0.004


def test_analysis_ignores_the_warmup():
    samples = [{"t": t, "rss_total": 100 + (50 if t < 30 else 0), "rss_anon_total": 80, "read_p99_ms": 5.0,
                "lag_ms": 2.0, "fsync_p99_ms": 1.0, "events_per_s": 1000.0} for t in range(0, 120, 5)]
    got = analyse(samples, warmup_s=30)
    assert got["samples_after_warmup"] == 18 and got["rss_drift"] == 0.0
    assert got["read_p99_slope_ms_per_min"] == pytest.approx(0.0)
    assert got["rss_drift_windows"] == 0.0


def test_windowed_drift_sees_growth_not_a_sawtooth():
    """A buffer that fills and empties every minute moves the 3-sample drift by
    its size; the windowed drift stays near zero, and still sees a real leak."""
    ts = range(0, 1800, 5)
    saw = [{"t": t, "rss_total": 1000 + (t % 60) * 2, "rss_anon_total": 1000, "read_p99_ms": 5.0,
            "lag_ms": 2.0, "fsync_p99_ms": 1.0, "events_per_s": 1.0} for t in ts]
    got = analyse(saw, warmup_s=0)
    assert abs(got["rss_drift_windows"]) < 0.02 and got["rss_drift"] > 0.05
    leak = [dict(s, rss_total=1000 + s["t"] / 10) for s in saw]
    assert analyse(leak, warmup_s=0)["rss_drift_windows"] > 0.1


def test_a_short_soak_against_a_local_server(tmp_path):
    res = asyncio.run(soak(tmp_path, minutes=0.15, engine="local", players=500, batch=50, writers=2, readers=1,
                           read_rate=20, subscribers=1, sample_s=2.0, calibrate_s=2.0, fraction=0.5,
                           warmup_fraction=0.2, seed=3, log=print))
    assert res["failure"] is None and res["capacity_events_per_s"] > 0 and len(res["samples"]) >= 3
    s = res["samples"][-1]
    assert s["rss_total"] > 0 and s["processes"] and s["reads"] > 0 and s["live_messages"] > 0
    assert all(x["lag_ms"] is not None for x in res["samples"])
    assert all(x["write_errors"] == 0 and x["read_errors"] == 0 for x in res["samples"])


def test_a_short_webhook_soak_reports_outbox_bytes_bounded_by_the_backlog(tmp_path):
    """``soak --webhooks``: prize boards finalized while the load runs; every sample has the outbox's
    bytes, and at the end (the backlog delivered) they are a small part of what was sent."""
    res = asyncio.run(soak(tmp_path, minutes=0.25, engine="local", players=300, batch=50, writers=1, readers=1,
                           read_rate=10, subscribers=0, sample_s=2.0, calibrate_s=1.0, fraction=0.3,
                           warmup_fraction=0.2, seed=3, webhooks=True, prize_board_s=1.0, awards=300,
                           webhook_fail_ratio=0.2, log=print))
    assert res["failure"] is None
    hooks = res["analysis"]["webhooks"]
    assert all(s["outbox_bytes"] is not None for s in res["samples"])
    assert hooks["delivered_last"] >= 600  # two boards' awards at least, each body about 150 bytes
    sent_bytes = hooks["delivered_last"] * 150
    pending = hooks["pending_last"] or 0
    # bounded by the backlog (a message is under 400 bytes here) plus the done file and one segment's head
    assert hooks["outbox_bytes_last"] <= pending * 400 + 16 * 2**10 or pending > 0, hooks
    assert pending > 0 or hooks["outbox_bytes_last"] < sent_bytes / 10, hooks


def test_a_server_that_dies_ends_the_soak_with_that_finding(tmp_path, monkeypatch):
    from tests.chaos import harness

    started = []
    real_start = harness.Server.start

    def start(self, *a, **kw):
        started.append(self)
        return real_start(self, *a, **kw)

    monkeypatch.setattr(harness.Server, "start", start)

    async def main():
        run = asyncio.create_task(soak(tmp_path, minutes=1.0, engine="local", players=100, batch=10, writers=1,
                                       readers=1, read_rate=10, subscribers=0, sample_s=1.0, calibrate_s=1.0,
                                       fraction=0.5, warmup_fraction=0.2, seed=3, log=print))
        while not started or started[0].proc is None:
            await asyncio.sleep(0.1)
        await asyncio.sleep(3.0)
        started[0].proc.kill()
        return await asyncio.wait_for(run, 60)

    res = asyncio.run(main())
    assert res["failure"] is not None and res["failure"].startswith("the server exited (code -9)")
