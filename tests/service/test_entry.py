"""Competition entry (docs/api.md §16) through a file-backed LocalService:
k partitions answer as one does (outcomes, versions, checksums, positions),
and a snapshot + tail, and the log alone, bring back the same boards and
the same entry state (joins, attempts, rows)."""

from __future__ import annotations

import random

import pytest

from engine.core import records as R
from engine.core.errors import FlowRankError
from engine.log import SegmentedFileLog
from engine.core.model import BoardSpec, EntrySpec, LeagueSpec, Outcome, Policy, ScoreEvent
from tests.service.helpers import crash, drop_snapshots, open_service, run, state_of

RULES = {
    "g:join:s1": (Policy.BEST_SCORE, EntrySpec(True, 6, 3)),
    "g:cap:s1": (Policy.FASTEST_TIME, EntrySpec(False, 5, None)),
    "g:tries:s1": (Policy.CUMULATIVE, EntrySpec(False, None, 2)),
}


def _specs(shards: int) -> list[BoardSpec]:
    return [BoardSpec(b, policy, shards=shards, max_plausible_time_ms=6, review_above=8, entry=rules)
            for b, (policy, rules) in RULES.items()]


def _entry_state(svc) -> dict:
    out = {}
    for b in RULES:
        t = svc.router.boards[b].admission.entry
        t._check()
        ids = t.players.ids_of(range(len(t)))
        out[b] = (t.joined, t.rows, {p: (int(t.position[i]), int(t.attempts[i]), bool(t.row[i]))
                                     for i, p in enumerate(ids)})
    return out


async def _round(svc, rng: random.Random, sent: list, counter: list) -> list:
    """A few joins, then a batch of new events and redeliveries; what each answered."""
    answers: list = []
    for _ in range(rng.randrange(3)):
        b = rng.choice(list(RULES))
        try:
            got = await svc.join(b, f"p{rng.randrange(9)}")
            answers.append(("join", b, got))
        except FlowRankError as exc:
            answers.append(("join", b, exc.code))
    events = []
    for _ in range(rng.randrange(1, 12)):
        if sent and rng.random() < 0.2:
            events.append(rng.choice(sent))
            continue
        counter[0] += 1
        ev = ScoreEvent(rng.choice(list(RULES)), f"e{counter[0]}", f"p{rng.randrange(9)}", rng.randrange(-1, 10),
                        rng.randrange(4), 5)
        sent.append(ev)
        events.append(ev)
    answers += [(r.event_id, r.outcome, r.version) for r in await svc.submit(events)]
    return answers


async def _workload(svc, seed: int, rounds: range, sent: list, counter: list) -> list:
    rng = random.Random(seed * 1000 + rounds.start)
    out = []
    for _ in rounds:
        out += await _round(svc, rng, sent, counter)
    return out


def test_k_partitions_answer_as_one(tmp_path):
    async def go():
        seen = {}
        for shards in (1, 3):
            svc = await open_service(tmp_path / str(shards), 3)
            for spec in _specs(shards):
                await svc.create_board(spec)
            answers = await _workload(svc, 7, range(12), [], [0])
            state = await state_of(svc)
            seen[shards] = (answers, {b: s["checksum"] for b, s in state.items()},
                            {b: (s["info"].version, s["info"].size) for b, s in state.items()},
                            {b: {p: (v.value, v.rank, v.attempts) for p, v in s["views"].items()}
                             for b, s in state.items()},
                            _entry_state(svc))
            await svc.close()
        assert seen[1] == seen[3]
        outcomes = {a[1] for a in seen[1][0] if isinstance(a[1], Outcome)}
        for o in (Outcome.REJECTED_NOT_JOINED, Outcome.REJECTED_BOARD_FULL, Outcome.REJECTED_MAX_ATTEMPTS,
                  Outcome.DUPLICATE_IGNORED, Outcome.HELD_FOR_REVIEW):
            assert o in outcomes, o  # the workload reached every rule
        assert any(a[0] == "join" and getattr(a[2], "created", None) is False for a in seen[1][0])

    run(go())


@pytest.mark.parametrize("snapshot_midway", [True, False])
def test_snapshot_and_replay_bring_back_boards_and_entry_state(tmp_path, snapshot_midway):
    async def go():
        svc = await open_service(tmp_path, 3)
        for spec in _specs(3):
            await svc.create_board(spec)
        sent: list = []
        counter = [0]
        await _workload(svc, 3, range(6), sent, counter)
        if snapshot_midway:
            await svc.snapshot()
        await _workload(svc, 3, range(6, 12), sent, counter)
        live, entry = await state_of(svc), _entry_state(svc)
        assert any(entry[b][0] for b in RULES) and any(entry[b][1] for b in RULES)
        await crash(svc)
        with SegmentedFileLog.open(tmp_path / "log") as log:
            kinds = [rec[0] for _, rec in log.read_from(0)]
        assert kinds.count(R.OPTIONS_BOARD) == 3 and R.JOIN in kinds

        for reopen in ("snapshot + tail", "log only"):
            if reopen == "log only":
                drop_snapshots(tmp_path)
            svc = await open_service(tmp_path, 3)
            assert await state_of(svc) == live, reopen
            assert _entry_state(svc) == entry, reopen
            if reopen != "log only":
                await crash(svc)
                continue
            # the entry state works on (last: this writes): a joined player's position, a resend is a duplicate
            b = "g:join:s1"
            table = entry[b][2]
            joined = {p: pos for p, (pos, _, _) in table.items() if pos >= 0}
            for p, pos in joined.items():
                got = await svc.join(b, p)
                assert (got.position, got.created) == (pos, False)
            res = await svc.submit([sent[0]])
            assert res[0].outcome is Outcome.DUPLICATE_IGNORED
            await crash(svc)

    run(go())


def _bulk_view(result) -> list:
    return [(r.player_id, r.position, r.created) if not isinstance(r, FlowRankError) else r.code
            for r in result.results]


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("snapshot_midway", [True, False])
def test_bulk_joins_are_one_record_each_and_come_back_the_same(tmp_path, shards, snapshot_midway):
    """docs/api.md §18: a bulk join is one ``H`` record (its new joins only); a snapshot + tail, and the log
    alone, bring back the same positions and cohorts, so the same requests then answer 200 with them."""
    board = "g:league:s1"
    spec = BoardSpec(board, Policy.BEST_SCORE, shards=shards, entry=EntrySpec(True, 9, None),
                     league=LeagueSpec(3, 2, 1, 1))

    async def go():
        svc = await open_service(tmp_path, 3)
        await svc.create_board(spec)
        requests = [["p1", "p2", "p3"], ["p2", "p4"], ["p5", "p6", "p7", "p8", "p9", "p10", "p11"]]
        first = [_bulk_view(await svc.joins(board, ids)) for ids in requests[:2]]
        await svc.join(board, "p0")  # a single join between bulk ones: one J record
        if snapshot_midway:
            await svc.snapshot()
        first.append(_bulk_view(await svc.joins(board, requests[2])))
        assert first[1] == [("p2", 1, False), ("p4", 3, True)]
        assert first[2][-2:] == ["BOARD_FULL", "BOARD_FULL"]
        live = (await svc.cohorts(board), _entry_of(svc, board))
        await crash(svc)
        with SegmentedFileLog.open(tmp_path / "log") as log:
            recs = [rec for _, rec in log.read_from(0) if rec[0] in (R.JOIN, R.JOINS)]
        assert [(r[0], r[2], r[3]) for r in recs] == [
            (R.JOINS, ["p1", "p2", "p3"], 0), (R.JOINS, ["p4"], 3), (R.JOIN, "p0", 4),
            (R.JOINS, ["p5", "p6", "p7", "p8"], 5)]
        for reopen in ("snapshot + tail", "log only"):
            if reopen == "log only":
                drop_snapshots(tmp_path)
            svc = await open_service(tmp_path, 3)
            assert (await svc.cohorts(board), _entry_of(svc, board)) == live, reopen
            again = [_bulk_view(await svc.joins(board, ids)) for ids in requests]
            want = [[x if isinstance(x, str) else (x[0], x[1], False) for x in got] for got in first]
            assert again == want, reopen
            await crash(svc)

    run(go())


def _entry_of(svc, board: str):
    t = svc.router.boards[board].admission.entry
    t._check()
    league = svc.router.boards[board].admission.league
    league._check()
    ids = t.players.ids_of(range(len(t)))
    return t.joined, {p: int(t.position[i]) for i, p in enumerate(ids)}, {p: league.where(p) for p in ids}
