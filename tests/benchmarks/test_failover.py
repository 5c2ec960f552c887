"""benchmarks/failover.py (``python -m benchmarks failover``): a tiny run against real processes.

The local engine, one partition, a short wrk write run per side, 2 takeovers with a 1.5 s lease and
one Postgres promotion. It checks the report's shape and that its values are plausible (positive,
finite, in range); never how fast anything is (performance is not asserted in tests). Skipped
without wrk when it cannot be installed (not root); without redis-server the peer is left out.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.failover import pct, summarize
from benchmarks.processes import processes_with_marker

ROOT = Path(__file__).resolve().parents[2]


def test_pct_is_nearest_rank():
    assert pct([], 0.99) is None
    assert pct([5.0], 0.99) == 5.0
    assert pct([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert pct([float(i) for i in range(1, 101)], 0.5) == 50.0


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_a_tiny_failover_run_reports_every_part(tmp_path):
    if shutil.which("wrk") is None and os.geteuid() != 0:
        pytest.skip("wrk is not installed and cannot be (not root)")
    peer = shutil.which("redis-server") is not None
    out = tmp_path / "report"
    marker = f"fr-failover-test-{os.getpid()}"
    argv = [sys.executable, "-m", "benchmarks", "failover", "--engine", "local", "--size", "300",
            "--duration", "2", "--repeat", "1", "--warmup", "0", "--partitions", "1", "--takeovers", "2",
            "--load-s", "1", "--lease-s", "1.5", "--promotions", "1", "--posters", "2", "--json", str(out)]
    if not peer:
        argv.append("--no-peer")
    env = dict(os.environ, FLOWRANK_OWNER=marker)  # whatever the run starts carries it: none may be left
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Summary (targets of issue 40)" in done.stdout
    assert processes_with_marker(marker) == [], "the run left processes behind"

    doc = json.loads((out / "failover.json").read_text())
    assert doc["command"].startswith("python -m benchmarks failover")
    assert len(doc["load_before"]) == 3 and len(doc["load_after"]) == 3 and doc["machine"]["cores_logical"]

    writes = doc["writes"]
    for kind in ("file", "pg"):
        row = writes[kind]["1"]
        assert _positive(row["rps"]) and row["events_acked"] > 0 and row["non2xx"] == 0, row
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert _positive(writes["resources"][kind]["node"]["rss_mib_max"])
    assert 10 < writes["wal"]["bytes_per_event"] < 100_000  # WAL bytes per event: some, not absurd
    assert writes["resources"]["pg"]["postgres primary"]["cpu_cores"] >= 0
    if peer:
        assert _positive(writes["peer"]["rps"]) and writes["peer"]["non2xx"] == 0
    else:
        assert writes["peer"] is None

    [series] = doc["takeovers"]
    assert series["lease_s"] == 1.5
    lag = series["lag"]
    assert lag["ack_to_standby_ms"]["probes"] > 0 and lag["ack_to_standby_ms"]["p99"] >= lag["ack_to_standby_ms"]["p50"] > 0
    assert lag["cluster_lag_records"]["samples"] > 0 and lag["cluster_lag_records"]["p99"] >= 0
    assert _positive(lag["wal"]["bytes_per_event"])
    assert set(lag["resources"]) == {"active node", "standby node", "postgres primary", "postgres standby"}
    assert all(_positive(r["rss_mib_max"]) for r in lag["resources"].values())
    rounds = series["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    for r in rounds:
        assert 0 < r["takeover_s"] < 60, r  # a takeover happened: the other node acknowledged writes
        # a new epoch; more than one when a short lease on a busy machine let the nodes trade it again
        assert r["epoch_after"] >= r["epoch_before"] + 1 and r["role_after"] in ("active", "standby"), r
        assert r["standby_reads_through"] > 0
    assert rounds[1]["epoch_before"] >= rounds[0]["epoch_after"]
    s = series["summary"]
    assert s["failed"] == 0 and s["takeover_worst_s"] >= s["takeover_median_s"] >= s["takeover_best_s"] > 0

    [promotion] = doc["promotions"]["rounds"]
    assert promotion["promotion_to_first_write_s"] is not None and promotion["promotion_to_first_write_s"] >= 0
    assert promotion["kill_to_first_write_s"] > 0 and _positive(promotion["promote_s"])

    targets = doc["targets"]
    assert {"takeover_worst_s (lease 3 s)", "standby_lag_p99_ms", "promotion_to_first_write_s",
            "writes_pg_over_file@1"} <= set(targets)
    assert all(t["met"] in (True, False) for t in targets.values())


def test_summary_of_a_partial_report_says_not_measured():
    class Args:
        partitions = [1]

    rows = summarize({"writes": {"file": {1: {"rps": 10.0}}, "pg": {1: {"rps": 7.0}}, "peer": None}}, Args())
    assert rows == {"writes_pg_over_file@1": {"value": 0.7, "target": ">= 0.6", "met": True}}
