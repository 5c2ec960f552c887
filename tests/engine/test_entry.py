"""engine.core.entry: joins, the player cap and the attempt cap (docs/api.md §16),
decided purely in the router's admission and folded by the registry.

The property test runs cycles of joins and score batches (with shuffled
redeliveries) through ``decide`` / ``Overlay.note`` / ``BoardRegistry.apply``
(as the sequencer does, no Ray, no service) and checks every verdict, every
join answer and the final entry table against a brute-force reference that
judges one event at a time in log order; with 1 and 3 partitions; and the
replay fold (no memos) reaches the same table."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import entry as EN
from engine.core import records as R
from engine.core.columns import ScoreBatch
from engine.router.decide import Overlay, Submission, decide
from engine.core.errors import BoardFull, BoardNotOpen, FlowRankError
from engine.core.model import BoardSpec, BoardState, EntrySpec, JoinResult, Outcome, Policy, ScoreEvent
from engine.router.registry import BoardRegistry

B = "g:m:s:entry"
C = R.CODE
HELD = (C[Outcome.HELD_FOR_CORRECTION], C[Outcome.HELD_FOR_REVIEW])


@dataclass
class Reference:
    """One event at a time, in log order: what docs/api.md §16 says."""

    rules: EntrySpec
    policy: Policy
    max_time: int
    review_above: int | None
    state: BoardState = BoardState.OPEN
    seen: dict = field(default_factory=dict)  # event id -> content, every remembered id
    joined: dict = field(default_factory=dict)  # player -> position
    attempts: dict = field(default_factory=dict)
    rows: set = field(default_factory=set)

    def event(self, ev: ScoreEvent) -> int:
        if ev.event_id in self.seen:
            return C[Outcome.DUPLICATE_IGNORED] if self.seen[ev.event_id] == ev.content else \
                C[Outcome.REJECTED_EVENT_ID_CONFLICT]
        r, p = self.rules, ev.player_id
        if r.join_required and p not in self.joined:
            code = C[Outcome.REJECTED_NOT_JOINED]
        elif not r.join_required and r.max_players is not None and p not in self.rows and \
                len(self.rows) >= r.max_players:
            code = C[Outcome.REJECTED_BOARD_FULL]
        elif r.max_attempts is not None and self.attempts.get(p, 0) >= r.max_attempts:
            code = C[Outcome.REJECTED_MAX_ATTEMPTS]
        elif self.state is not BoardState.OPEN:
            code = C[Outcome.HELD_FOR_CORRECTION]
        elif self.review_above is not None and ev.value > self.review_above:
            code = C[Outcome.HELD_FOR_REVIEW]
        else:
            code = R.APPLY
            self.attempts[p] = self.attempts.get(p, 0) + 1
            if self.policy is not Policy.FASTEST_TIME or 0 < ev.value <= self.max_time:
                self.rows.add(p)
        self.seen[ev.event_id] = ev.content
        return code

    def join(self, player: str):
        if player in self.joined:
            return JoinResult(player, self.joined[player], False)
        if self.state is not BoardState.OPEN:
            return BoardNotOpen
        if self.rules.max_players is not None and len(self.joined) >= self.rules.max_players:
            return BoardFull
        self.joined[player] = len(self.joined)
        return JoinResult(player, self.joined[player], True)


@st.composite
def scenarios(draw):
    rules = EntrySpec(draw(st.booleans()), draw(st.sampled_from([None, 1, 2, 3])),
                      draw(st.sampled_from([None, 1, 2])))
    policy = draw(st.sampled_from(list(Policy)))
    review = draw(st.sampled_from([None, 3]))
    players = [f"p{i}" for i in range(draw(st.integers(1, 5)))]
    n = draw(st.integers(1, 30))
    events = [ScoreEvent(B, f"e{i}", draw(st.sampled_from(players)), draw(st.integers(-1, 5)), 1, 1)
              for i in range(n)]
    subs: list = []
    for ev in events:  # joins and events interleaved, in batches
        if draw(st.integers(0, 3)) == 0:
            subs.append((Submission.JOIN, (B, draw(st.sampled_from(players)))))
        if subs and subs[-1][0] == Submission.SCORES and draw(st.booleans()):
            subs[-1][1].append(ev)
        else:
            subs.append((Submission.SCORES, [ev]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    again = events[:]
    rng.shuffle(again)  # shuffled redelivery of everything
    subs += [(Submission.SCORES, again[i:i + 4]) for i in range(0, len(again), 4)]
    if draw(st.booleans()):  # a freeze somewhere: later events are held, new joins refused
        subs.insert(draw(st.integers(0, len(subs))), (Submission.STATE, (B, BoardState.FROZEN)))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(subs)), max_size=4))))
    return rules, policy, review, subs, cuts


def _run(rules, policy, review, subs, cuts, shards):
    """Cycles as the sequencer runs them: decide each submission against one
    overlay, then fold every record (with its memo) once the cycle is "durable"."""
    reg = BoardRegistry(3)
    log: list = []
    spec = BoardSpec(B, policy, shards=shards, max_plausible_time_ms=4, review_above=review, entry=rules)
    answers: list = []
    bounds = [0] + cuts + [len(subs)]
    first = [(Submission.BOARD, spec)]
    for c, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        ov = Overlay(reg)
        records: list = []
        for kind, payload in (first if c == 0 else []) + subs[lo:hi]:
            if kind == Submission.SCORES:
                payload = ScoreBatch.from_events(payload)
            try:
                d = decide(ov, kind, payload)
            except FlowRankError as exc:
                answers.append(type(exc))
                continue
            ov.note(d)
            records.extend(zip(d.records, d.memos))
            if kind == Submission.SCORES:
                codes = np.zeros(len(payload), np.uint8)
                for (cols, positions), places in zip(zip(payload.boards, payload.positions), d.places):
                    for place in places:
                        codes[positions[place.rows]] = d.memos[place.record].verdicts
                answers.append(codes.tolist())
            elif kind == Submission.JOIN:
                answers.append(d.answer)
        for rec, memo in records:
            reg.apply(len(log), rec, memo)
            log.append(rec)
    return reg, log, answers


def _reference(rules, policy, review, subs):
    ref = Reference(rules, policy, 4, review)
    answers = []
    for kind, payload in subs:
        if kind == Submission.SCORES:
            answers.append([ref.event(ev) for ev in payload])
        elif kind == Submission.JOIN:
            answers.append(ref.join(payload[1]))
        elif kind == Submission.STATE:
            ref.state = payload[1]
            answers.append(None)  # not answered here: left out below
    return ref, answers


def _table(t: EN.EntryTable) -> dict:
    n = len(t)
    ids = t.players.ids_of(range(n))
    return {p: (int(t.position[i]), int(t.attempts[i]), bool(t.row[i])) for i, p in enumerate(ids)}


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_entry_matches_the_one_event_at_a_time_reference(scenario):
    rules, policy, review, subs, cuts = scenario
    ref, want = _reference(rules, policy, review, subs)
    for shards in (1, 3):
        reg, log, got = _run(rules, policy, review, subs, cuts, shards)
        assert got == [a for (kind, _), a in zip(subs, want) if kind != Submission.STATE], shards
        table = reg.boards[B].admission.entry
        table._check()
        expect = {}
        for p in set(ref.joined) | set(ref.attempts):
            expect[p] = (ref.joined.get(p, -1), ref.attempts.get(p, 0), p in ref.rows)
        if not rules.limits:  # the table then only keeps joins
            expect = {p: (pos, 0, False) for p, (pos, _, _) in expect.items() if pos >= 0}
        assert _table(table) == expect
        assert (table.joined, table.rows) == (len(ref.joined), len(ref.rows) if rules.limits else 0)
        # replay: the same fold over the log as read back (no memos) reaches the same table
        again = BoardRegistry(3)
        for offset, rec in enumerate(log):
            again.apply(offset, list(rec))
        assert _table(again.boards[B].admission.entry) == _table(table)
        # and a snapshot of the admission state too
        from engine.core.admission import Admission

        back = Admission.from_state(reg.boards[B].spec, 100, reg.boards[B].admission.to_state())
        assert _table(back.entry) == _table(table) and (back.entry.joined, back.entry.rows) == (
            table.joined, table.rows)


def test_boards_without_rules_keep_only_joins_and_judge_nothing():
    reg = BoardRegistry(1)
    ov = Overlay(reg)
    d = decide(ov, Submission.BOARD, BoardSpec(B, Policy.BEST_SCORE))
    ov.note(d)
    reg.apply(0, d.records[0])
    ov = Overlay(reg)
    j = decide(ov, Submission.JOIN, (B, "p"))
    assert j.answer == JoinResult("p", 0, True) and j.records == [R.join_record(B, "p", 0)]
    ov.note(j)
    again = decide(ov, Submission.JOIN, (B, "p"))  # the same cycle sees the first join
    assert again.answer == JoinResult("p", 0, False) and again.records == []
    s = decide(ov, Submission.SCORES, ScoreBatch.from_events([ScoreEvent(B, "e", "q", 1, 1, 1)]))
    assert s.memos[0].verdicts.tolist() == [R.APPLY]
    reg.apply(1, j.records[0])
    reg.apply(2, s.records[0], s.memos[0])
    assert _table(reg.boards[B].admission.entry) == {"p": (0, 0, False)}


def test_rejected_events_are_remembered_and_held_ones_do_not_count():
    v = np.array([0, 17, 18, 19, 10, 11, 8, 9], np.uint8)
    from engine.core.admission import ScoreVerdicts

    assert ScoreVerdicts(v, np.zeros((8, 3), np.uint32), np.zeros(8, np.uint64)).remembered().tolist() == [
        0, 1, 2, 3, 4, 5]
    t = EN.EntryTable()
    t.fold_scores(["a", "b", "a", "c"], np.array([0, 10, 0, 17], np.uint8), np.array([False, True, True, True]))
    assert _table(t) == {"a": (-1, 2, True)} and t.rows == 1


def test_makes_row():
    vals = np.array([-1, 0, 1, 4, 5])
    assert EN.makes_row(Policy.FASTEST_TIME, 4, vals).tolist() == [False, False, True, True, False]
    assert EN.makes_row(Policy.BEST_SCORE, 4, vals).all()


@pytest.mark.parametrize("known, joined, is_open, want", [
    (EN.PlayerEntry(3, 0, False), 9, False, 3),  # joined: position, whatever the state or the cap
    (None, 0, True, None),
    (EN.PlayerEntry(None, 2, True), 1, True, None),  # counted but not joined: a new join
    (None, 2, True, BoardFull),
    (None, 0, False, BoardNotOpen),
])
def test_join_answer(known, joined, is_open, want):
    rules = EntrySpec(False, 2, None)
    if isinstance(want, type):
        with pytest.raises(want):
            EN.join_answer(rules, known, joined, is_open)
    else:
        assert EN.join_answer(rules, known, joined, is_open) == want
