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


class _GatedLog:
    """A LogPort whose appends wait for the test: ``open(i)`` lets the i-th append
    through (in the order of ``at``, as the real logs keep it), ``fail(i)`` fails
    it. ``honour_at=False``: a log that breaks the contract and keeps a batch
    after a failed one (the sequencer must still apply nothing decided on top)."""

    def __init__(self, honour_at: bool = True):
        self.records: list = []
        self.calls: list[tuple[int | None, int]] = []  # (at, records) per append, in issue order
        self.gates: list[asyncio.Future] = []
        self.honour_at = honour_at
        self.broken = False
        self.gated = False

    async def append(self, payloads, at=None):
        from engine.log.framing import unpack_payload

        self.calls.append((at, len(payloads)))
        if self.gated:
            gate = asyncio.get_running_loop().create_future()
            self.gates.append(gate)
            if not await gate:
                self.broken = True
                raise OSError("injected write failure")
        if self.honour_at and at is not None:
            while len(self.records) < at and not self.broken:  # arrived early: wait for the one ahead
                await asyncio.sleep(0.001)
            if at != len(self.records) or self.broken:
                raise OSError(f"append at {at}, log at {len(self.records)} (an earlier append failed)")
        first = len(self.records)
        self.records.extend(unpack_payload(p) for p in payloads)
        self.broken = False
        return first

    async def in_flight(self, n: int) -> None:
        while len(self.gates) < n:
            await asyncio.sleep(0.001)


def _gated(n_actors: int = 2, honour_at: bool = True):
    parts = assemble(n_actors=n_actors)
    parts.log = parts.sequencer.log = _GatedLog(honour_at)
    return parts


def test_the_next_cycle_is_decided_over_the_one_in_flight_and_answered_after_it():
    """Two appends in flight: B is decided while A's append is in flight, against A's
    decisions (A's event id is a duplicate in B), appended right after A's records
    (``at``), and folded, applied and answered after A, in log order."""
    async def go():
        parts = _gated()
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=2))
            parts.log.gated = True
            a = asyncio.ensure_future(parts.sequencer.submit(_events(5)))
            await parts.log.in_flight(1)
            b = asyncio.ensure_future(parts.sequencer.submit(
                [ScoreEvent(B, "e0", "p0", 10, 0, 0), ScoreEvent(B, "late", "p9", 99, 1, 1)]))
            await parts.log.in_flight(2)
            calls = list(parts.log.calls)
            sent_meanwhile = {k: list(v) for k, v in parts.transport.sent.items()}
            parts.log.gates[1].set_result(True)  # B's append goes first: it waits for A's offset
            await asyncio.sleep(0.01)
            b_early = b.done()
            parts.log.gates[0].set_result(True)
            return parts, calls, sent_meanwhile, b_early, await a, await b
        finally:
            await parts.close()

    parts, calls, sent_meanwhile, b_early, got_a, got_b = asyncio.run(go())
    a_records = calls[1][1]
    assert calls[0] == (None, 1)  # the first append goes alone: it finds the log's end
    assert calls[1][0] == 1 and calls[2][0] == 1 + a_records  # B right after A's records
    assert sent_meanwhile == {0: [0], 1: [0]} and not b_early  # nothing applied while A was in flight
    assert [r.outcome for r in got_a] == [Outcome.APPLIED_FIRST_SCORE] * 5
    assert [r.outcome for r in got_b] == [Outcome.DUPLICATE_IGNORED, Outcome.APPLIED_FIRST_SCORE]
    assert got_b[1].version == 6  # after A's five changes
    sent = sorted(o for offs in parts.transport.sent.values() for o in offs)
    assert sent == [0, 0] + list(range(1, len(parts.log.records)))  # every record applied, A's before B's
    assert parts.registry.log_offset == len(parts.log.records) - 1


@pytest.mark.parametrize("honour_at", [True, False], ids=["log keeps at", "log breaks at"])
def test_when_the_first_of_two_appends_fails_the_second_is_neither_applied_nor_acknowledged(honour_at):
    async def go():
        parts = _gated(honour_at=honour_at)
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=2))
            parts.log.gated = True
            a = asyncio.ensure_future(parts.sequencer.submit(_events(5)))
            await parts.log.in_flight(1)
            b_events = [ScoreEvent(B, f"b{i}", f"q{i}", 50 + i, i, i) for i in range(3)]
            b = asyncio.ensure_future(parts.sequencer.submit(b_events))
            await parts.log.in_flight(2)
            parts.log.gates[0].set_result(False)  # A fails
            parts.log.gates[1].set_result(True)  # B's write would go through
            errors = []
            for fut in (a, b):
                with pytest.raises(StorageUnavailable) as exc:
                    await fut
                errors.append(str(exc.value))
            sent = {k: list(v) for k, v in parts.transport.sent.items()}
            offset = parts.registry.log_offset
            parts.log.gated = False
            again = (await parts.sequencer.submit(_events(5)), await parts.sequencer.submit(b_events))
            return parts, errors, sent, offset, again
        finally:
            await parts.close()

    parts, errors, sent, offset, (a2, b2) = asyncio.run(go())
    assert sent == {0: [0], 1: [0]} and offset == 0  # neither folded nor applied
    assert "earlier batch" in errors[1]
    # the same ids afterwards are judged afresh: nothing of A or B was remembered
    assert [r.outcome for r in a2 + b2] == [Outcome.APPLIED_FIRST_SCORE] * 8
    assert parts.sequencer.metrics["storage_errors"] == 1


def test_one_append_in_flight_when_configured_so():
    """``appends_in_flight=1`` (``--appends-in-flight 1``): the next cycle waits for the append in flight."""
    async def go():
        parts = assemble(n_actors=2, config=RouterConfig(appends_in_flight=1))
        parts.log = parts.sequencer.log = _GatedLog()
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.BEST_SCORE, shards=1))
            parts.log.gated = True
            a = asyncio.ensure_future(parts.sequencer.submit(_events(3)))
            await parts.log.in_flight(1)
            b = asyncio.ensure_future(parts.sequencer.submit(_events(2)))  # A's first two ids again
            await asyncio.sleep(0.02)
            issued_meanwhile = len(parts.log.calls)
            parts.log.gates[0].set_result(True)
            await a
            await parts.log.in_flight(2)
            parts.log.gates[1].set_result(True)
            return issued_meanwhile, parts.log.calls, await b
        finally:
            await parts.close()

    issued_meanwhile, calls, got_b = asyncio.run(go())
    assert issued_meanwhile == 2  # the board's append and A's: B waited
    assert calls[2][0] == 1 + calls[1][1] and [r.outcome for r in got_b] == [Outcome.DUPLICATE_IGNORED] * 2


def test_a_dedup_table_due_to_grow_is_built_off_the_fold_and_swapped_in(monkeypatch):
    """Issue 29 item 2: once a board's dedup ring is 3/4 full, the committer builds the bigger table
    on a worker thread (the fold that every read and write waits on only starts it and swaps it in),
    so the growth never runs inline; every id stays deduplicated across the swap."""
    from engine.core.dedup import DedupTable

    inline = []
    grow = DedupTable._grow
    monkeypatch.setattr(DedupTable, "_grow", lambda self: (inline.append(self.capacity), grow(self))[1])

    async def go():
        parts = assemble(n_actors=2, config=RouterConfig(dedup_retention=10_000))
        try:
            await parts.sequencer.submit_board(BoardSpec(B, Policy.CUMULATIVE, shards=2))
            table = parts.registry.boards[B].admission.dedup
            capacities = []
            for k in range(40):  # 10 events a batch: every growth is planned a few batches before it is due
                await parts.sequencer.submit(_events(10, f"b{k}-"))
                await asyncio.sleep(0.01)  # the build's thread finishes; the next cycle swaps it in
                capacities.append(table.capacity)
            again = await parts.sequencer.submit(_events(10, "b3-"))
            table._check()
            return capacities, again, len(table)
        finally:
            await parts.close()

    capacities, again, held = asyncio.run(go())
    assert sorted(set(capacities)) == [64, 128, 256, 512, 1024]  # 400 ids: 3/4 of 512 planned the last
    assert inline == [0]  # the first ring (empty: nothing to build ahead) is the only one grown inline
    assert held == 400 and [r.outcome for r in again] == [Outcome.DUPLICATE_IGNORED] * 10
