"""engine.router.ingest, on its own: queue order is log order, a score batch is one
record per board partition sent only to the shard actor hosting it, and a
failed append applies nothing and rolls admission back."""

from __future__ import annotations

import asyncio

import pytest

from engine.core import records as R
from engine.core.errors import StorageUnavailable
from engine.core.model import BoardSpec, BoardState, Invalidation, Outcome, Policy, ScoreEvent
from engine.core.placement import part_of
from engine.router.registry import RouterConfig
from tests.engine.parts import assemble

B = "g:m:s:seq"


def _events(n: int, prefix: str = "e") -> list[ScoreEvent]:
    return [ScoreEvent(B, f"{prefix}{i}", f"p{i}", 10 + i, i, i) for i in range(n)]


def test_a_score_batch_is_one_record_per_partition_sent_only_to_its_shard_actor():
    async def go():
        parts = assemble(n_actors=3)
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=4))
            results = await parts.sequencer.submit(_events(40))
            return parts, results
        finally:
            await parts.close()

    parts, results = asyncio.run(go())
    board, *scores = [R.parse(r) for r in parts.log.records]
    assert board.kind == R.BOARD2 and board.shards == 4
    assert all(t == [0] for t in (sent[:1] for sent in parts.transport.sent.values()))  # the board: every actor
    ctl = parts.registry.boards[B]
    assert sorted(r.partition for r in scores) == [p for p in range(4) if any(part_of(f"p{i}", 4) == p
                                                                               for i in range(40))]
    for offset, rec in enumerate(scores, 1):
        assert rec.kind == R.SCORES and all(part_of(pid, 4) == rec.partition for pid in rec.player_ids)
        hosts = [a for a, sent in parts.transport.sent.items() if offset in sent]
        assert hosts == [ctl.part_actor[rec.partition]]
    assert sorted(e for r in scores for e in r.event_ids) == sorted(f"e{i}" for i in range(40))
    assert [r.outcome for r in results] == [Outcome.APPLIED_FIRST_SCORE] * 40
    assert [r.version for r in results] == list(range(1, 41))  # one step per change, in submission order
    assert parts.registry.log_offset == len(parts.log.records) - 1


def test_submissions_of_one_turn_are_logged_in_queue_order():
    async def go():
        parts = assemble(n_actors=2)
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.CUMULATIVE, shards=1))
            await parts.sequencer.submit(_events(3))
            got = await asyncio.gather(
                parts.sequencer.submit(_events(2, "late")),
                parts.sequencer.invalidate(Invalidation(B, "e1", "cheat", "mod")),
                parts.sequencer.submit_state(B, BoardState.FROZEN),
                parts.sequencer.submit(_events(1, "frozen")),
            )
            return parts, got
        finally:
            await parts.close()

    parts, (late, inv, _, frozen) = asyncio.run(go())
    kinds = [R.parse(r).kind for r in parts.log.records]
    assert kinds == [R.BOARD2, R.SCORES, R.SCORES, R.INVALIDATE, R.STATE, R.SCORES]
    assert parts.registry.boards[B].admission.freeze_position == 4  # the T record's offset, as replay sets it
    assert [r.outcome for r in late] == [Outcome.APPLIED] * 2
    assert (inv.player_id, inv.value) == ("p1", 11)  # e1's 11 taken off p1's 11 + late1's 11
    assert [r.outcome for r in frozen] == [Outcome.HELD_FOR_CORRECTION]  # after the freeze, in log order


def test_a_failed_append_applies_nothing_and_admission_is_rolled_back():
    async def go():
        parts = assemble(n_actors=2)
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=2))
            sent_before = {a: list(s) for a, s in parts.transport.sent.items()}
            parts.log.fail = True
            with pytest.raises(StorageUnavailable):
                await parts.sequencer.submit(_events(5))
            failed = (dict(parts.transport.sent) == sent_before, parts.sequencer.accepting_writes(),
                      parts.sequencer.metrics["storage_errors"], len(parts.log.records))
            parts.log.fail = False
            again = await parts.sequencer.submit(_events(5))  # the same event ids: not duplicates
            return failed, again
        finally:
            await parts.close()

    (nothing_sent, accepting, errors, logged), again = asyncio.run(go())
    assert nothing_sent and not accepting and errors == 1 and logged == 1
    assert [r.outcome for r in again] == [Outcome.APPLIED_FIRST_SCORE] * 5


def test_events_of_an_unknown_board_are_answered_and_not_logged():
    async def go():
        parts = assemble(n_actors=1)
        try:
            return parts, await parts.sequencer.submit(_events(2))
        finally:
            await parts.close()

    parts, results = asyncio.run(go())
    assert [(r.outcome, r.version) for r in results] == [(Outcome.REJECTED_UNKNOWN_SEASON, 0)] * 2
    assert parts.log.records == [] and parts.transport.sent == {0: []}


def test_dead_letters_are_logged_after_their_cycle_and_leave_the_queue_empty(monkeypatch):
    """Two poison events of one batch: the shard actor dead-letters both rows,
    the sequencer logs one L record each (one submission of two records) and
    answers the batch once they are durable; the queue counts them in and out
    alike (it used to count such a submission in by its records and out as one)."""
    from engine.core.partition import Partition

    real_apply = Partition.apply_columns

    def poisoned(self, cols, verdicts=None, *a, **kw):  # a bug that raises for poison events it would rank
        if any(e.startswith("poison") and (verdicts is None or verdicts[i] == 0) for i, e in enumerate(cols.event_ids)):
            raise RuntimeError("boom")
        return real_apply(self, cols, verdicts, *a, **kw)

    monkeypatch.setattr(Partition, "apply_columns", poisoned)

    async def go():
        parts = assemble(n_actors=1)
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=1))
            events = _events(3) + [ScoreEvent(B, f"poison{i}", f"x{i}", 1, 0, 0) for i in range(2)]
            results = await parts.sequencer.submit(events)
            return parts, results, parts.sequencer.queue_depth()
        finally:
            await parts.close()

    parts, results, depth = asyncio.run(go())
    assert [r.outcome for r in results] == [Outcome.APPLIED_FIRST_SCORE] * 3 + [Outcome.DEAD_LETTERED] * 2
    dead = [R.parse(r) for r in parts.log.records if R.parse(r).kind == R.DEAD_LETTER]
    assert sorted((d.offset, d.row, d.event_id) for d in dead) == [(1, 3, "poison0"), (1, 4, "poison1")]
    assert depth == 0


def test_score_records_say_their_ids_are_new_until_the_dedup_table_first_evicts(monkeypatch):
    """While a board's dedup table has never evicted an id, no admitted event
    can be a redelivery, and its records go out with ``ids_new`` (the
    partitions then skip the journal's search of stored runs); from the batch
    after the first eviction on they do not, and a redelivery older than the
    window is still told apart by the journal."""
    from engine.core.partition import Partition

    searched = []
    real_prior = Partition._prior

    def prior(self, *a, **kw):
        searched.append(bool(kw.get("ids_new", a[5] if len(a) > 5 else False)))
        return real_prior(self, *a, **kw)

    monkeypatch.setattr(Partition, "_prior", prior)

    async def go():
        parts = assemble(n_actors=1, config=RouterConfig(dedup_retention=4))
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=1))
            first = await parts.sequencer.submit(_events(3))  # 3 ids: nothing evicted yet
            second = await parts.sequencer.submit(_events(3, "f"))  # 6 ids > 4: the oldest are evicted
            third = await parts.sequencer.submit([_events(1)[0]])  # e0: older than the window
            return parts, first + second + third
        finally:
            await parts.close()

    parts, results = asyncio.run(go())
    assert parts.transport.ids_new == [1, 2]  # the first two batches were decided before any eviction
    assert searched == [True, True, False]
    assert results[-1].outcome is Outcome.DUPLICATE_IGNORED  # found by the journal, not the window
