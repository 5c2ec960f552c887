"""A short run of the nemesis (benchmarks/nemesis.py; the long run of 100+ faults is
``python -m benchmarks nemesis``): two ``flowrank serve --log`` nodes on a PostgreSQL primary with a
synchronous standby, a client writing through kill -9 of the active node, SIGSTOP of it past its
lease, and kill -9 of the Postgres primary with its standby promoted; then the checker: nothing
acknowledged lost, nothing twice, every outcome as acknowledged, no version going backwards on a
node, equal checksums on both nodes and on a fresh node rebuilt from the log."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from benchmarks.nemesis import KINDS, Config, run


def test_a_short_nemesis_run_loses_nothing_and_ends_with_equal_checksums():
    root = Path(tempfile.mkdtemp(prefix="fr-nem-", dir="/tmp"))
    try:
        report = asyncio.run(run(Config(faults=len(KINDS) * 2, seconds=240, kinds=KINDS, seed=3), root,
                                 say=lambda *_: None))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert sum(report.faults.values()) == len(KINDS) * 2
    assert set(report.faults) == set(KINDS), report.faults  # every kind happened
    assert report.events_acked > 0
    assert report.lost == [] and report.duplicated == [] and report.wrong_outcome == []
    assert report.never_sent == [] and report.first_attempt_duplicates == []
    assert report.version_regressions == []
    assert len(report.checksums) == 3 and len(set(report.checksums.values())) == 1, report.checksums
    assert report.ok
