"""Board-wide admission: dedup, season state, review holds, quarantine.

Before an event may touch a row, the board decides whether it is a
redelivery, a reused id, an event for a closed season or one to hold for
review. These checks need the whole board (an event id is unique per board,
not per shard), so in a sharded board they run once, in the router, in log
order; the partitions then only see events that passed (or are told the
verdict, to keep a complete per-player history).

Decide, then apply (docs/consistency.md, "One path"):

* ``decide_columns`` and ``check_decision`` are pure: they read this state
  (plus, in the router, what earlier submissions of the same cycle decided:
  ``earlier``, ``state``, ``taken``) and return verdicts; they change nothing.
* ``apply_scores``, ``apply_state`` and ``apply_decision`` are the only
  mutators. They fold a *logged* record in, and they are the same calls
  whether the record was just made durable or is being replayed from the
  log, so live and replay build the same state by construction.

Order of checks (docs/api.md §7, design Component 08): dedup first (the
window of recent ids, then every id ever held for moderation, which the
window may have forgotten), then season state (HELD_FOR_CORRECTION), then
``review_above`` (HELD_FOR_REVIEW). Every check is one pass over the batch's
columns, whatever the quarantine holds.
"""

from __future__ import annotations

from typing import Collection, NamedTuple, Sequence

import numpy as np

from engine.core import records as R
from engine.core.columns import ScoreColumns
from engine.core.dedup import DedupTable, Seen, fingerprint, fingerprints
from engine.core.erasure import ErasedEvents, keyed_words
from engine.core.entry import ENTRY_CODES, EntryTable, judge, makes_row
from engine.core.league import LeagueTable
from engine.core.errors import AlreadyDecided, EventNotFound, InvalidTransition
from engine.core.model import BoardSpec, BoardState, HeldEvent, Outcome, ScoreEvent
from engine.core.players import BatchIds
from engine.core.season import accepts_corrections, accepts_scores

HELD_CODES = (R.CODE[Outcome.HELD_FOR_CORRECTION], R.CODE[Outcome.HELD_FOR_REVIEW])
_FOREVER = 1 << 62  # a table that never evicts (ids of held events)


class ScoreVerdicts(NamedTuple):
    """What deciding a batch found: per event its verdict code
    (:data:`engine.core.records.CODE`, 0 = go on to apply), and the batch's
    identity words and content fingerprints, so that applying the logged
    record does not hash the ids again."""

    verdicts: np.ndarray  # uint8
    words: np.ndarray  # (n, 3) uint32 (DedupTable.words_of)
    fps: np.ndarray  # uint64 content fingerprints
    erased: np.ndarray | None = None  # positions answered from an erased player's events (never logged)

    def remembered(self) -> np.ndarray:
        """Positions of the events a board remembers (admitted, held, or
        rejected by the entry rules: docs/api.md §16)."""
        v = self.verdicts
        keep = (v == R.APPLY) | (v == HELD_CODES[0]) | (v == HELD_CODES[1])
        if (v >= ENTRY_CODES[0]).any():
            keep |= (v >= ENTRY_CODES[0]) & (v <= ENTRY_CODES[-1])
        return np.flatnonzero(keep)


class Admission:
    """The admission state of one board. Deterministic; not thread-safe.

    ``held``: events waiting for a moderator's decision, in log order;
    ``decided``: event id -> (decision, event), every decision ever made;
    ``quarantined``: the identity words of every event ever held (held or
    decided), so a redelivery is recognised after the dedup window forgot it.
    """

    def __init__(self, spec: BoardSpec, dedup_retention: int):
        self.spec = spec
        self.state = BoardState.OPEN
        self.dedup = DedupTable(dedup_retention, spec.board_id)
        self.held: dict[str, HeldEvent] = {}
        self.decided: dict[str, tuple[str, HeldEvent]] = {}
        self.quarantined = DedupTable(_FOREVER, spec.board_id)
        self.freeze_position: int | None = None
        self.entry = EntryTable()  # joins, attempts and rows (engine.core.entry; docs/api.md §16)
        # cohorts and tiers of a league board (engine.core.league; docs/api.md §16), else None
        self.league: LeagueTable | None = None if spec.league is None else LeagueTable(spec.league)
        # erased players' events (docs/api.md §17): keyed hashes of their ids with their content folds, kept
        # forever, so a redelivery stays DUPLICATE_IGNORED / REJECTED_EVENT_ID_CONFLICT; the secret keys them
        self.erased = DedupTable(_FOREVER, spec.board_id)
        self.erasure_secret = b""

    @property
    def remembers_every_id(self) -> bool:
        """The dedup table has never evicted an id, so it holds every id this
        board ever admitted: a NEW verdict means never seen, and the journal's
        search for redeliveries older than the window can be skipped
        (``Partition.apply_columns(ids_new=...)``). Read it before deciding a batch."""
        return self.dedup.evicted == 0

    # ------------------------------------------------------------- decide

    def decide_columns(self, cols: ScoreColumns, ids: BatchIds | None = None, earlier: DedupTable | None = None,
                       state: BoardState | None = None, entry_over: EntryTable | None = None) -> ScoreVerdicts:
        """The verdict of each event of a batch, in order, as if each were
        applied before the next (a repeated id in the batch is judged against
        its first copy). Pure: changes nothing. One pass of the dedup kernel
        over the batch's columns (the window, the ids ever held and
        ``earlier``: ids that submissions decided before this one in the same
        cycle remember), numpy for season state and review.

        ``ids``: the batch's ids already encoded, when the caller has them;
        ``state``: the season state to judge under (default: this board's;
        a state change earlier in the cycle passes the new one);
        ``entry_over``: the entry table's overlay (what earlier submissions
        of the cycle admitted or joined), on a board with entry rules, whose
        checks come after dedup and before the holds (:mod:`engine.core.entry`). O(n)."""
        n = len(cols)
        code = R.CODE
        fps = fingerprints(cols, None if ids is None else (ids.players, ids.player_offs))
        words = self.dedup.words_many(cols.event_ids, None if ids is None else (ids.events, ids.event_offs))
        also = [t for t in (self.quarantined, earlier) if t is not None and len(t)]
        seen = self.dedup.check_many(cols.event_ids, fps, words, also)
        erased = None
        if len(self.erased):  # an erased player's event sent again (docs/api.md §17)
            fresh = np.flatnonzero(seen == Seen.NEW.value)
            if len(fresh):
                keyed = keyed_words(self.erasure_secret, self.spec.board_id, [cols.event_ids[i] for i in fresh])
                again = self.erased.check_many([], fps[fresh], keyed)
                erased = fresh[again != Seen.NEW.value]
                seen[fresh] = np.where(again != Seen.NEW.value, again, seen[fresh])
        verdicts = np.zeros(n, np.uint8)
        verdicts[seen == Seen.DUPLICATE.value] = code[Outcome.DUPLICATE_IGNORED]
        verdicts[seen == Seen.CONFLICT.value] = code[Outcome.REJECTED_EVENT_ID_CONFLICT]
        new = np.flatnonzero(seen == Seen.NEW.value)
        if len(new):
            if not accepts_scores(self.state if state is None else state):
                verdicts[new] = code[Outcome.HELD_FOR_CORRECTION]
            elif self.spec.review_above is not None:
                verdicts[new[cols.values[new] > self.spec.review_above]] = code[Outcome.HELD_FOR_REVIEW]
            rules = self.spec.entry
            if rules is not None and rules.limits:
                judged = judge(rules, self.entry, entry_over, cols.player_ids,
                               None if ids is None else (ids.players, ids.player_offs), seen == Seen.NEW.value,
                               verdicts, self._rowed(cols))
                verdicts[new] = judged[new]
        return ScoreVerdicts(verdicts, words, fps, erased if erased is not None and len(erased) else None)

    def _rowed(self, cols: ScoreColumns) -> np.ndarray:
        return makes_row(self.spec.policy, self.spec.max_plausible_time_ms, cols.values)

    def check_decision(self, event_id: str, taken: Collection[str] = (), state: BoardState | None = None) -> HeldEvent:
        """The held event a moderator's decision on ``event_id`` resolves.
        Pure. ``taken``: ids decided earlier in the same cycle. Raises
        AlreadyDecided for a second decision, EventNotFound when the event is
        not held, InvalidTransition on an ARCHIVED board."""
        if event_id in self.decided or event_id in taken:
            first = self.decided[event_id][0] if event_id in self.decided else "pending"
            raise AlreadyDecided(f"Event {event_id!r} was already decided ({first}).", "event_id")
        held = self.held.get(event_id)
        if held is None:
            raise EventNotFound(f"Event {event_id!r} is not held on this board.", "event_id")
        self.check_corrections_allowed(state)
        return held

    def check_corrections_allowed(self, state: BoardState | None = None) -> None:
        if not accepts_corrections(self.state if state is None else state):
            raise InvalidTransition(f"Board {self.spec.board_id!r} is ARCHIVED: it takes no more corrections.", None)

    # -------------------------------------------------------------- apply

    def apply_scores(self, cols: ScoreColumns, verdicts: np.ndarray, words: np.ndarray | None = None,
                     fps: np.ndarray | None = None) -> None:
        """Fold a logged score record in: remember the ids that were admitted
        or held, in record order, and hold the held ones. ``words`` / ``fps``:
        the record's identity words and fingerprints when the caller has them
        (from ``decide_columns``), else they are computed here. O(n)."""
        got = ScoreVerdicts(verdicts, words, fps)
        keep = got.remembered()
        if not len(keep):
            return
        if words is None or fps is None:
            ids = BatchIds.of(cols.player_ids, cols.event_ids)
            words = self.dedup.words_of(ids.events, ids.event_offs)
            fps = fingerprints(cols, (ids.players, ids.player_offs))
        self.dedup.remember_words(words[keep], fps[keep])
        self.fold_entry(cols, verdicts)
        kept = verdicts[keep]
        held = keep[(kept == HELD_CODES[0]) | (kept == HELD_CODES[1])]
        if not len(held):
            return
        self.quarantined.remember_words(words[held], fps[held])
        part = cols.take(held)  # the held rows only: a Python object per held event, none per other event
        for e, p, v, a, sub, m, subs, code in zip(part.event_ids, part.player_ids, part.values.tolist(),
                                                  part.achieved.tolist(), part.submitted.tolist(), part.metadata(),
                                                  part.subscores(), verdicts[held].tolist()):
            self.held[e] = HeldEvent(e, p, v, a, sub, R.outcome_of(code), m, subs)

    def fold_entry(self, cols: ScoreColumns, verdicts: np.ndarray, over: EntryTable | None = None) -> None:
        """Count a logged score record's admitted events in the entry table
        (or in a cycle's overlay ``over`` of it), on a board with entry rules."""
        rules = self.spec.entry
        if rules is not None and rules.limits:
            if over is None:
                self.entry.fold_scores(cols.player_ids, verdicts, self._rowed(cols))
            else:
                over.fold_scores(cols.player_ids, verdicts, self._rowed(cols), base=self.entry)

    def fold_decided_row(self, player_id: str, value: int, decision: str, over: EntryTable | None = None) -> None:
        """A moderator's apply of a held event makes its player's row (counted, never refused: engine.core.entry)."""
        rules = self.spec.entry
        if decision == "apply" and rules is not None and rules.limits and \
                makes_row(self.spec.policy, self.spec.max_plausible_time_ms, np.array([value], np.int64))[0]:
            if over is None:
                self.entry.fold_row(player_id)
            else:
                over.fold_row(player_id, base=self.entry)

    def apply_state(self, state: BoardState, position: int | None) -> None:
        """Fold a logged state change in. ``position`` is the log offset of
        its record: events before it were admitted under the old state,
        events after it under the new one, so a freeze is anchored to the
        log, not a clock. (Whether the move was allowed was decided before
        it was logged: :func:`engine.core.season.next_state`.)"""
        self.state = state
        if state is BoardState.FROZEN:
            self.freeze_position = position

    def apply_decision(self, event_id: str, decision: str) -> None:
        """Fold a logged moderator decision in: the held event is decided."""
        held = self.held.pop(event_id, None)
        if held is not None:
            self.decided[event_id] = (decision, held)
            self.fold_decided_row(held.player_id, held.value, decision)
            if decision == "apply" and self.league is not None:
                self.league.place([held.player_id])

    def apply_join(self, player_id: str, position: int) -> None:
        """Fold a logged join in: the player's position, and on a league their cohort."""
        self.entry.fold_join(player_id, position)
        if self.league is not None:
            self.league.place([player_id])

    def apply_joins(self, player_ids: Sequence[str], first: int) -> None:
        """Fold the logged joins of one request in (an ``H`` record): :meth:`apply_join` for each in order."""
        self.entry.fold_joins(player_ids, first)
        if self.league is not None:
            self.league.place(player_ids)

    def erase(self, player_ids: Sequence[str], events: ErasedEvents | None) -> None:
        """Fold an erasure in (docs/api.md §17): the players' held and decided events, entry and cohort go;
        their events' ids in the dedup window take their keyed hashes' place (the ring keeps its order), and
        the keyed hashes with the content folds are kept for good."""
        gone = set(player_ids)
        for eid in [e for e, h in self.held.items() if h.player_id in gone]:
            del self.held[eid]
        for eid in [e for e, (_, h) in self.decided.items() if h.player_id in gone]:
            del self.decided[eid]
        if len(self.entry):
            self.entry.erase(list(gone))
        if self.league is not None:
            self.league.erase(list(gone))
        if events is not None and events.event_ids:
            keyed = np.frombuffer(events.keyed, np.uint32).reshape(-1, 3)
            folds = np.frombuffer(events.folds, "<u4").astype(np.uint64)
            words = self.dedup.words_many(list(events.event_ids))
            self.dedup.rekey(words, keyed)
            self.erased.remember_words(keyed, folds)
        every = [h for _, h in self.decided.values()] + list(self.held.values())
        self.quarantined = DedupTable(_FOREVER, self.spec.board_id)
        if every:
            self.quarantined.remember_many([h.event_id for h in every], [_content(h) for h in every])

    # --------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        def held_list(h: HeldEvent) -> list:
            out = [h.event_id, h.player_id, h.value, h.achieved_at, h.submitted_at, h.reason.value]
            if h.subscores:  # 8th item (router state format 4): the metadata item then always comes before it
                return out + [h.metadata, list(h.subscores)]
            return out + [h.metadata] if h.metadata else out

        out = {
            "state": self.state.value,
            "freeze_position": self.freeze_position,
            "dedup": self.dedup.to_state(),
            "held": [held_list(h) for h in self.held.values()],
            "decided": [[eid, d, held_list(h)] for eid, (d, h) in self.decided.items()],
        }
        if len(self.entry):  # additive: absent, no player joined or was counted (docs/storage.md)
            out["entry"] = self.entry.to_state()
        if self.league is not None and len(self.league.players):  # additive, like "entry"
            out["league"] = self.league.to_state()
        if len(self.erased):  # additive: the keyed hashes of erased players' events (docs/api.md §17)
            out["erased"] = self.erased.to_state()
        return out

    @classmethod
    def from_state(cls, spec: BoardSpec, dedup_retention: int, state: dict) -> "Admission":
        a = cls(spec, dedup_retention)
        a.state = BoardState(state["state"])
        a.freeze_position = state["freeze_position"]
        a.dedup = DedupTable.from_state(dedup_retention, state["dedup"], spec.board_id)

        def held(x: list) -> HeldEvent:
            return HeldEvent(x[0], x[1], x[2], x[3], x[4], Outcome(x[5]), x[6] if len(x) > 6 else b"",
                             tuple(x[7]) if len(x) > 7 else ())

        a.held = {x[0]: held(x) for x in state["held"]}
        if "entry" in state:
            a.entry = EntryTable.from_state(state["entry"])
        if "league" in state and spec.league is not None:
            a.league = LeagueTable.from_state(spec.league, state["league"])
        a.decided = {eid: (d, held(h)) for eid, d, h in state["decided"]}
        if "erased" in state:
            a.erased = DedupTable.from_state(_FOREVER, state["erased"], spec.board_id)
        every = [h for _, h in a.decided.values()] + list(a.held.values())
        if every:
            a.quarantined.remember_many([h.event_id for h in every], [_content(h) for h in every])
        return a

    def _check(self) -> None:
        self.dedup._check()
        self.quarantined._check()
        self.entry._check()
        if self.league is not None:
            self.league._check()
        assert not (set(self.held) & set(self.decided))
        for h in self.held.values():
            assert h.reason in (Outcome.HELD_FOR_CORRECTION, Outcome.HELD_FOR_REVIEW)
        every = list(self.held.values()) + [h for _, h in self.decided.values()]
        assert len(self.quarantined) == len(every)
        for h in every:
            assert self.quarantined.check(h.event_id, _content(h)) is Seen.DUPLICATE


def _content(h: HeldEvent | ScoreEvent) -> int:
    return fingerprint(h.player_id, h.value, h.achieved_at, h.submitted_at, h.metadata, h.subscores)
