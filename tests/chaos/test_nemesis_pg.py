"""A short run of the nemesis (benchmarks/nemesis.py; the long run of 100+ faults is
``python -m benchmarks nemesis``): two ``flowrank serve --log`` nodes on a PostgreSQL primary with a
synchronous standby, each node in a network namespace of its own (when root may make them here), a
client writing through kill -9 of the active node, SIGSTOP of it past its lease, kill -9 of the
Postgres primary with its standby promoted, and the active cut off the network past its lease; then
the checker: nothing acknowledged lost, nothing twice, every outcome as acknowledged, no version going
backwards on a node, equal checksums on both nodes and on a fresh node rebuilt from the log. No
namespace or veth is left behind."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from benchmarks import netns
from benchmarks.nemesis import KINDS, NEEDS_NETNS, Config, run


def test_a_short_nemesis_run_loses_nothing_and_ends_with_equal_checksums():
    why = netns.unavailable()
    kinds = KINDS if why is None else tuple(k for k in KINDS if k not in NEEDS_NETNS)
    root = Path(tempfile.mkdtemp(prefix="fr-nem-", dir="/tmp"))
    try:
        # faults come in rounds of every kind once: two rounds
        report = asyncio.run(run(Config(faults=len(kinds) * 2, seconds=240, seed=3), root, say=lambda *_: None))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert report.network == ("netns" if why is None else f"loopback: {why}")
    assert sum(report.faults.values()) == len(kinds) * 2
    assert set(report.faults) == set(kinds), report.faults  # every kind happened
    if why is None:
        assert len(report.stepdown_s) == report.faults["partition_active"]  # each cut-off active stepped down
    assert report.events_acked > 0
    assert report.lost == [] and report.duplicated == [] and report.wrong_outcome == []
    assert report.never_sent == [] and report.first_attempt_duplicates == []
    assert report.version_regressions == []
    assert len(report.checksums) == 3 and len(set(report.checksums.values())) == 1, report.checksums
    assert report.ok
    assert netns.leftovers() == []  # every namespace and veth of this process removed
