"""``python -m benchmarks capacity`` at a toy size, and its rank oracle against ``sorted()``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.capacity import batches, oracle, synthetic

ROOT = Path(__file__).resolve().parents[2]


def test_oracle_matches_sorted_tuples():
    seed, players, batch = 3, 3001, 700  # a partial last batch
    keys = []
    for start, n in batches(players, batch):
        values, secs = synthetic(seed, start, n)
        keys += [(-int(v), int(t), f"c-{start + i:010d}") for i, (v, t) in enumerate(zip(values, secs))]
    order = sorted(range(players), key=keys.__getitem__)
    rank = {p: r for r, p in enumerate(order, 1)}
    sample = np.random.default_rng(seed).choice(players, 200, replace=False)
    expected, best = oracle(seed, players, batch, sample)
    assert expected.tolist() == [rank[p] for p in sample.tolist()]
    assert best.tolist() == order[:100]


def test_capacity_small_run_checks_ranks(tmp_path):
    out = tmp_path / "capacity.json"
    argv = [sys.executable, "-m", "benchmarks", "capacity", "--max-players", "5000", "--batch", "1000",
            "--sample", "300", "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["players"] == doc["players_filled"] == 5000 and doc["stop_reason"] == "max players"
    assert doc["exact"] is True and doc["rank_mismatches"] == 0 and doc["top100_matches"] is True
    assert doc["rss_end_bytes"] > 0 and doc["fill_players_per_s"] > 0
