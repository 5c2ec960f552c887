"""Series boards and fan-out through the router (docs/api.md §15): events
sent to a series land on the instance of their ``achieved_at``'s window,
checked against a reference built on the standard library's zoneinfo;
instances are created on demand at that log position (frozen when their
window has ended); too far ahead is 422 with nothing logged; an event for
several boards is one G record, deduplicated per board; replay reproduces
every board. A fake wall clock drives decide and the season timer."""

from __future__ import annotations

import asyncio
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from engine.core import records as R
from engine.core.columns import ScoreBatch
from engine.core.errors import BoardExists, ValidationFailed
from engine.core.model import BoardSpec, BoardState, Outcome, Policy, ScoreEvent
from engine.runtime.local import LocalService
from engine.core.windows import Recurrence
from tests.service.helpers import crash, state_of

HOUR = 3_600_000
DAY = 24 * HOUR


class FakeClock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


def run(coro):
    return asyncio.run(coro)


def ms(y, mo, d, h=0, mi=0) -> int:
    return int(datetime(y, mo, d, h, mi, tzinfo=timezone.utc).timestamp() * 1000)


async def open_svc(clock: FakeClock, data_dir=None, n_shards: int = 3) -> LocalService:
    return await LocalService.open(data_dir=None if data_dir is None else str(data_dir), n_shards=n_shards,
                                   wall_clock=clock, snapshot_every_events=10**9, snapshot_every_seconds=10**9)


# ------------------------------------------------------------------ the reference


def _nominal(every: str, d: date) -> bool:
    return every == "day" or (every == "week" and d.weekday() == 0) or (every == "month" and d.day == 1)


def ref_start(every: str, tz_name: str, at_minutes: int, d: date) -> int:
    """The instant of local ``at`` on ``d``: fold=0 (the earlier of a repeated time; a skipped time keeps the
    offset before the gap, so it moves forward by the gap)."""
    tz = ZoneInfo(tz_name)
    local = datetime(d.year, d.month, d.day, at_minutes // 60, at_minutes % 60, tzinfo=tz)
    return int(local.timestamp() * 1000)


def ref_window_date(every: str, tz_name: str, at_minutes: int, t_ms: int) -> int:
    """YYYYMMDD of the latest nominal start at or before ``t_ms``, by walking back day by day."""
    d = datetime.fromtimestamp(t_ms / 1000, ZoneInfo(tz_name)).date() + timedelta(days=1)
    while not (_nominal(every, d) and ref_start(every, tz_name, at_minutes, d) <= t_ms):
        d -= timedelta(days=1)
    return d.year * 10_000 + d.month * 100 + d.day


def ref_window_end(every: str, tz_name: str, at_minutes: int, t_ms: int) -> int:
    d = datetime.fromtimestamp(t_ms / 1000, ZoneInfo(tz_name)).date()
    while not (_nominal(every, d) and ref_start(every, tz_name, at_minutes, d) > t_ms):
        d += timedelta(days=1)
    return ref_start(every, tz_name, at_minutes, d)


def instance(series: str, yyyymmdd: int) -> str:
    g, m, s, scope = series.split(":")
    return f"{g}:{m}:{s}.{yyyymmdd:08d}:{scope}"


# (every, zone, at, now): "now" sits just after a DST change, so the windows before it cross one
CASES = [
    ("day", "Europe/Berlin", "02:30", ms(2026, 3, 30, 12)),  # 02:30 does not exist on 2026-03-29
    ("day", "America/New_York", "01:30", ms(2026, 11, 2, 12)),  # 01:30 happens twice on 2026-11-01
    ("week", "Europe/Berlin", "02:30", ms(2026, 11, 3, 12)),
    ("week", "America/New_York", "02:30", ms(2026, 3, 10, 12)),
    ("month", "Europe/Berlin", "00:00", ms(2026, 11, 15)),
    ("month", "America/New_York", "23:30", ms(2026, 4, 15)),
]


async def _route_case(every, tz, at, now, shards):
    rec = Recurrence.parse({"every": every, "timezone": tz, "at": at, "keep": 1000})
    series = f"g:m:{every}ly:{tz.split('/')[1].lower()}"
    clock = FakeClock(now)
    svc = await open_svc(clock)
    try:
        await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=shards, recurrence=rec,
                                         finalize_after_s=0))
        span = {"day": 6 * DAY, "week": 5 * 7 * DAY, "month": 200 * DAY}[every]
        horizon = ref_window_end(every, tz, rec.at_minutes, ref_window_end(every, tz, rec.at_minutes, now))
        times = np.arange(now - span, horizon, span // 300 + 7_919, dtype=np.int64)  # odd step: every minute offset
        events = [ScoreEvent(series, f"e{i}", f"p{i}", 10 + i, int(t), int(t)) for i, t in enumerate(times)]
        out = []
        for start in range(0, len(events), 97):  # several batches: later ones find instances already there
            chunk = events[start:start + 97]
            res = await svc.submit_columns(ScoreBatch.from_events(chunk))
            out.extend(zip(res.board_ids, [R.outcome_of(c) for c in res.codes.tolist()], res.versions.tolist()))
        return events, out, svc, series, rec
    except BaseException:
        await svc.close()
        raise


@pytest.mark.parametrize("every,tz,at,now", CASES)
def test_routing_equals_the_zoneinfo_reference_at_1_and_3_partitions(every, tz, at, now):
    async def go():
        answers = []
        for shards in (1, 3):
            events, out, svc, series, rec = await _route_case(every, tz, at, now, shards)
            try:
                expect_boards = [instance(series, ref_window_date(every, tz, rec.at_minutes, e.achieved_at))
                                 for e in events]
                assert [b for b, _, _ in out] == expect_boards
                ended = [ref_window_end(every, tz, rec.at_minutes, e.achieved_at) <= now for e in events]
                assert [o for _, o, _ in out] == [Outcome.HELD_FOR_CORRECTION if late else Outcome.APPLIED_FIRST_SCORE
                                                  for late in ended]
                assert len(set(expect_boards)) >= 3  # the span really crossed windows (and a DST change)
                for board in set(expect_boards):  # every instance: the series' settings, its window, its close
                    spec = svc.router.boards[board].spec
                    yyyymmdd = int(board.split(":")[2].rsplit(".", 1)[1])
                    d = date(yyyymmdd // 10_000, yyyymmdd // 100 % 100, yyyymmdd % 100)
                    start = ref_start(every, tz, rec.at_minutes, d)
                    assert spec.window == (start, ref_window_end(every, tz, rec.at_minutes, start)), board
                    assert (spec.series, spec.closes_at, spec.shards) == (series, spec.window[1], shards)
                    state = svc.router.boards[board].admission.state
                    assert state is (BoardState.FINALIZED if spec.window[1] <= now else BoardState.OPEN), board
                answers.append(out)
            finally:
                await svc.close()
        assert answers[0] == answers[1]  # k partitions answer exactly as one does (versions too)

    run(go())


def test_an_instance_is_created_at_the_log_position_of_its_first_event_and_frozen_if_its_window_ended():
    async def go():
        now = ms(2026, 12, 6, 12)
        clock = FakeClock(now)
        svc = await open_svc(clock)
        series = "g:m:daily:x"
        try:
            await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=2, finalize_after_s=3 * DAY // 1000,
                                             recurrence=Recurrence("day")))
            current = "g:m:daily.20261206:x"
            assert set(svc.router.boards) == {series, current}  # the series and its current window's instance
            before = len(list(svc.event_log.read_from(0)))
            res = await svc.submit([ScoreEvent(series, "late", "p1", 5, ms(2026, 12, 1, 3), ms(2026, 12, 1, 3)),
                                    ScoreEvent(series, "older", "p1", 5, ms(2026, 11, 20, 3), ms(2026, 11, 20, 3)),
                                    ScoreEvent(series, "now", "p1", 5, now, now)])
            assert [r.outcome for r in res] == [Outcome.HELD_FOR_CORRECTION] * 2 + [Outcome.APPLIED_FIRST_SCORE]
            tail = [rec for _, rec in svc.event_log.read_from(0)][before:]
            # both windows ended more than finalize_after_s ago: FROZEN and FINALIZED at once. The W record,
            # its moves, then the scores: all in the one append, each instance before its events
            kinds = [(r[0], r[1]) for r in tail]
            assert kinds[:3] == [("W", "g:m:daily.20261201:x"), ("T", "g:m:daily.20261201:x"),
                                 ("T", "g:m:daily.20261201:x")]
            assert [r[2] for r in tail[1:3]] == ["FROZEN", "FINALIZED"]
            assert kinds[3:6] == [("W", "g:m:daily.20261120:x"), ("T", "g:m:daily.20261120:x"),
                                  ("T", "g:m:daily.20261120:x")]
            assert {r[0] for r in tail[6:]} == {"C"}  # plain batch: plain score records, no group
            clock.now = ms(2026, 12, 5, 5)  # the 12-04 window ended 5 h ago: FROZEN, not FINALIZED yet
            res = await svc.submit([ScoreEvent(series, "d4", "p2", 5, ms(2026, 12, 4, 1), ms(2026, 12, 4, 1))])
            assert res[0].outcome is Outcome.HELD_FOR_CORRECTION
            assert svc.router.boards["g:m:daily.20261204:x"].admission.state is BoardState.FROZEN  # not yet final
        finally:
            await svc.close()

    run(go())


def test_too_far_ahead_is_422_naming_the_request_event_and_nothing_is_logged():
    async def go():
        now = ms(2026, 12, 6, 12)
        svc = await open_svc(FakeClock(now))
        series = "g:m:daily:x"
        try:
            await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=3, recurrence=Recurrence("day")))
            await svc.create_board(BoardSpec("g:m:plain:x", Policy.BEST_SCORE, shards=3))
            before = len(list(svc.event_log.read_from(0)))
            ok = ScoreEvent(series, "ok", "p", 1, ms(2026, 12, 7, 23, 59), 0)  # the next window: fine
            far = ScoreEvent(series, "far", "p", 1, ms(2026, 12, 8), 0)  # the window after next: too far
            plain = ScoreEvent("g:m:plain:x", "x", "p", 1, ms(2030, 1, 1), 0)
            with pytest.raises(ValidationFailed) as got:
                await svc.submit([plain, ok, far, far._replace(event_id="far2")])
            assert got.value.field == "events[2].achieved_at"
            # a fan-out batch: the index is the request's, not the expanded row's
            batch = ScoreBatch.from_events([plain, plain._replace(board_id=series, achieved_at=now),
                                            ok, far])
            batch = ScoreBatch(batch.event_ids, batch.boards, batch.positions, np.array([0, 0, 1, 2]))
            with pytest.raises(ValidationFailed) as got:
                await svc.submit_columns(batch)
            assert got.value.field == "events[2].achieved_at"
            assert len(list(svc.event_log.read_from(0))) == before
            assert set(svc.router.boards) == {series, "g:m:daily.20261206:x", "g:m:plain:x"}
            res = await svc.submit([ok])
            assert res[0].outcome is Outcome.APPLIED_FIRST_SCORE
            assert "g:m:daily.20261207:x" in svc.router.boards
        finally:
            await svc.close()

    run(go())


def _fanout(events: list[ScoreEvent], boards_per_event: list[list[str]]) -> ScoreBatch:
    rows, origin = [], []
    for i, (ev, boards) in enumerate(zip(events, boards_per_event)):
        for b in boards:
            rows.append(ev._replace(board_id=b))
            origin.append(i)
    batch = ScoreBatch.from_events(rows)
    return ScoreBatch(batch.event_ids, batch.boards, batch.positions, np.array(origin, np.int64))


def test_fan_out_is_one_group_record_with_results_in_request_order_deduplicated_per_board():
    async def go():
        now = ms(2026, 12, 6, 12)
        svc = await open_svc(FakeClock(now))
        series, a, b = "g:m:daily:x", "g:m:S1:global", "g:m:S1:eu"
        try:
            await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=3, recurrence=Recurrence("day")))
            await svc.create_board(BoardSpec(a, Policy.BEST_SCORE, shards=3))
            await svc.create_board(BoardSpec(b, Policy.CUMULATIVE, shards=1))
            e1 = ScoreEvent(a, "e1", "p1", 10, now, now)
            e2 = ScoreEvent(a, "e2", "p2", 20, now - DAY, now - DAY)
            before = len(list(svc.event_log.read_from(0)))
            res = await svc.submit_columns(_fanout([e1, e2], [[a, b, series], [b, series]]))
            inst, yesterday = "g:m:daily.20261206:x", "g:m:daily.20261205:x"
            assert res.board_ids == [a, b, inst, b, yesterday]
            assert [R.outcome_of(c) for c in res.codes.tolist()] == [
                Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED, Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED,
                Outcome.HELD_FOR_CORRECTION]
            tail = [rec for _, rec in svc.event_log.read_from(0)][before:]
            assert [r[0] for r in tail] == ["W", "T", "T", "G"]  # yesterday's instance, then ONE score record
            group = R.parse(tail[-1])
            assert sorted(R.boards_of(group)) == sorted([a, b, inst, yesterday])
            assert sum(len(p.event_ids) for p in R.group_parts(group)) == 5
            # a redelivery is a duplicate on each board, under its one event id; a changed one a conflict
            res = await svc.submit_columns(_fanout([e1, e2._replace(value=21)], [[a, b, series], [b, series]]))
            assert [R.outcome_of(c) for c in res.codes.tolist()] == [Outcome.DUPLICATE_IGNORED] * 3 + [
                Outcome.REJECTED_EVENT_ID_CONFLICT] * 2
            # the same event id on a board that never saw it is new there
            res = await svc.submit_columns(_fanout([e1], [[a, "g:m:S1:na"]]))
            assert [R.outcome_of(c) for c in res.codes.tolist()] == [Outcome.DUPLICATE_IGNORED,
                                                                     Outcome.REJECTED_UNKNOWN_SEASON]
            assert res.board_ids is None  # nothing routed: each result is on the board it was sent to
            # a plain batch keeps its plain records
            n = len(list(svc.event_log.read_from(0)))
            await svc.submit([ScoreEvent(a, "e9", "p9", 1, now, now), ScoreEvent(b, "e9", "p9", 1, now, now)])
            assert {rec[0] for _, rec in list(svc.event_log.read_from(0))[n:]} == {"C"}
        finally:
            await svc.close()

    run(go())


def test_replay_reproduces_every_board_of_series_and_fan_outs(tmp_path):
    async def go():
        now = ms(2026, 12, 6, 12)
        clock = FakeClock(now)
        svc = await open_svc(clock, tmp_path)
        series, a = "g:m:weekly:x", "g:m:S1:global"
        await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=3,
                                         recurrence=Recurrence.parse({"every": "week", "timezone": "Asia/Tokyo"})))
        await svc.create_board(BoardSpec(a, Policy.CUMULATIVE, shards=2))
        for k in range(6):
            evs = [ScoreEvent(a, f"e{k}.{i}", f"p{i % 9}", i + k, now - (i * 5 + k) * HOUR, now)
                   for i in range(40)]
            await svc.submit_columns(_fanout(evs, [[a, series]] * len(evs)))
        live = await state_of(svc)
        assert len(live) >= 4
        await crash(svc)
        again = await open_svc(clock, tmp_path)
        try:
            assert await state_of(again) == live
            assert again.router.registry.instances_of(series) == svc.router.registry.instances_of(series)
        finally:
            await again.close()

    run(go())


def test_creating_a_series_whose_current_instance_exists_is_refused():
    async def go():
        now = ms(2026, 12, 6, 12)
        svc = await open_svc(FakeClock(now))
        try:
            await svc.create_board(BoardSpec("g:m:daily.20261206:x", Policy.BEST_SCORE))
            with pytest.raises(BoardExists):
                await svc.create_board(BoardSpec("g:m:daily:x", Policy.BEST_SCORE, recurrence=Recurrence("day")))
            assert "g:m:daily:x" not in svc.router.boards
        finally:
            await svc.close()

    run(go())


def test_the_timer_creates_each_window_s_instance_archives_beyond_keep_and_reads_follow_the_clock(tmp_path):
    async def go():
        d0 = ms(2026, 12, 6, 12)
        clock = FakeClock(d0)
        svc = await open_svc(clock, tmp_path)
        series = "g:m:daily:x"
        day = lambda d: f"g:m:daily.202612{d:02d}:x"  # noqa: E731
        await svc.create_board(BoardSpec(series, Policy.BEST_SCORE, shards=2, finalize_after_s=0,
                                         recurrence=Recurrence.parse({"every": "day", "keep": 2})))
        await svc.submit([ScoreEvent(series, "a", "p1", 7, d0, d0)])
        info = await svc.board(series)
        assert (info.current, info.recurrence, info.size, info.version) == (
            day(6), {"every": "day", "timezone": "UTC", "at": "00:00", "keep": 2}, 1, 1)
        assert (await svc.board(day(6))).series == series
        assert (await svc.board(day(6))).window == (ms(2026, 12, 6), ms(2026, 12, 7))
        clock.now = ms(2026, 12, 7, 0, 1)
        assert await svc.router.close_due() == ms(2026, 12, 8)  # the next window's start
        assert svc.router.registry.instances_of(series) == [day(7), day(6)]
        assert svc.router.boards[day(6)].admission.state is BoardState.FINALIZED
        assert (await svc.board(series)).current == day(7)
        assert (await svc.top(series, 0, 10)).entries == ()  # reads follow the clock: the new window is empty
        await svc.submit([ScoreEvent(series, "b", "p2", 9, clock.now, clock.now)])
        page = await svc.top(series, 0, 10)
        assert page.board_id == day(7) and [e.player_id for e in page.entries] == ["p2"]
        assert (await svc.player(series, "p2")).rank == 1
        assert await svc.checksum(series) == await svc.checksum(day(7))
        clock.now = ms(2026, 12, 8, 0, 1)
        await svc.router.close_due()
        got = await svc.instances(series)
        assert [(i.board_id, i.state, i.size) for i in got] == [
            (day(8), BoardState.OPEN, 0), (day(7), BoardState.FINALIZED, 1), (day(6), BoardState.ARCHIVED, 1)]
        assert got[0].starts_at == ms(2026, 12, 8) and got[0].ends_at == ms(2026, 12, 9)
        assert [e.player_id for e in (await svc.top(day(6), 0, 10)).entries] == ["p1"]  # archived, still readable
        states = [rec[2] for _, rec in svc.event_log.read_from(0) if rec[0] == R.STATE and rec[1] == day(6)]
        assert states == ["FROZEN", "FINALIZED", "ARCHIVED"]
        # idempotent after downtime: the server was down for three windows; at start, only the current window's
        # instance is created, and keep archives the oldest FINALIZED ones
        await crash(svc)
        clock.now = ms(2026, 12, 11, 3)
        svc = await open_svc(clock, tmp_path)
        try:
            assert svc.router.registry.instances_of(series) == [day(11), day(8), day(7), day(6)]
            assert [svc.router.boards[day(d)].admission.state for d in (11, 8, 7, 6)] == [
                BoardState.OPEN, BoardState.FINALIZED, BoardState.ARCHIVED, BoardState.ARCHIVED]
            n = len(list(svc.event_log.read_from(0)))
            await svc.router.close_due()
            assert len(list(svc.event_log.read_from(0))) == n  # nothing more was owed
        finally:
            await svc.close()

    run(go())


def test_a_torn_tail_keeps_all_of_a_fan_out_or_none_of_it(tmp_path):
    """Cut the log inside a fan-out's G record (what a crash mid-write leaves): on reopening, none of its
    events is on any board. The same cut inside a plain batch's last record keeps the records before it."""
    import glob
    import os

    from engine.log import SegmentedFileLog

    async def go():
        now = ms(2026, 12, 6, 12)
        clock = FakeClock(now)
        boards = ["g:m:S1:a", "g:m:S1:b", "g:m:S1:c"]
        svc = await open_svc(clock, tmp_path)
        for i, b in enumerate(boards):
            await svc.create_board(BoardSpec(b, Policy.CUMULATIVE, shards=i + 1))
        evs = [ScoreEvent(boards[0], f"e{i}", f"p{i}", 1, now, now) for i in range(30)]
        await svc.submit_columns(_fanout(evs, [boards] * len(evs)))
        await crash(svc)
        (segment,) = glob.glob(str(tmp_path / "log" / "*.log"))
        with SegmentedFileLog.open(str(tmp_path / "log")) as log:
            assert [rec[0] for _, rec in log.read_from(0)][-1] == R.GROUP
        os.truncate(segment, os.path.getsize(segment) - 40)  # the G record's last bytes: a torn write
        again = await open_svc(clock, tmp_path)
        try:
            assert [(await again.board(b)).size for b in boards] == [0, 0, 0]
            # a plain batch spans one record per board partition: the same cut keeps the records before the last
            await again.submit([e._replace(board_id=b) for e in evs for b in boards])
        finally:
            await crash(again)
        with SegmentedFileLog.open(str(tmp_path / "log")) as log:
            assert [rec[0] for _, rec in log.read_from(0)][-6:] == [R.SCORES] * 6
        os.truncate(segment, os.path.getsize(segment) - 40)
        last = await open_svc(clock, tmp_path)
        try:
            sizes = [(await last.board(b)).size for b in boards]
            assert 0 < sum(sizes) < 3 * len(evs)  # some boards have the events, another misses some
        finally:
            await last.close()

    run(go())


def test_the_running_timer_creates_instances_and_archives_behind_it():
    """The season timer itself (not a test's call): a new window's instance appears once its start passes,
    and the archive that keep asks for is written by a task of its own (the timer does not wait for it)."""
    async def go():
        clock = FakeClock(ms(2026, 12, 6, 12))
        svc = await open_svc(clock)
        series = "g:m:daily:t"
        try:
            await svc.create_board(BoardSpec(series, Policy.CUMULATIVE, shards=3, finalize_after_s=0,
                                             recurrence=Recurrence.parse({"every": "day", "keep": 1})))
            await svc.submit([ScoreEvent(series, "a", "p", 1, clock.now, clock.now)])
            clock.now = ms(2026, 12, 7, 0, 0) + 1
            svc.router.wake_season_timer()
            boards = svc.router.boards
            for _ in range(400):
                day6 = boards.get("g:m:daily.20261206:t")
                if "g:m:daily.20261207:t" in boards and day6.archive is not None:
                    break
                await asyncio.sleep(0.01)
            assert svc.router.registry.instances_of(series) == ["g:m:daily.20261207:t", "g:m:daily.20261206:t"]
            assert day6.admission.state is BoardState.ARCHIVED and day6.archive is not None
            assert (await svc.board("g:m:daily.20261206:t")).size == 1  # from its archive
        finally:
            await svc.close()

    run(go())
