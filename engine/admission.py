"""Board-wide admission: dedup, season state, review holds, quarantine.

Before an event may touch a row, the board decides whether it is a
redelivery, a reused id, an event for a closed season or one to hold for
review. These checks need the whole board (an event id is unique per board,
not per shard), so in a sharded board they run once, in the router, in log
order; the partitions then only see events that passed (or are told the
verdict, to keep a complete per-player history).

Order of checks (docs/api.md §7, design Component 08): dedup first, then season
state (HELD_FOR_CORRECTION), then ``review_above`` (HELD_FOR_REVIEW).
"""

from __future__ import annotations

import numpy as np

from engine import records as R
from engine.columns import ScoreColumns
from engine.dedup import DedupTable, Seen, fingerprint, fingerprints
from engine.errors import AlreadyDecided, EventNotFound, InvalidTransition
from engine.model import BoardSpec, BoardState, HeldEvent, Outcome, ScoreEvent
from engine.players import BatchIds
from engine.season import accepts_corrections, accepts_scores, next_state


class Admission:
    """The admission state of one board. Deterministic; not thread-safe."""

    def __init__(self, spec: BoardSpec, dedup_retention: int):
        self.spec = spec
        self.state = BoardState.OPEN
        self.dedup = DedupTable(dedup_retention, spec.board_id)
        self.held: dict[str, HeldEvent] = {}  # pending decisions, in log order
        self.decided: dict[str, tuple[str, HeldEvent]] = {}  # event id -> (decision, event)
        self.freeze_position: int | None = None
        # ids admitted since the last commit: one id, or a batch's identity words and the ids it held
        self._pending: list[str | tuple[np.ndarray, list[str]]] = []

    @property
    def remembers_every_id(self) -> bool:
        """The dedup table has never evicted an id, so it holds every id this
        board ever admitted: a NEW verdict means never seen, and the journal's
        search for redeliveries older than the window can be skipped
        (``Partition.apply_columns(ids_new=...)``). Read it before deciding a batch."""
        return self.dedup.evicted == 0

    def admit(self, ev: ScoreEvent) -> Outcome | None:
        """The verdict for an event, or None when it goes on to ``apply``.

        Remembers the id (except on conflict, which keeps the original).
        O(1).
        """
        event_id = ev.event_id
        fp = fingerprint(ev.player_id, ev.value, ev.achieved_at, ev.submitted_at, ev.metadata, ev.subscores)
        dedup = self.dedup
        seen = dedup.check(event_id, fp)
        if seen is Seen.DUPLICATE:
            return Outcome.DUPLICATE_IGNORED
        if seen is Seen.CONFLICT:
            return Outcome.REJECTED_EVENT_ID_CONFLICT
        quarantined = self.held.get(event_id)
        if quarantined is None and self.decided:
            quarantined = self._decided_event(event_id)
        if quarantined is not None:  # the window forgot it, the quarantine did not
            same = (quarantined.player_id, quarantined.value, quarantined.achieved_at, quarantined.submitted_at,
                    quarantined.metadata, quarantined.subscores) == ev.content
            return Outcome.DUPLICATE_IGNORED if same else Outcome.REJECTED_EVENT_ID_CONFLICT
        dedup.add(event_id, fp)
        self._pending.append(event_id)
        if not accepts_scores(self.state):
            return self._hold(ev, Outcome.HELD_FOR_CORRECTION)
        review = self.spec.review_above
        if review is not None and ev.value > review:
            return self._hold(ev, Outcome.HELD_FOR_REVIEW)
        return None

    def decide_columns(self, cols: ScoreColumns, ids: BatchIds | None = None) -> np.ndarray:
        """``admit`` for each event of a batch, in order, as uint8 verdict
        codes (``engine.records.CODE``; 0 = go on to apply): one dedup-table
        call for the batch (it sees duplicates inside the batch too) and
        numpy for season state and review. A board with a quarantine takes
        the event-by-event path (quarantined ids are checked one by one).
        ``ids``: the batch's ids already encoded, when the caller has them
        (each id's ``str`` is then read once, for every step)."""
        n = len(cols)
        code = R.CODE
        if self.held or self.decided:
            return np.fromiter((0 if v is None else code[v] for v in map(self.admit, cols.events())),
                               dtype=np.uint8, count=n)
        fps = fingerprints(cols, None if ids is None else (ids.players, ids.player_offs))
        words = self.dedup.words_many(cols.event_ids, None if ids is None else (ids.events, ids.event_offs))
        seen = self.dedup.check_many(cols.event_ids, fps, words)
        verdicts = np.zeros(n, np.uint8)
        verdicts[seen == Seen.DUPLICATE.value] = code[Outcome.DUPLICATE_IGNORED]
        verdicts[seen == Seen.CONFLICT.value] = code[Outcome.REJECTED_EVENT_ID_CONFLICT]
        new = np.flatnonzero(seen == Seen.NEW.value)
        if not len(new):
            return verdicts
        added = words[new] if len(new) < n else words
        self.dedup.add_words(added, fps[new])  # the ids' str objects are not touched again (cold in cache)
        held: list[str] = []
        self._pending.append((added, held))
        if not accepts_scores(self.state):
            hold, reason = new, Outcome.HELD_FOR_CORRECTION
        elif self.spec.review_above is not None:
            hold, reason = new[cols.values[new] > self.spec.review_above], Outcome.HELD_FOR_REVIEW
        else:
            return verdicts
        verdicts[hold] = code[reason]
        held.extend(cols.event_ids[i] for i in hold.tolist())
        metas, subs = cols.metadata(), cols.subscores()
        for i in hold.tolist():
            self._hold(ScoreEvent(cols.board_id, cols.event_ids[i], cols.player_ids[i], int(cols.values[i]),
                                  int(cols.achieved[i]), int(cols.submitted[i]), metas[i], subs[i]), reason)
        return verdicts

    def replay_columns(self, cols: ScoreColumns, verdicts: np.ndarray) -> None:
        """``replay`` of a logged batch: remember the ids that were admitted
        or held, in order, and rebuild the holds."""
        held_codes = (R.CODE[Outcome.HELD_FOR_CORRECTION], R.CODE[Outcome.HELD_FOR_REVIEW])
        keep = np.flatnonzero((verdicts == R.APPLY) | (verdicts == held_codes[0]) | (verdicts == held_codes[1]))
        if not len(keep):
            return
        ids = BatchIds.of(cols.player_ids, cols.event_ids)
        words = self.dedup.words_of(ids.events, ids.event_offs)
        fps = fingerprints(cols, (ids.players, ids.player_offs))
        self.dedup.remember_words(words[keep], fps[keep])
        metas = None
        for i in keep.tolist():
            if verdicts[i] != R.APPLY:
                metas = cols.metadata() if metas is None else metas
                self._hold(ScoreEvent(cols.board_id, cols.event_ids[i], cols.player_ids[i], int(cols.values[i]),
                                      int(cols.achieved[i]), int(cols.submitted[i]), metas[i]),
                           R.outcome_of(int(verdicts[i])))

    def commit(self) -> None:
        """The admitted events are durable: make their ids final. O(k)."""
        self._pending.clear()
        self.dedup.trim()

    def rollback(self) -> None:
        """The log refused the batch: forget what ``admit`` remembered since
        the last commit, so a retry is judged afresh. O(k)."""
        for item in reversed(self._pending):
            if isinstance(item, str):
                self.dedup.discard(item)
                self.held.pop(item, None)
                continue
            words, held = item
            for w0, w1, w2 in reversed(words.tolist()):
                self.dedup.discard_words(w0, w1, w2)
            for event_id in held:
                self.held.pop(event_id, None)
        self._pending.clear()

    def replay(self, ev: ScoreEvent, verdict: Outcome | None) -> None:
        """Fold a logged admission verdict back in (recovery): the same
        state ``admit`` built, whatever today's dedup settings say."""
        if verdict is None or verdict in (Outcome.HELD_FOR_CORRECTION, Outcome.HELD_FOR_REVIEW):
            self.dedup.remember(ev.event_id, fingerprint(ev.player_id, ev.value, ev.achieved_at, ev.submitted_at,
                                                         ev.metadata, ev.subscores))
            if verdict is not None:
                self._hold(ev, verdict)

    def _decided_event(self, event_id: str) -> HeldEvent | None:
        d = self.decided.get(event_id)
        return d[1] if d else None

    def _hold(self, ev: ScoreEvent, reason: Outcome) -> Outcome:
        self.held[ev.event_id] = HeldEvent(ev.event_id, ev.player_id, ev.value, ev.achieved_at, ev.submitted_at, reason,
                                           ev.metadata, ev.subscores)
        return reason

    def set_state(self, wanted: BoardState, position: int | None = None) -> BoardState:
        """Move the season forward (table in :mod:`engine.season`).

        ``position`` is the log offset of the state-change record: events
        before it were admitted under the old state, events after it under
        the new one, so the freeze is anchored to the log, not a clock.
        """
        self.state = next_state(self.state, wanted)
        if wanted is BoardState.FROZEN:
            self.freeze_position = position
        return self.state

    def take_decision(self, event_id: str, decision: str) -> HeldEvent:
        """Resolve a held event; returns it so the caller can apply it.

        Raises AlreadyDecided for a second decision, EventNotFound when the
        event is not held, InvalidTransition on an ARCHIVED board.
        """
        if event_id in self.decided:
            raise AlreadyDecided(f"Event {event_id!r} was already decided ({self.decided[event_id][0]}).", "event_id")
        held = self.held.get(event_id)
        if held is None:
            raise EventNotFound(f"Event {event_id!r} is not held on this board.", "event_id")
        self.check_corrections_allowed()
        del self.held[event_id]
        self.decided[event_id] = (decision, held)
        return held

    def check_corrections_allowed(self) -> None:
        if not accepts_corrections(self.state):
            raise InvalidTransition(f"Board {self.spec.board_id!r} is ARCHIVED: it takes no more corrections.", None)

    # --------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        def held_list(h: HeldEvent) -> list:
            out = [h.event_id, h.player_id, h.value, h.achieved_at, h.submitted_at, h.reason.value]
            if h.subscores:  # 8th item (router state format 4): the metadata item then always comes before it
                return out + [h.metadata, list(h.subscores)]
            return out + [h.metadata] if h.metadata else out

        return {
            "state": self.state.value,
            "freeze_position": self.freeze_position,
            "dedup": self.dedup.to_state(),
            "held": [held_list(h) for h in self.held.values()],
            "decided": [[eid, d, held_list(h)] for eid, (d, h) in self.decided.items()],
        }

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
        a.decided = {eid: (d, held(h)) for eid, d, h in state["decided"]}
        return a

    def _check(self) -> None:
        self.dedup._check()
        assert not (set(self.held) & set(self.decided))
        for h in self.held.values():
            assert h.reason in (Outcome.HELD_FOR_CORRECTION, Outcome.HELD_FOR_REVIEW)
