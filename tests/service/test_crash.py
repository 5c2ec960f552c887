"""SIGKILL crash tests through the whole service.

A child process (``crash_child.py``) ingests into a file-backed
LocalService and prints ``ACK`` lines only after ``submit`` returned; it is
killed at a chosen point (or at a random moment). The parent reopens the
data directory and counts anomalies:

* an ACKed event id with no apply-verdict score record in the log, or with
  more than one (every id's first delivery is admitted exactly once; later
  deliveries are DUPLICATE/CONFLICT verdicts);
* an ACKed first delivery whose recovered history entry is missing, repeated
  or carries another outcome than the one acknowledged;
* a ranking that differs from a brute-force oracle over the durable records;
* a recovered state that differs from a reference replay of the whole log
  (a second copy of the directory reopened without its snapshots).
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict

import pytest

from engine.core import records as R
from engine.log import SegmentedFileLog
from engine.core.model import Outcome
from tests.child_process import Child
from tests.engine import oracle
from tests.service.helpers import copy_dir, drop_snapshots, open_service, run, state_of

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_child.py")
NOT_FIRST = {Outcome.DUPLICATE_IGNORED.value, Outcome.REJECTED_EVENT_ID_CONFLICT.value}


def acks(lines):
    """[(event_id, player_id, outcome)] of every complete ACK line."""
    out = []
    for line in lines:
        if line.startswith("ACK "):
            out.extend(tuple(item.split(":")) for item in line[4:].split(" "))
    return out


def check_recovery(data_dir, reference_dir, acked) -> list[str]:
    """Reopen ``data_dir`` and return every anomaly found (empty == exact)."""
    anomalies: list[str] = []
    with SegmentedFileLog.open(os.path.join(data_dir, "log")) as log:
        recs = [r for _o, r in log.read_from(0)]
    specs = {r[1]: R.spec_of(r) for r in recs if r[0] in R.BOARD_KINDS}
    applied: dict[str, list] = defaultdict(list)  # event id -> its logged events with an apply verdict
    for r in recs:
        for ev, verdict in R.logged_events(r):
            if verdict == R.APPLY:
                applied[ev.event_id].append(ev)
    anomalies += [f"{eid} admitted {len(v)} times" for eid, v in applied.items() if len(v) > 1]
    anomalies += [f"acked {eid} not durable" for eid, _p, _o in acked if len(applied.get(eid, ())) != 1]

    async def go():
        svc = await open_service(data_dir, 3)
        try:
            recovered = await state_of(svc, sorted(specs))
            board_of = {eid: v[0].board_id for eid, v in applied.items()}
            for eid, pid, outcome in acked:
                if outcome in NOT_FIRST or eid not in board_of:
                    continue
                hist = recovered[board_of[eid]]["history"].get(pid, [])
                firsts = [h for h in hist if h.event_id == eid and h.outcome not in NOT_FIRST]
                if [h.outcome for h in firsts] != [outcome]:
                    anomalies.append(f"{eid}: acked {outcome}, history {[h.outcome for h in firsts]}")
            for board_id, spec in specs.items():
                events = [ev for r in recs for ev, verdict in R.logged_events(r)
                          if ev.board_id == board_id and verdict == R.APPLY]
                rows = oracle.final_rows(spec.policy, events, max_time=spec.max_plausible_time_ms)
                want = oracle.ranking(spec.policy, rows)
                got = recovered[board_id]["top"].entries
                if [e.player_id for e in got] != want or [e.value for e in got] != [rows[p][0] for p in want]:
                    anomalies.append(f"{board_id}: ranking differs from the oracle")
        finally:
            await svc.close()
        drop_snapshots(reference_dir)
        ref = await open_service(reference_dir, 3)
        try:
            if await state_of(ref, sorted(specs)) != recovered:
                anomalies.append("recovered state differs from a full replay")
        finally:
            await ref.close()

    run(go())
    return anomalies


def crash_at(tmp_path, point, seed, delay=None):
    data = tmp_path / "data"
    child = Child(CHILD, data, point, seed, timeout=20.0)
    try:
        if delay is None:
            child.read_until(lambda line: line == f"AT {point}")
            time.sleep(0.05)  # let other submitters (not blocked there) run on
        else:
            child.read_until(lambda line: line.startswith("ACK "))
            time.sleep(delay)
    finally:
        child.kill()
    acked = acks(child.lines)
    assert acked, "the child acknowledged nothing"
    reference = tmp_path / "reference"
    copy_dir(data, reference)  # the crashed directory, before any reopen touches it
    return acked, check_recovery(str(data), str(reference), acked)


POINTS = ["after_write_before_fsync", "after_fsync_before_apply", "mid_snapshot", "mid_rename", "after_rename",
          "two_in_flight"]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_point_loses_nothing(tmp_path, point):
    acked, anomalies = crash_at(tmp_path, point, seed=POINTS.index(point))
    assert anomalies == [], anomalies[:10]


@pytest.mark.parametrize("seed", range(6))
def test_sigkill_at_random_moment_loses_nothing(tmp_path, seed):
    delay = random.Random(seed).uniform(0.0, 0.4)
    print(f"seed={seed} delay={delay:.3f}")
    acked, anomalies = crash_at(tmp_path, "random", seed, delay)
    assert anomalies == [], anomalies[:10]
