"""A board partition: rows, the ordered rank index and per-player history.

One partition holds the players of one board that hash to one shard (all
of them when the board has ``shards=1``). It is the only mutator of rows:
``apply`` decides an event's outcome against the player's row under the
board comparator (:mod:`engine.policy`) and changes the row only when the
event ranks strictly better (best_score / fastest_time) or adds its delta
(cumulative). Admission checks that need the whole board (dedup, season
state, review) happen before, in :mod:`engine.admission`.

Structure (Redis zset's dict + ordered index, STYLE §4):

* ``rows``: player id -> :class:`Row` (ACTIVE and INVALIDATED rows);
* ``index``: a ``SortedList`` of the rank keys of ACTIVE rows only;
* ``history``: player id -> list of compact tuples, every event of the
  player in application order (needed to recompute a row on invalidation);
* ``owner``: event id -> player id, for the events that reached ``apply``.

``changes`` counts ranking changes; the board version is the sum of the
``changes`` of its partitions, which is what makes a version a consistent
cut across shards.
"""

from __future__ import annotations

from typing import Iterable

from sortedcontainers import SortedList

from engine.errors import EventNotFound
from engine.model import INT64_MAX, INT64_MIN, Outcome, Policy, RowChange, RowStatus, ScoreEvent
from engine.policy import FIRST, IMPROVED, NOT_IMPROVED, RankKey, key_for

ACTIVE = RowStatus.ACTIVE
INVALIDATED = RowStatus.INVALIDATED

# History tuple layout: (event_id, kind, value, achieved_at, submitted_at, outcome)
H_ID, H_KIND, H_VALUE, H_ACHIEVED, H_SUBMITTED, H_OUTCOME = range(6)
KIND_SCORE, KIND_INVALIDATION, KIND_DECISION = "score", "invalidation", "decision"
# Outcomes whose event is a candidate when a row is recomputed after an
# invalidation: the event reached the comparator (applied or guard-rejected).
_CANDIDATE_OUTCOMES = frozenset(
    {
        Outcome.APPLIED_FIRST_SCORE.value,
        Outcome.APPLIED_NEW_BEST.value,
        Outcome.REJECTED_NOT_AN_IMPROVEMENT.value,
        Outcome.APPLIED.value,
        Outcome.APPLIED_NEW_BEST_TIME.value,
        Outcome.REJECTED_NOT_FASTER.value,
    }
)


class Row:
    """A player's current standing. ``key`` is None while INVALIDATED."""

    __slots__ = ("player_id", "value", "achieved_at", "submitted_at", "status", "row_version", "last_event_id", "key")

    def __init__(self, player_id, value, achieved_at, submitted_at, status, row_version, last_event_id, key):
        self.player_id = player_id
        self.value = value
        self.achieved_at = achieved_at
        self.submitted_at = submitted_at
        self.status = status
        self.row_version = row_version
        self.last_event_id = last_event_id
        self.key = key

    def change(self) -> RowChange:
        return RowChange(self.player_id, self.value, self.achieved_at, self.status)

    def __repr__(self) -> str:
        return (
            f"Row({self.player_id!r}, value={self.value}, achieved_at={self.achieved_at}, "
            f"status={self.status.value}, v{self.row_version})"
        )


class Partition:
    """Rows of one board on one shard. Not thread-safe; one owner mutates it."""

    def __init__(self, policy: Policy, max_plausible_time_ms: int):
        self.policy = policy
        self.max_plausible_time_ms = max_plausible_time_ms
        self.rows: dict[str, Row] = {}
        self.index: SortedList = SortedList()
        self.history: dict[str, list[tuple]] = {}
        self.owner: dict[str, str] = {}
        self.invalid: set[str] = set()
        self.changes = 0
        self._key = key_for(policy)
        self._deferred: dict[str, RankKey | None] | None = None  # player -> key before the batch

    # A burst of events for one player inside a batch (a hot board) moves its
    # index entry once: outcomes, versions and rows are decided per event as
    # always, but the O(log n) SortedList remove/add runs once per player per
    # batch. Nobody reads the index mid-batch, so the final state is identical.

    def defer_index(self) -> None:
        if self._deferred is None:
            self._deferred = {}

    def flush_index(self) -> None:
        deferred, self._deferred = self._deferred, None
        if not deferred:
            return
        index, rows = self.index, self.rows
        for pid, old in deferred.items():
            new = rows[pid].key
            if old != new:
                if old is not None:
                    index.remove(old)
                if new is not None:
                    index.add(new)

    def _move(self, pid: str, old: RankKey | None, new: RankKey | None) -> None:
        deferred = self._deferred
        if deferred is not None:
            if pid not in deferred:
                deferred[pid] = old
            return
        if old is not None:
            self.index.remove(old)
        if new is not None:
            self.index.add(new)

    # ------------------------------------------------------------------ writes

    def apply(self, ev: ScoreEvent, kind: str = KIND_SCORE) -> tuple[Outcome, RowChange | None]:
        """Apply one admitted event under the board's normal rules. O(log n).

        Returns the outcome and the row change when the ranking changed.
        Records the event in the player's history either way.
        """
        policy = self.policy
        pid = ev.player_id
        if ev.event_id in self.owner:  # an id older than the dedup window
            known = self.knows_event(ev)
            if known is not None:
                self._remember(ev, kind, known, owned=False)
                return known, None
        if policy is Policy.FASTEST_TIME and not 0 < ev.value <= self.max_plausible_time_ms:
            self._remember(ev, kind, Outcome.REJECTED_INVALID_TIMING, owned=False)
            return Outcome.REJECTED_INVALID_TIMING, None
        row = self.rows.get(pid)
        if policy is Policy.CUMULATIVE:
            outcome = Outcome.APPLIED
            if row is None or row.status is INVALIDATED:
                change = self._set_row(pid, row, ev.value, ev.achieved_at, ev.submitted_at, ev.event_id)
            else:
                total = row.value + ev.value
                if not INT64_MIN <= total <= INT64_MAX:
                    self._remember(ev, kind, Outcome.REJECTED_TOTAL_OUT_OF_RANGE, owned=False)
                    return Outcome.REJECTED_TOTAL_OUT_OF_RANGE, None
                reached = ev.achieved_at if ev.achieved_at > row.achieved_at else row.achieved_at
                change = self._set_row(pid, row, total, reached, ev.submitted_at, ev.event_id)
            self._remember(ev, kind, outcome, owned=True)
            return outcome, change
        key = self._key(ev.value, ev.achieved_at, ev.submitted_at, pid)
        if row is None:
            outcome = FIRST[policy]
        elif row.status is INVALIDATED or key < row.key:
            outcome = IMPROVED[policy]
        else:
            outcome = NOT_IMPROVED[policy]
        change = None if outcome is NOT_IMPROVED[policy] else self._set_row(
            pid, row, ev.value, ev.achieved_at, ev.submitted_at, ev.event_id, key)
        self._remember(ev, kind, outcome, owned=True)
        return outcome, change

    def record(self, ev: ScoreEvent, outcome: Outcome, kind: str = KIND_SCORE) -> None:
        """Put an event decided before ``apply`` (duplicate, held, conflict)
        into the player's history without touching the row."""
        self._remember(ev, kind, outcome, owned=False)

    def record_rejection(self, ev: ScoreEvent) -> None:
        """A moderator rejected a held event: audit it as a decision."""
        self.history.setdefault(ev.player_id, []).append(
            (ev.event_id, KIND_DECISION, ev.value, ev.achieved_at, ev.submitted_at, "REJECTED")
        )

    def invalidate(self, event_id: str, correction_id: str) -> tuple[Row, RowChange | None]:
        """Invalidate an event the partition applied and recompute its row.

        best / fastest: the best remaining valid candidate event under the
        comparator, with that event's timestamps; cumulative: the sum of the
        remaining valid deltas (a compensating delta). No valid event left:
        the row becomes INVALIDATED (unranked). Idempotent: invalidating an
        invalid event changes nothing. O(h + log n) for h events of the player.
        Raises EventNotFound when the event never reached this partition.
        """
        pid = self.owner.get(event_id)
        if pid is None:
            raise EventNotFound(f"No applied event {event_id!r} on this board.", "event_id")
        row = self.rows[pid]
        hist = self.history[pid]
        target = next(h for h in hist if h[H_ID] == event_id and h[H_OUTCOME] in _CANDIDATE_OUTCOMES)
        if event_id in self.invalid:
            hist.append((correction_id, KIND_INVALIDATION, target[H_VALUE], target[H_ACHIEVED], target[H_SUBMITTED], "ALREADY_INVALIDATED"))
            return row, None
        self.invalid.add(event_id)
        hist.append((correction_id, KIND_INVALIDATION, target[H_VALUE], target[H_ACHIEVED], target[H_SUBMITTED], "INVALIDATED"))
        return row, self._recompute(pid, row, hist, correction_id)

    def _recompute(self, pid: str, row: Row, hist: list[tuple], correction_id: str) -> RowChange | None:
        invalid = self.invalid
        candidates = [
            h for h in hist if h[H_KIND] != KIND_INVALIDATION and h[H_OUTCOME] in _CANDIDATE_OUTCOMES and h[H_ID] not in invalid
        ]
        if not candidates:
            if row.status is INVALIDATED:
                return None
            self._move(pid, row.key, None)
            row.status, row.key = INVALIDATED, None
            row.row_version += 1
            row.last_event_id = correction_id
            self.changes += 1
            return row.change()
        if self.policy is Policy.CUMULATIVE:
            total = sum(h[H_VALUE] for h in candidates)
            reached = max(h[H_ACHIEVED] for h in candidates)
            last = candidates[-1]
            new = (total, reached, last[H_SUBMITTED], correction_id)
        else:
            best = min(candidates, key=lambda h: self._key(h[H_VALUE], h[H_ACHIEVED], h[H_SUBMITTED], pid))
            new = (best[H_VALUE], best[H_ACHIEVED], best[H_SUBMITTED], best[H_ID])
        if row.status is ACTIVE and (row.value, row.achieved_at, row.submitted_at) == new[:3]:
            return None
        return self._set_row(pid, row, *new)

    def _set_row(self, pid, row, value, achieved_at, submitted_at, event_id, key=None) -> RowChange:
        if key is None:
            key = self._key(value, achieved_at, submitted_at, pid)
        if row is None:
            row = Row(pid, value, achieved_at, submitted_at, ACTIVE, 1, event_id, key)
            self.rows[pid] = row
            self._move(pid, None, key)
        else:
            self._move(pid, row.key, key)
            row.value, row.achieved_at, row.submitted_at = value, achieved_at, submitted_at
            row.status, row.key, row.last_event_id = ACTIVE, key, event_id
            row.row_version += 1
        self.changes += 1
        return RowChange(pid, value, achieved_at, ACTIVE)

    def _remember(self, ev: ScoreEvent, kind: str, outcome: Outcome, owned: bool) -> None:
        hist = self.history.get(ev.player_id)
        # ``_value_`` is what the ``value`` property returns, without the enum descriptor call
        item = (ev.event_id, kind, ev.value, ev.achieved_at, ev.submitted_at, outcome._value_)
        if hist is None:
            self.history[ev.player_id] = [item]
        else:
            hist.append(item)
        if owned:
            self.owner[ev.event_id] = ev.player_id

    def knows_event(self, ev: ScoreEvent) -> Outcome | None:
        """Fallback dedup past the board's dedup window: an event id this
        partition applied before answers DUPLICATE_IGNORED (same content) or
        REJECTED_EVENT_ID_CONFLICT; None when the id is unknown here."""
        pid = self.owner.get(ev.event_id)
        if pid is None:
            return None
        if pid != ev.player_id:
            return Outcome.REJECTED_EVENT_ID_CONFLICT
        for h in self.history[pid]:
            if h[H_ID] == ev.event_id and h[H_KIND] != KIND_INVALIDATION:
                same = (h[H_VALUE], h[H_ACHIEVED], h[H_SUBMITTED]) == (ev.value, ev.achieved_at, ev.submitted_at)
                return Outcome.DUPLICATE_IGNORED if same else Outcome.REJECTED_EVENT_ID_CONFLICT
        return None

    # ------------------------------------------------------------------- reads

    def __len__(self) -> int:
        """Number of ranked (ACTIVE) rows."""
        return len(self.index)

    def get(self, player_id: str) -> Row | None:
        return self.rows.get(player_id)

    def multi_get(self, player_ids: Iterable[str]) -> list[Row]:
        """Rows for the ids that have one (any status), in the given order."""
        rows = self.rows
        return [r for r in map(rows.get, player_ids) if r is not None]

    def top(self, offset: int, limit: int) -> list[Row]:
        """Active rows ranked offset+1 .. offset+limit (local ranks). O(log n + limit)."""
        rows = self.rows
        return [rows[k[2]] for k in self.index.islice(offset, offset + limit)]

    def rank(self, player_id: str) -> int | None:
        """Local 1-based rank of an ACTIVE player, None otherwise. O(log n)."""
        row = self.rows.get(player_id)
        if row is None or row.key is None:
            return None
        return self.index.bisect_left(row.key) + 1

    def ranks(self, player_ids: Iterable[str]) -> list[int | None]:
        """``rank`` for many players in one call (None for unranked or
        unknown ids), in the given order. O(k log n), no per-call overhead."""
        get = self.rows.get
        bisect = self.index.bisect_left
        out: list[int | None] = []
        append = out.append
        for pid in player_ids:
            row = get(pid)
            key = None if row is None else row.key
            append(None if key is None else bisect(key) + 1)
        return out

    def count_better_than(self, key: RankKey) -> int:
        """How many ACTIVE rows rank strictly before ``key``. O(log n).

        The exact-rank coordinator sums this over shards: rank = 1 + sum.
        """
        return self.index.bisect_left(key)

    def neighbours(self, key: RankKey, above: int, below: int) -> tuple[list[Row], list[Row]]:
        """Up to ``above`` rows just before ``key`` and ``below`` rows just after
        it (``key`` itself excluded), each list in rank order. O(log n + k)."""
        index, rows = self.index, self.rows
        lo = index.bisect_left(key)
        hi = index.bisect_right(key)
        before = [rows[k[2]] for k in index.islice(max(0, lo - above), lo)] if above > 0 else []
        after = [rows[k[2]] for k in index.islice(hi, hi + below)] if below > 0 else []
        return before, after

    def player_history(self, player_id: str) -> list[tuple]:
        return list(self.history.get(player_id, ()))

    def checksum_sum(self) -> int:
        """Sum mod 2**128 of a stable per-row hash: order-independent and
        additive across partitions (see :mod:`engine.checksum`)."""
        from engine.checksum import row_digest

        total = 0
        for row in self.rows.values():
            total += row_digest(row.player_id, row.value, row.achieved_at, row.status.value, row.row_version)
        return total & ((1 << 128) - 1)

    # --------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        """Plain msgpack-able state: rows, history, invalid ids, counter."""
        rows = [
            [r.player_id, r.value, r.achieved_at, r.submitted_at, r.status is ACTIVE, r.row_version, r.last_event_id]
            for r in self.rows.values()
        ]
        history = [[pid, [list(h) for h in items]] for pid, items in self.history.items()]
        return {"rows": rows, "history": history, "invalid": sorted(self.invalid), "changes": self.changes}

    @classmethod
    def from_state(cls, policy: Policy, max_plausible_time_ms: int, state: dict) -> "Partition":
        p = cls(policy, max_plausible_time_ms)
        keyf = p._key
        keys = []
        for pid, value, achieved, submitted, active, row_version, last in state["rows"]:
            key = keyf(value, achieved, submitted, pid) if active else None
            p.rows[pid] = Row(pid, value, achieved, submitted, ACTIVE if active else INVALIDATED, row_version, last, key)
            if key is not None:
                keys.append(key)
        p.index = SortedList(keys)
        owned_outcomes = _CANDIDATE_OUTCOMES
        for pid, items in state["history"]:
            hist = [tuple(h) for h in items]
            p.history[pid] = hist
            for h in hist:
                if h[H_KIND] != KIND_INVALIDATION and h[H_OUTCOME] in owned_outcomes:
                    p.owner[h[H_ID]] = pid
        p.invalid = set(state["invalid"])
        p.changes = state["changes"]
        return p

    # -------------------------------------------------------------- invariants

    def _check(self) -> None:
        """O(n) self-check used by tests (STYLE §11)."""
        assert not self._deferred, "index has deferred moves outside a batch"
        self.index._check()
        active = [r for r in self.rows.values() if r.status is ACTIVE]
        assert len(active) == len(self.index), "index size != ACTIVE rows"
        expected = sorted(self._key(r.value, r.achieved_at, r.submitted_at, r.player_id) for r in active)
        assert list(self.index) == expected, "index keys disagree with rows"
        for pid, r in self.rows.items():
            assert r.player_id == pid
            assert r.row_version >= 1
            if r.status is ACTIVE:
                assert r.key == self._key(r.value, r.achieved_at, r.submitted_at, pid)
            else:
                assert r.key is None
        for eid, pid in self.owner.items():
            assert pid in self.history and any(h[H_ID] == eid for h in self.history[pid])
        assert self.invalid <= set(self.owner)
        assert self.changes >= 0

