"""Multi-node on one machine: a node hosting a shard actor is removed mid-ingest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.processes import owned_process
from engine.core import records as R
from engine.log import SegmentedFileLog
from engine.core.model import Policy
from tests.engine import oracle

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_node_loss_mid_ingest_loses_no_acknowledged_event(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="fr-mn-", dir="/tmp")
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONPATH=str(Path(__file__).resolve().parents[2]),
               RAY_TMPDIR=ray_tmp)
    # Owned (benchmarks.processes): the child's Ray cluster (several raylets, GCS, workers)
    # is stopped with it even when it hangs past the timeout or this run is interrupted.
    try:
        with owned_process([sys.executable, "-m", "tests.cluster.multinode_child", str(tmp_path / "data")],
                           env=env, cwd=env["PYTHONPATH"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True) as child:
            try:
                stdout, stderr = child.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                stdout, stderr = "", "multinode_child did not finish in 300 s"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, stdout[-3000:] + stderr[-5000:]
    out = json.loads(line[len("RESULT "):])
    assert out["removed_node"] and out["victim_hosted"] >= 1
    assert out["pids_after"] != out["pids_before"], "a shard actor restarted on another node"
    with SegmentedFileLog.open(tmp_path / "data" / "log") as event_log:
        scores = [ev for _, rec in event_log.read_from(0) for ev, _ in R.logged_events(rec)]
    ids = [e.event_id for e in scores]
    acked = out["acked"]
    assert len(acked) == 3000, "every batch was eventually acknowledged"
    assert set(acked) <= set(ids) and len(ids) == len(set(ids)), "acked present, nothing appended twice"
    rows = oracle.final_rows(Policy.BEST_SCORE, scores)
    assert [t[0] for t in out["top"]] == oracle.ranking(Policy.BEST_SCORE, rows)
    assert [t[1] for t in out["top"]] == [rows[p][0] for p in oracle.ranking(Policy.BEST_SCORE, rows)]
