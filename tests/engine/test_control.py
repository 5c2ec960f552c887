"""engine.router.control, on its own: the registry places a board's partitions
on shard actors, recovery folds the log into the same state a snapshot
reloads, scheduled season moves go through the sequencer once, and archiving
moves a board's rows from the shard actors to its archive."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.core import records as R
from engine.router.control import BoardControl
from engine.router.registry import BoardRegistry
from engine.core.columns import ScoreColumns
from engine.core.errors import BoardNotFound
from engine.core.model import BoardSpec, BoardState, Policy, ScoreEvent
from engine.core.placement import actor_of
from tests.engine.parts import assemble

B = "g:m:s:ctl"


def test_the_registry_places_each_partition_on_its_shard_actor():
    registry = BoardRegistry(n_actors=3)
    ctl = registry.new_ctl(BoardSpec(B, Policy.BEST_SCORE, shards=5))
    assert ctl.part_actor == [actor_of(B, p, 3) for p in range(5)]
    assert ctl.actors == sorted(set(ctl.part_actor)) and sum(ctl.parts_on.values()) == 5
    assert all(ctl.parts_on[a] == ctl.part_actor.count(a) for a in ctl.actors)
    with pytest.raises(BoardNotFound):
        registry.ctl(B)  # made, not registered
    registry.boards[B] = ctl
    assert registry.ctl(B) is ctl


def test_folding_the_log_and_reloading_its_snapshot_give_the_same_state():
    events = [ScoreEvent(B, f"e{i}", f"p{i % 4}", i, i, i) for i in range(12)]
    log = [R.board_record(BoardSpec(B, Policy.CUMULATIVE, shards=1)),
           R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(len(events), np.uint8)),
           R.InvalidationRecord(R.INVALIDATE, B, "e3", "correction:e3:1", None, "mod"),
           R.StateRecord(R.STATE, B, BoardState.FROZEN.value)]
    folded = BoardControl(BoardRegistry(2), None, None)  # type: ignore[arg-type]  # no I/O: no sequencer, no reads
    for offset, rec in enumerate(log):
        folded.registry.apply(offset, list(rec))  # as the log hands them back: lists
    state = folded.to_state()
    ctl = folded.registry.ctl(B)
    assert folded.registry.log_offset == 3 and ctl.corrections == 1
    assert (ctl.admission.state, ctl.admission.freeze_position) == (BoardState.FROZEN, 3)
    reloaded = BoardControl(BoardRegistry(2), None, None)  # type: ignore[arg-type]
    reloaded.load_state(state)
    assert reloaded.to_state() == state
    again = reloaded.registry.ctl(B)
    assert (again.spec, again.part_actor, again.corrections) == (ctl.spec, ctl.part_actor, 1)
    assert len(again.admission.dedup) == len(ctl.admission.dedup) == 12


def test_scheduled_moves_go_through_the_sequencer_once_each():
    async def go():
        parts = assemble(n_actors=2)
        try:
            now = parts.clock[0]
            info = await parts.control.create_board(
                BoardSpec(B, Policy.BEST_SCORE, shards=2, closes_at=now - 1_000, finalize_after_s=60))
            logged_at_create = [R.parse(r) for r in parts.log.records]
            assert await parts.control.close_due() == now - 1_000 + 60_000  # the finalize falls due then
            parts.clock[0] = now + 60_000
            assert await parts.control.close_due() is None  # nothing left on the schedule
            assert await parts.control.close_due() is None
            return info, logged_at_create, [R.parse(r) for r in parts.log.records]
        finally:
            await parts.close()

    info, at_create, logged = asyncio.run(go())
    assert info.state is BoardState.FROZEN  # closes_at already past: frozen before create_board returned
    assert [r.kind for r in at_create] == [R.BOARD2, R.STATE] and at_create[1].state == "FROZEN"
    assert [(r.kind, getattr(r, "state", None)) for r in logged] == [
        (R.BOARD2, None), (R.STATE, "FROZEN"), (R.STATE, "FINALIZED")]  # each move once


def test_archiving_moves_the_rows_to_the_archive_and_the_shard_actors_drop_theirs():
    async def go():
        parts = assemble(n_actors=3)
        try:
            await parts.control.create_board(BoardSpec(B, Policy.BEST_SCORE, shards=3))
            await parts.sequencer.submit([ScoreEvent(B, f"e{i}", f"p{i}", i, i, i) for i in range(30)])
            before = await parts.fanout.top(B, 0, 10)
            for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
                info = await parts.control.set_state(B, state)
            held = [B in core.parts for core in parts.transport.cores]
            return before, await parts.fanout.top(B, 0, 10), info, held, parts.registry.ctl(B)
        finally:
            await parts.close()

    before, after, info, held, ctl = asyncio.run(go())
    assert ctl.archive is not None and ctl.archive.info.version == before.version == info.version == 30
    assert held == [False, False, False]  # every shard actor dropped the board's partitions
    assert after == before and [e.player_id for e in after.entries[:2]] == ["p29", "p28"]
    assert info.state is BoardState.ARCHIVED and info.size == 30
