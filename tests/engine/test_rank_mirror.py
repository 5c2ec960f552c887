"""engine.core.rank_mirror: a mirror built from a cut and fed the board's
deltas reads exactly as the board does (rows, exact and tied ranks), and
refuses to go on when the deltas it needs are gone or the ring was reset."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.board import Board
from engine.core.changes import ChangeRing
from engine.core.errors import EventNotFound
from engine.core.model import BoardSpec, Delta, Policy, RowStatus, ScoreEvent
from engine.core.rank_mirror import RankMirror, mirrors
from engine.core.ranking import better_primary_probe

BOARD = "b"
IDS = ["p", "p-", "p-a", "p-é", "p-\U0001f600", "x" * 40 + "a", "x" * 41, "Z", "z"]
METAS = [b"", b"", b'{"k":1}', b'{"k":2}']


@st.composite
def runs(draw):
    """A policy, a list of operations (a batch of events or an invalidation)
    and the operation after which the mirror's cut is taken."""
    policy = draw(st.sampled_from([Policy.BEST_SCORE, Policy.CUMULATIVE, Policy.LATEST]))
    ops, n = [], 0
    for _ in range(draw(st.integers(1, 12))):
        if n and draw(st.integers(0, 4)) == 0:
            ops.append(("invalidate", f"e{draw(st.integers(0, n - 1))}"))
            continue
        batch = []
        for _ in range(draw(st.integers(1, 6))):
            batch.append(ScoreEvent(BOARD, f"e{n}", draw(st.sampled_from(IDS)), draw(st.integers(-3, 3)),
                                    draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.sampled_from(METAS))))
            n += 1
        ops.append(("events", batch))
    return policy, ops, draw(st.integers(0, len(ops))), draw(st.integers(1, 3))


def _do(board: Board, op) -> None:
    kind, arg = op
    if kind == "events":
        board.apply_batch(arg)
    else:
        try:
            board.invalidate(arg)
        except EventNotFound:
            pass


def _cut(board: Board, parts: int) -> list:
    """The board's rows as ``parts`` chunks of columns, as shard actors send them."""
    total = board.partition.row_count()
    step = max(1, -(-total // parts))
    return [board.partition.columns(s, step) for s in range(0, total, step)]


def _expected(board: Board, pid: str):
    row = board.partition.get(pid)
    if row is None:
        return None
    row = row._replace(submitted_at=0)  # a delta does not carry it; no read of these boards shows it
    if row.key is None:
        return row, None, None
    tied = 1 + board.partition.count_better_than(better_primary_probe(row.key[0]))
    return row, board.partition.rank(pid), tied


@settings(max_examples=150, deadline=None)
@given(runs())
def test_a_mirror_fed_the_deltas_reads_as_the_board(run):
    policy, ops, cut_at, parts = run
    board = Board(BoardSpec(BOARD, policy, max_plausible_time_ms=3))
    mirror = None
    for i in range(len(ops) + 1):
        if i == cut_at:
            mirror = RankMirror.build(policy, 3, _cut(board, parts), board.version, board.ring.epoch)
        if i < len(ops):
            _do(board, ops[i])
        if mirror is not None and i % 2:  # followed now and then, and at the end
            assert mirror.catch_up(board.ring)
    assert mirror is not None and mirror.catch_up(board.ring) and mirror.version == board.version
    for pid in IDS:
        got = mirror.read(pid, ties=True)
        want = _expected(board, pid)
        assert (None if got is None else (got.row._replace(submitted_at=0), got.rank, got.tied_rank)) == want, pid
    assert len(mirror) == len(board.partition)
    mirror._check()


def test_an_erased_row_leaves_and_the_id_starts_again():
    ring = ChangeRing(100)
    m = RankMirror.build(Policy.BEST_SCORE, 0, [], ring.version, ring.epoch)
    ring.push_columns(["ann", "ben"], np.array([5, 9]), np.array([1, 2]), metadata=[b'{"a":1}', None])
    ring.push(Delta(3, ((RankMirrorChange := __import__("engine.core.model", fromlist=["RowChange"]).RowChange)(
        "ann", None, None, RowStatus.ERASED),)))
    assert m.catch_up(ring)
    assert m.read("ann") is None and m.read("ben").rank == 1 and len(m) == 1
    ring.push_columns(["ann"], np.array([1]), np.array([7]))
    assert m.catch_up(ring)
    got = m.read("ann")
    assert (got.rank, got.row.row_version, got.row.metadata) == (2, 1, None)
    ring.push(Delta(5, (RankMirrorChange("ben", 9, 2, RowStatus.INVALIDATED),)))
    assert m.catch_up(ring)
    ben = m.read("ben")
    assert (ben.rank, ben.row.status, ben.row.row_version, m.read("ann").rank) == (None, RowStatus.INVALIDATED, 2, 1)


def test_a_mirror_cannot_follow_past_lost_deltas_or_a_reset_but_a_pin_keeps_them():
    ring = ChangeRing(2)
    m = RankMirror.build(Policy.CUMULATIVE, 0, [], ring.version, ring.epoch)
    for i in range(5):
        ring.push_columns([f"p{i}"], np.array([i]), np.array([0]))
    assert not m.catch_up(ring)  # 5 deltas, 2 retained
    pinned = RankMirror.build(Policy.CUMULATIVE, 0, [], ring.version, ring.epoch)
    ring.pin(pinned.version)
    for i in range(5):
        ring.push_columns([f"q{i}"], np.array([i]), np.array([0]))
    assert len(ring) == 5 and pinned.catch_up(ring) and len(pinned) == 5
    ring.unpin(5)
    assert len(ring) == 2
    ring._check()
    ring.reset(ring.version)  # same version, but the mirror cannot know what the reset hid
    assert not pinned.catch_up(ring)


def test_fastest_time_and_subscores_boards_have_no_mirror():
    assert not mirrors(Policy.FASTEST_TIME, ())
    assert not mirrors(Policy.BEST_SCORE, ("desc",))
    assert mirrors(Policy.LATEST, ())
    with pytest.raises(ValueError):
        RankMirror.build(Policy.FASTEST_TIME, 0, [], 0, 0)
