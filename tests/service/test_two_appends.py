"""Two appends in flight through the whole service (issue 29 item 4): the sequencer
decides a cycle while the one before it is being made durable, and the log
(``at``, engine.log.port) never keeps the second if it lost the first.

* concurrent writers over a slow fsync: appends overlap, every answer is in
  log order, and a replay of the log alone equals the live state;
* the first of two appends in flight fails: both submissions answer
  StorageUnavailable, neither is applied nor logged, and the same events are
  then judged afresh (1 and 3 partitions).
"""

from __future__ import annotations

import asyncio
import errno
import random
import threading
import time

import pytest

from engine.core.errors import StorageUnavailable
from engine.core.model import ScoreEvent
from tests.service.helpers import APPLIED, SPECS, crash, drop_snapshots, open_service, run, state_of, track_appends


class _SlowFsync:
    """A log fault hook: every fsync of the event log takes ``seconds`` longer."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, op: str, path: str) -> None:
        if op == "fsync" and path.endswith(".log"):
            time.sleep(self.seconds)


class _FailNextWrite:
    """A log fault hook: once armed, the next write of the event log waits until
    ``release`` is set, then fails (EIO)."""

    def __init__(self):
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, op: str, path: str) -> None:
        if self.armed and op == "write" and path.endswith(".log"):
            self.armed = False
            self.entered.set()
            self.release.wait(10)
            raise OSError(errno.EIO, "injected write failure")


def test_concurrent_writers_overlap_appends_and_a_replay_equals_live(tmp_path):
    async def go():
        svc = await open_service(tmp_path, 3, fault_hook=_SlowFsync(0.01))
        for spec in SPECS:
            await svc.create_board(spec)
        seen = track_appends(svc)
        rng = random.Random(4)
        sent: list[ScoreEvent] = []

        def batch(w: int, k: int) -> list[ScoreEvent]:
            out = []
            for i in range(rng.randrange(1, 30)):
                if sent and rng.random() < 0.1:  # a redelivery, maybe in a cycle after its first one
                    out.append(rng.choice(sent))
                    continue
                spec = rng.choice(SPECS)
                t = rng.randrange(6)
                out.append(ScoreEvent(spec.board_id, f"w{w}-{k}-{i}", f"p{rng.randrange(12)}", rng.randrange(1, 9),
                                      t, t))
            sent.extend(out)
            return out

        versions: dict[str, list[int]] = {}  # per board: the version each applied change was answered with

        async def writer(w: int) -> None:
            pause = random.Random(w)
            for k in range(12):
                await asyncio.sleep(pause.uniform(0, 0.015))  # writers out of step: cycles overlap
                events = batch(w, k)
                for ev, r in zip(events, await svc.submit(events)):
                    if r.outcome in APPLIED:
                        versions.setdefault(ev.board_id, []).append(r.version)

        await asyncio.gather(*(writer(w) for w in range(6)))
        finals = {spec.board_id: (await svc.board(spec.board_id)).version for spec in SPECS}
        live = await state_of(svc)
        await crash(svc)
        drop_snapshots(tmp_path)
        again = await open_service(tmp_path, 3)
        try:
            return seen[1], versions, finals, live, await state_of(again)
        finally:
            await again.close()

    most, versions, finals, live, replayed = run(go())
    assert most >= 2, "two appends were in flight at once"
    for board, got in versions.items():  # each change its own version, the last one the board's
        assert len(set(got)) == len(got) and max(got) <= finals[board], board
    assert replayed == live


@pytest.mark.parametrize("board", ["g:best1:s1", "g:best:s1"], ids=["1 partition", "3 partitions"])
def test_the_first_of_two_appends_in_flight_fails_and_neither_is_applied(tmp_path, board):
    hook = _FailNextWrite()

    async def go():
        svc = await open_service(tmp_path, 3, fault_hook=hook)
        for spec in SPECS:
            await svc.create_board(spec)
        await svc.submit([ScoreEvent(board, f"seed{i}", f"p{i}", 5 + i, 1, 1) for i in range(6)])
        before = await state_of(svc)
        end = svc.stats()["log_end_offset"]
        seen = track_appends(svc)

        first = [ScoreEvent(board, f"a{i}", f"p{i}", 50 + i, 2, 2) for i in range(8)]
        second = [ScoreEvent(board, f"b{i}", f"q{i}", 70 + i, 3, 3) for i in range(5)] + first[:2]
        hook.armed = True
        a = asyncio.ensure_future(svc.submit(first))
        while not hook.entered.is_set():  # the log writer is inside the first append's write
            await asyncio.sleep(0.002)
        b = asyncio.ensure_future(svc.submit(second))
        while seen[0] < 2:  # the second append is issued (decided over the first) and on its way to the log
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.05)
        hook.release.set()
        for fut in (a, b):
            with pytest.raises(StorageUnavailable):
                await fut
        after = await state_of(svc)
        end_after = svc.stats()["log_end_offset"]

        got_a, got_b = await svc.submit(first), await svc.submit(second)  # the fault cleared
        live = await state_of(svc)
        await crash(svc)
        drop_snapshots(tmp_path)
        again = await open_service(tmp_path, 3)
        try:
            return before, after, end, end_after, got_a, got_b, live, await state_of(again)
        finally:
            await again.close()

    before, after, end, end_after, got_a, got_b, live, replayed = run(go())
    assert after == before and end_after == end  # neither applied nor logged
    assert all(r.outcome in APPLIED for r in got_a), got_a  # nothing of them was remembered
    assert all(r.outcome in APPLIED for r in got_b[:5]) and [r.outcome.value for r in got_b[5:]] == [
        "DUPLICATE_IGNORED"] * 2
    assert replayed == live
