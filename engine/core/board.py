"""A whole board in one process: the embedded, single-partition facade.

``Board`` composes the three pure pieces a board is made of: admission
(dedup, season, quarantine), one partition (rows and the rank index) and
the ring of versioned changes. It is the engine usable in-process by a
Python caller, and the reference the sharded router is tested against.

>>> from engine.core.model import BoardSpec, Policy, ScoreEvent
>>> b = Board(BoardSpec("g:m:s:global", Policy.BEST_SCORE))
>>> [r.outcome.value for r in b.apply_batch([
...     ScoreEvent("g:m:s:global", "e1", "p-ava", 9800, 1, 1),
...     ScoreEvent("g:m:s:global", "e1", "p-ava", 9800, 1, 1)])]
['APPLIED_FIRST_SCORE', 'DUPLICATE_IGNORED']
>>> b.player("p-ava").rank, b.version
(1, 1)
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from engine.core import checksum as checksum_mod
from engine.core import records as R
from engine.core.admission import Admission
from engine.core.changes import ChangeRing
from engine.core.columns import BatchResult, ScoreColumns
from engine.core.errors import PlayerNotFound, PlayerNotRanked, TotalOutOfRange, ValidationFailed, ViewExpired
from engine.core.model import (
    DEFAULT_DEDUP_RETENTION,
    DEFAULT_DELTA_RETENTION,
    BoardInfo,
    BoardSpec,
    BoardState,
    Changes,
    Checksum,
    DecisionResult,
    Delta,
    EventResult,
    HeldEvent,
    HistoryEntry,
    InvalidationResult,
    Outcome,
    Page,
    PlayerView,
    RankedEntry,
    RowStatus,
    ScoreEvent,
)
from engine.core.journal import Journal
from engine.core.partition import KIND_DECISION, Partition, Row
from engine.core.players import BatchIds
from engine.core.ranking import entries_of, merge_window, rank_locally
from engine.core.season import next_state


class Board:
    def __init__(
        self,
        spec: BoardSpec,
        dedup_retention: int = DEFAULT_DEDUP_RETENTION,
        delta_retention: int = DEFAULT_DELTA_RETENTION,
        journal: Journal | None = None,
    ):
        """``journal``: where the partition journals its events (default: in memory)."""
        self.spec = spec
        self.admission = Admission(spec, dedup_retention)
        self.partition = Partition(spec.policy, spec.max_plausible_time_ms, journal, spec.subscores)
        self.ring = ChangeRing(delta_retention)
        self._corrections = 0

    @property
    def version(self) -> int:
        """Board version: the number of ranking changes so far."""
        return self.partition.changes

    # ------------------------------------------------------------------ writes

    def apply_batch(self, events: Sequence[ScoreEvent]) -> list[EventResult]:
        """Apply events in order; one result each (a wrapper over ``ingest``)."""
        board_id = self.spec.board_id
        mine = [ev for ev in events if ev.board_id == board_id]
        version = self.version  # an unknown-board event answers the version reached before it
        got = self.ingest(ScoreColumns.from_events(mine, board_id)) if mine else None
        out: list[EventResult] = []
        k = 0
        for ev in events:
            if ev.board_id != board_id:
                out.append(EventResult(ev.event_id, Outcome.REJECTED_UNKNOWN_SEASON, version))
                continue
            version = int(got.versions[k])
            out.append(EventResult(ev.event_id, R.outcome_of(int(got.codes[k])), version))
            k += 1
        return out

    def ingest(self, cols: ScoreColumns) -> BatchResult:
        """Apply one batch given as columns: admission decides each event's
        verdict in order, then the partition applies the batch in one call.
        Returns one outcome code and one board version per event."""
        n = len(cols)
        if cols.board_id != self.spec.board_id:
            return BatchResult(np.full(n, R.CODE[Outcome.REJECTED_UNKNOWN_SEASON], np.uint8),
                               np.full(n, self.version, np.int64))
        ids = BatchIds.of(cols.player_ids, cols.event_ids)  # once, for admission and the partition
        ids_new = self.admission.remembers_every_id
        decided = self.admission.decide_columns(cols, ids)  # the router's decide, then its fold (engine.router.registry)
        self.admission.apply_scores(cols, decided.verdicts, decided.words, decided.fps)
        base = self.partition.changes
        got = self.partition.apply_columns(cols, decided.verdicts, ids=ids, ids_new=ids_new)
        versions = base + np.cumsum(got.changed, dtype=np.int64)
        at = np.flatnonzero(got.changed)
        if len(at):
            metas = None
            if cols.moffs is not None:
                full = cols.metadata()
                metas = [full[i] or None for i in at.tolist()]
            self.ring.push_columns(self.partition.players.names(got.players[at]), got.values[at], got.achieved[at],
                                   metadata=metas, subscores=None if cols.subs is None else cols.subs[at])
        return BatchResult(got.codes, versions)

    def apply(self, ev: ScoreEvent) -> EventResult:
        return self.apply_batch([ev])[0]

    def set_state(self, state: BoardState, position: int | None = None) -> BoardInfo:
        """Move the season forward (InvalidTransition when the table forbids it);
        ``position``: the log offset a freeze is anchored to."""
        self.admission.apply_state(next_state(self.admission.state, state), position)
        return self.info()

    def decide(self, event_id: str, decision: str) -> DecisionResult:
        """Apply or reject a held event as an audited correction (docs/api.md §10)."""
        if decision not in ("apply", "reject"):
            raise ValidationFailed("decision must be 'apply' or 'reject'.", "decision")
        held = self.admission.check_decision(event_id)
        self.admission.apply_decision(event_id, decision)
        ev = ScoreEvent(self.spec.board_id, held.event_id, held.player_id, held.value, held.achieved_at, held.submitted_at,
                        held.metadata, held.subscores)
        if decision == "reject":
            self.partition.record_rejection(ev)
            return DecisionResult(event_id, decision, None, self.version)
        outcome, change = self.partition.apply(ev, kind=KIND_DECISION)
        if change is not None:
            self.ring.push(Delta(self.partition.changes, (change,)))
        return DecisionResult(event_id, decision, outcome, self.version)

    def invalidate(self, event_id: str, correction_id: str | None = None) -> InvalidationResult:
        """Invalidate an applied event; the row is recomputed (docs/api.md §10)."""
        self.admission.check_corrections_allowed()
        if correction_id is None:
            correction_id = R.correction_id(event_id, self._corrections + 1)
        self._corrections += 1
        row, change, refused = self.partition.invalidate(event_id, correction_id)
        if refused:
            raise TotalOutOfRange.invalidating(event_id, row.player_id)
        if change is not None:
            self.ring.push(Delta(self.partition.changes, (change,)))
        active = row.status is RowStatus.ACTIVE
        return InvalidationResult(correction_id, row.player_id, row.status, row.value if active else None, self.version)

    # ------------------------------------------------------------------- reads

    def info(self) -> BoardInfo:
        s = self.spec
        return BoardInfo(
            s.board_id, s.policy, self.admission.state, self.version, len(self.partition), s.shards,
            s.max_plausible_time_ms, s.review_above, s.closes_at, s.finalize_after_s, s.subscores,
        )

    def top(self, offset: int = 0, limit: int = 10, at_version: int | None = None) -> Page:
        """Ranks offset+1 .. offset+limit. A pinned ``at_version`` other than
        the current one is gone here (one partition keeps no old views)."""
        if at_version is not None and at_version != self.version:
            raise ViewExpired("That page's version is no longer retained: fetch page 1 again.", "cursor")
        rows = self.partition.top(offset, limit)
        return Page(self.version, tuple(_reranked(rows, offset)))

    def player(self, player_id: str) -> PlayerView:
        row = self._row(player_id)
        rank = self.partition.rank(player_id)
        return _view(self.version, row, rank)

    def ranks(self, player_ids: Iterable[str]) -> list[int | None]:
        """Exact 1-based ranks of many players in one call, in the given
        order; None for an unknown or unranked player (no exception, so one
        missing id does not fail the batch). O(k log n)."""
        return self.partition.ranks(player_ids)

    def approximate_player(self, player_id: str) -> PlayerView:
        """One partition answers exactly: the error bound is 0."""
        v = self.player(player_id)
        return PlayerView(v.version, v.player_id, v.rank, v.value, v.achieved_at, v.status, v.row_version, True, 0)

    def around(self, player_id: str, radius: int) -> Page:
        row = self._row(player_id)
        if row.key is None:
            raise PlayerNotRanked(f"Player {player_id!r} is not ranked on this board.", "player_id")
        before, after, better = self.partition.neighbours(row.key, radius, radius)
        rank = better + 1
        me = (row.key, row.value, row.achieved_at)
        return Page(self.version, tuple(merge_window(rank, me, [entries_of(before)], [entries_of(after)], radius)))

    def ranked_subset(self, player_ids: Iterable[str]) -> Page:
        rows = [r for r in self.partition.multi_get(dict.fromkeys(player_ids)) if r.key is not None]
        return Page(self.version, tuple(rank_locally(entries_of(rows))))

    def changes_since(self, since_version: int) -> Changes:
        deltas = self.ring.since(since_version)
        if deltas is None:
            rows = self.partition.top(0, len(self.partition))
            return Changes("snapshot", self.version, entries=tuple(_reranked(rows, 0)))
        return Changes("deltas", self.version, from_version=since_version, deltas=tuple(deltas))

    def quarantine(self) -> list[HeldEvent]:
        return list(self.admission.held.values())

    def history(self, player_id: str) -> list[HistoryEntry]:
        return [HistoryEntry(h[0], h[1], h[2], h[3], h[5], h[6], h[7]) for h in self.partition.player_history(player_id)]

    def checksum(self) -> Checksum:
        return Checksum(self.version, checksum_mod.render(self.partition.checksum_sum()))

    def _row(self, player_id: str) -> Row:
        row = self.partition.get(player_id)
        if row is None:
            raise PlayerNotFound(f"Player {player_id!r} has no row on this board.", "player_id")
        return row

    # --------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        return {
            "admission": self.admission.to_state(),
            "partition": self.partition.to_state(),
            "corrections": self._corrections,
        }

    @classmethod
    def from_state(cls, spec: BoardSpec, state: dict, dedup_retention: int = DEFAULT_DEDUP_RETENTION,
                   delta_retention: int = DEFAULT_DELTA_RETENTION) -> "Board":
        b = cls(spec, dedup_retention, delta_retention)
        b.admission = Admission.from_state(spec, dedup_retention, state["admission"])
        b.partition = Partition.from_state(spec.policy, spec.max_plausible_time_ms, state["partition"])
        b.ring.reset(b.partition.changes)
        b._corrections = state["corrections"]
        return b

    def _check(self) -> None:
        self.admission._check()
        self.partition._check()
        self.ring._check()
        assert self.ring.version == self.version


def _reranked(rows: Sequence[Row], offset: int) -> list[RankedEntry]:
    return [RankedEntry(offset + i + 1, r.player_id, r.value, r.achieved_at, None, r.metadata, r.subscores)
            for i, r in enumerate(rows)]


def _view(version: int, row: Row, rank: int | None) -> PlayerView:
    return PlayerView(version, row.player_id, rank, row.value, row.achieved_at, row.status, row.row_version,
                      metadata=row.metadata, subscores=row.subscores)
