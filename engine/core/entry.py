"""Competition entry: joins, the player cap and the attempt cap (docs/api.md §16, "Entry"). Pure.

Per board, an :class:`EntryTable` keeps the players the entry rules know
about: every player who joined (their 0-based position in the order of
joining) and, on a board whose entry rules judge score events
(:attr:`engine.core.model.EntrySpec.limits`), every player with an admitted score
event (their attempt count, and whether they have a row). Players are
interned in a :class:`engine.core.players.PlayerTable` with one column per fact,
so memory grows with players, never with events, and there is no Python
object per player.

What the rules count (written down here once):

* **An attempt** is an *admitted* score event: one the router lets through
  to the shards (verdict 0, :data:`engine.core.records.APPLY`), whatever the
  shard then answers (a new best, not an improvement, an invalid timing, a
  total out of range). Duplicates, id conflicts, holds (for correction or
  review) and this module's own rejections are not attempts. A moderator's
  later apply of a held event is not an attempt either, and is never refused
  by these rules (the moderator decides).
* **A player with a row** (what ``max_players`` caps when joining is not
  required) is one whose admitted event makes a row on the shard: every
  admitted event does, except one that can never make one, an invalid timing
  on a ``fastest_time`` board (a time <= 0 or above
  ``max_plausible_time_ms``). A moderator's apply of a held event makes a row
  too (counted, never refused). A row, once made, stays counted (an
  invalidation does not give the seat back).
* Checks, for an event the dedup found new, in this order: not joined on a
  ``join_required`` board (``REJECTED_NOT_JOINED``); a player without a row
  on a full board when joining is not required (``REJECTED_BOARD_FULL``);
  ``max_attempts`` admitted events already (``REJECTED_MAX_ATTEMPTS``); only
  then the season state and review holds. The router remembers the rejected
  events' ids like any other (a resend is ``DUPLICATE_IGNORED``).

Decide, then fold (docs/consistency.md, "One path"): :func:`judge` reads
the table (plus what earlier submissions of the same sequencing cycle
decided, a second small table: the overlay) and returns verdicts, in one
numba pass over the batch's columns; :meth:`EntryTable.fold_scores`,
:meth:`EntryTable.fold_join` and :meth:`EntryTable.fold_row` are the only
mutators, run on logged records (live and in recovery alike).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numba
import numpy as np

from engine.core.errors import BoardFull, BoardNotOpen
from engine.core.model import EntrySpec, Outcome, Policy
from engine.core.players import PlayerTable, encode_ids, gather

# Outcome codes (engine.core.records.CODE; repeated here so this module stays below records)
NOT_JOINED, BOARD_FULL, MAX_ATTEMPTS = 17, 18, 19
ENTRY_CODES = (NOT_JOINED, BOARD_FULL, MAX_ATTEMPTS)
ENTRY_OUTCOMES = (Outcome.REJECTED_NOT_JOINED, Outcome.REJECTED_BOARD_FULL, Outcome.REJECTED_MAX_ATTEMPTS)


class PlayerEntry(NamedTuple):
    """What the entry rules know of one player: ``position`` (None: not
    joined), admitted ``attempts``, and whether they have a ``row``."""

    position: int | None
    attempts: int
    row: bool


def makes_row(policy: Policy, max_plausible_time_ms: int, values: np.ndarray) -> np.ndarray:
    """Per event, whether admitting it makes (or keeps) a row: all but an
    invalid timing on a fastest_time board."""
    if policy is Policy.FASTEST_TIME:
        return (values > 0) & (values <= max_plausible_time_ms)
    return np.ones(len(values), np.bool_)


class EntryTable:
    """The entry state of one board (see the module doc). ``joined``: how
    many players joined; ``rows``: how many players have a row."""

    def __init__(self) -> None:
        self.players = PlayerTable()
        self.position = np.zeros(0, np.int64)  # -1: not joined
        self.attempts = np.zeros(0, np.int64)
        self.row = np.zeros(0, np.bool_)
        self.joined = 0
        self.rows = 0

    def __len__(self) -> int:
        return len(self.players)

    def get(self, player_id: str) -> PlayerEntry | None:
        i = int(self.players.lookup([player_id])[0])
        if i < 0:
            return None
        pos = int(self.position[i])
        return PlayerEntry(None if pos < 0 else pos, int(self.attempts[i]), bool(self.row[i]))

    def _room(self) -> None:
        n = len(self.players)
        if n > len(self.position):
            size = max(64, 2 * n)
            for name, fill in (("position", -1), ("attempts", 0), ("row", False)):
                old = getattr(self, name)
                new = np.full(size, fill, old.dtype)
                new[:len(old)] = old
                setattr(self, name, new)

    def _intern(self, buf: np.ndarray, boffs: np.ndarray, base: "EntryTable | None") -> np.ndarray:
        """Indexes of these players, adding the new ones with what ``base``
        knows of them (the overlay starts from the registry's table), else
        nothing (not joined, no attempts, no row)."""
        before = len(self.players)
        idx = self.players.intern_encoded(buf, boffs)
        self._room()
        n = len(self.players)
        if base is not None and n > before:
            fresh = np.arange(before, n)
            got = base.players.intern_encoded(*self.players.bytes_of(fresh), create=False)
            known = got >= 0
            self.position[fresh[known]] = base.position[got[known]]
            self.attempts[fresh[known]] = base.attempts[got[known]]
            self.row[fresh[known]] = base.row[got[known]]
        return idx

    # ------------------------------------------------------------------ fold

    def fold_join(self, player_id: str, position: int, base: "EntryTable | None" = None) -> None:
        """A logged join: the player has ``position`` (a second join of the
        same player is never logged; if one were, the first position stays)."""
        i = int(self._intern(*encode_ids([player_id]), base)[0])
        if self.position[i] < 0:
            self.position[i] = position
            self.joined += 1

    def fold_joins(self, player_ids: Sequence[str], first: int, base: "EntryTable | None" = None) -> None:
        """Logged joins of one request (an ``H`` record): the k-th player has position ``first + k``. O(n),
        one interning pass; the same fold as :meth:`fold_join` for each in order."""
        if not len(player_ids):
            return
        idx = self._intern(*encode_ids(list(player_ids)), base).astype(np.int64)
        new = self.position[idx] < 0
        self.position[idx[new]] = first + np.flatnonzero(new)
        self.joined += int(new.sum())

    def positions(self, buf: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """Per id (one UTF-8 buffer with offsets), its join position (-1: not joined or unknown). Reads only."""
        idx = self.players.intern_encoded(buf, offs, create=False)
        out = np.full(len(idx), -1, np.int64)
        known = idx >= 0
        out[known] = self.position[idx[known]]
        return out

    def fold_scores(self, player_ids: Sequence[str], verdicts: np.ndarray, rowed: np.ndarray,
                    base: "EntryTable | None" = None) -> None:
        """A logged score record: each admitted event (verdict 0) counts an
        attempt, and makes its player's row when ``rowed`` says it does. O(n)."""
        admitted = np.flatnonzero(verdicts == 0)
        if not len(admitted):
            return
        buf, boffs = encode_ids(player_ids)
        if len(admitted) < len(player_ids):  # the admitted rows' bytes: one gather, no Python object per event
            buf, boffs = gather(buf, boffs, admitted)
        idx = self._intern(buf, boffs, base).astype(np.int64)
        np.add.at(self.attempts, idx, 1)
        made = np.unique(idx[rowed[admitted]])
        new = made[~self.row[made]]
        self.row[new] = True
        self.rows += len(new)

    def fold_row(self, player_id: str, base: "EntryTable | None" = None) -> None:
        """A moderator applied a held event of this player that makes a row."""
        i = int(self._intern(*encode_ids([player_id]), base)[0])
        if not self.row[i]:
            self.row[i] = True
            self.rows += 1

    # ------------------------------------------------------------- snapshots

    def erase(self, player_ids: Sequence[str]) -> None:
        """Forget players (docs/api.md §17): no position, attempts or row (a row frees its place under
        ``max_players``), id bytes zeroed. Join positions are never reused."""
        idx = self.players.lookup(list(player_ids))
        got = np.array(sorted({int(i) for i in idx.tolist() if i >= 0}), np.int32)
        if not len(got):
            return
        self.rows -= int(np.count_nonzero(self.row[got]))
        self.position[got] = -1
        self.attempts[got] = 0
        self.row[got] = False
        self.players.scrub(got)

    def to_state(self) -> dict:
        n = len(self.players)
        return {"players": self.players.to_state(), "position": self.position[:n].tobytes(),
                "attempts": self.attempts[:n].tobytes(), "row": self.row[:n].tobytes(),
                "joined": self.joined, "rows": self.rows}

    @classmethod
    def from_state(cls, state: dict) -> "EntryTable":
        t = cls()
        t.players = PlayerTable.from_state(state["players"])
        t.position = np.frombuffer(state["position"], np.int64).copy()
        t.attempts = np.frombuffer(state["attempts"], np.int64).copy()
        t.row = np.frombuffer(state["row"], np.bool_).copy()
        t.joined, t.rows = int(state["joined"]), int(state["rows"])
        return t

    def _check(self) -> None:
        n = len(self.players)
        pos = self.position[:n]
        assert self.joined == int((pos >= 0).sum())
        assert sorted(pos[pos >= 0].tolist()) == list(range(self.joined)), "positions are 0 .. joined - 1"
        assert self.rows == int(self.row[:n].sum())


# ------------------------------------------------------------------- decide

def join_answer(entry: EntrySpec | None, known: PlayerEntry | None, joined: int, is_open: bool) -> int | None:
    """A join's position when the player has joined already (None: a new
    join, allowed). Pure; raises BoardNotOpen / BoardFull for a new join the
    board refuses (docs/api.md §16: a player who joined gets their position
    whatever the board's state)."""
    if known is not None and known.position is not None:
        return known.position
    if not is_open:
        raise BoardNotOpen("The board is not OPEN: players can no longer join it.", None)
    if entry is not None and entry.max_players is not None and joined >= entry.max_players:
        raise BoardFull(f"The board is full: {entry.max_players} players have joined.", None)
    return None


def join_positions(main: EntryTable, over: EntryTable | None, player_ids: Sequence[str]) -> np.ndarray:
    """:func:`lookup` of many players' join positions at once (-1: not joined): the overlay's view first."""
    buf, offs = encode_ids(list(player_ids))
    got = main.positions(buf, offs)
    if over is not None and len(over):
        mine = over.players.intern_encoded(buf, offs, create=False)
        seen = mine >= 0
        got[seen] = over.position[mine[seen]]
    return got


def lookup(main: EntryTable, over: EntryTable | None, player_id: str) -> PlayerEntry | None:
    """What the rules know of a player: the overlay's view first, else the table's."""
    if over is not None:
        got = over.get(player_id)
        if got is not None:
            return got
    return main.get(player_id)


@numba.njit(cache=True)
def _judge_kernel(li, judge, hold, rowed, pos, att, row, rows, join_required, max_players, max_attempts, out):
    """In batch order: each judged event's verdict, as if each earlier one
    were folded in (``pos``/``att``/``row`` per batch-local player, updated)."""
    for i in range(len(li)):
        if not judge[i]:
            continue
        p = li[i]
        if join_required and pos[p] < 0:
            out[i] = NOT_JOINED
        elif not join_required and max_players >= 0 and not row[p] and rows >= max_players:
            out[i] = BOARD_FULL
        elif max_attempts >= 0 and att[p] >= max_attempts:
            out[i] = MAX_ATTEMPTS
        elif hold[i] != 0:
            out[i] = hold[i]
        else:
            out[i] = 0
            att[p] += 1
            if rowed[i] and not row[p]:
                row[p] = True
                rows += 1


def judge(entry: EntrySpec, main: EntryTable, over: EntryTable | None, player_ids: Sequence[str],
          player_bytes: tuple[np.ndarray, np.ndarray] | None, new: np.ndarray, hold: np.ndarray,
          rowed: np.ndarray) -> np.ndarray:
    """The verdict of each event ``new`` marks (the dedup found it new),
    in batch order: an entry rejection, else its hold code (``hold``, 0 for
    none), else 0 (admitted). Other positions are 0. Pure: reads ``main``
    and the overlay ``over`` (what earlier submissions of the cycle decided),
    changes neither. One interning pass and one numba pass over the columns."""
    n = len(player_ids)
    out = np.zeros(n, np.uint8)
    if not n or not new.any():
        return out
    buf, boffs = encode_ids(player_ids) if player_bytes is None else player_bytes
    local = PlayerTable()
    li = local.intern_encoded(buf, boffs)
    k = len(local)
    lbuf, loffs = local.bytes_of(np.arange(k))
    pos = np.full(k, -1, np.int64)
    att = np.zeros(k, np.int64)
    row = np.zeros(k, np.bool_)
    rows = main.rows
    for table in (main, over):  # the overlay's view wins: it was copied from the table and changed since
        if table is None or not len(table):
            continue
        got = table.players.intern_encoded(lbuf, loffs, create=False)
        known = got >= 0
        pos[known] = table.position[got[known]]
        att[known] = table.attempts[got[known]]
        row[known] = table.row[got[known]]
    if over is not None:
        rows = over.rows
    _judge_kernel(li, np.asarray(new, np.bool_), np.asarray(hold, np.uint8), np.asarray(rowed, np.bool_), pos, att,
                  row, rows, entry.join_required, -1 if entry.max_players is None else entry.max_players,
                  -1 if entry.max_attempts is None else entry.max_attempts, out)
    return out


def new_overlay(main: EntryTable) -> EntryTable:
    """An empty overlay table for one cycle: counts start from ``main``'s,
    players are copied in from it when first touched (``base=main``)."""
    t = EntryTable()
    t.joined, t.rows = main.joined, main.rows
    return t
