"""``python -m benchmarks core`` end to end at a toy size: every JSON key is there
and is a number (no timing assertions: this is a smoke test, not a benchmark)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from benchmarks.core_bench import KEYS, TARGETS

ROOT = Path(__file__).resolve().parents[2]
# RSS readings of a 2,000-player board move in whole pages and allocator arenas:
# their growth can be zero (or below) without anything being wrong.
RSS_KEYS = {"rss_bytes_per_player", "rss_growth_10x_events"}


def test_core_small_run_writes_every_key(tmp_path):
    out = tmp_path / "core.json"
    argv = [sys.executable, "-m", "benchmarks", "core", "--players", "2000", "--events", "5000", "--repeat", "1",
            "--reads", "2000", "--growth-factor", "2", "--data-dir", str(tmp_path), "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    for key in KEYS:
        value = doc[key]
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
        if key not in RSS_KEYS:
            assert value > 0, (key, value)
        assert set(doc["targets"][key]) == {"target", "ratio_or_value", "met"}
    for t in TARGETS:
        assert isinstance(doc["targets"][t.key]["met"], bool), t.key
    growth = doc["rss_growth"]
    assert growth["rss_after_phase1"] > 0 and growth["rss_after_phase2"] > 0
    assert growth["dedup_ids_after"] <= growth["dedup_retention"]
    assert doc["replay"]["matches_board"] is True
    assert "warm-up" in proc.stdout and "load" in proc.stdout
    assert list(tmp_path.iterdir()) == [out]  # the replay's log directory is gone
