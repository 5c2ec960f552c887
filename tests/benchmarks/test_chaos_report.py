"""benchmarks/chaos.py's output: recovery statistics per kind of kill and the plot."""

from __future__ import annotations

import json

from benchmarks.chaos import plot, summary


def kills(*spec):
    return [{"n": i + 1, "kind": kind, "at_s": float(i), "recovery_s": r, "acked_before": 10 * i, "load1": 1.0}
            for i, (kind, r) in enumerate(spec)]


def test_summary_is_per_kind_with_nearest_rank_p99():
    ks = kills(*[("server", float(s)) for s in range(1, 101)], ("shard", 0.5), ("shard", 0.25))
    got = summary(ks)
    assert got["server"] == {"kills": 100, "p50_s": 50.5, "p99_s": 99.0, "max_s": 100.0}
    assert got["shard"] == {"kills": 2, "p50_s": 0.375, "p99_s": 0.5, "max_s": 0.5}


def test_plot_writes_a_png(tmp_path):
    result = {"params": {"engine": "ray"}, "kills": kills(("server", 2.0), ("shard", 0.3)),
              "report": {"kill_count": 2, "events_checked": 40, "anomalies": []}}
    plot(result, tmp_path / "chaos.png")
    assert (tmp_path / "chaos.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(result)
