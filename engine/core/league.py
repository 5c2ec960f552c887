"""Leagues: cohorts within tiers, zones, and the tiers a next season carries (docs/api.md §16). Pure.

A league board places each player, when they *enter* it (their join, or
their first admitted score event, or a moderator's apply of a held event
of theirs), into the newest cohort of their tier with fewer than
``cohort_size`` members, else a new one, in log order. Cohorts only fill
up, so the newest cohort of a tier is the only one that can have room.
A player's tier is 1 unless the board was made by next-season from a
league board, which logs the tiers it carries (a ``Q`` record, folded by
:meth:`LeagueTable.carry` before anyone enters). On a series with a league
(docs/api.md §18) the series' own table holds only carried tiers (each
instance's ``Y`` record at its FROZEN, folded by :meth:`LeagueTable.carry`),
and each instance's table has it as its ``base``: a player entering an
instance is placed at the tier the series carried for them when they enter
(1 if none).

A :class:`LeagueTable` keeps, per player, their cohort (interned in a
:class:`engine.core.players.PlayerTable`, a column per fact) and, per
cohort, its tier, number and members (one flat int32 array with
``cohort_size`` slots per cohort). Memory grows with players, never with
events, and there is no Python object per player. The router's registry
folds it from logged records (live and in recovery alike); reads take a
cohort's member ids and rank them like a friends view (one round to the
partitions).

Zones are local to a cohort's *ranked* members (``k`` of them):
``promote`` for local ranks <= P when the tier is below the top, else
``demote`` for local ranks > k - D when the tier is above 1, else none.

>>> t = LeagueTable(LeagueSpec(cohort_size=2, tiers=3, promote=1, demote=1))
>>> t.place(["a", "b", "c"]); [t.where(p) for p in ("a", "c")]
[(1, 1), (1, 2)]
>>> zone(1, 2, tier=1, spec=t.spec), zone(2, 2, tier=2, spec=t.spec)
('promote', 'demote')
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

import numba
import numpy as np

from engine.core.errors import ValidationFailed
from engine.core.model import LeagueSpec
from engine.core.players import PlayerTable, encode_ids, gather

PROMOTE, DEMOTE = "promote", "demote"
#: The bounds of a league's settings (docs/api.md §16).
MIN_COHORT, MAX_COHORT, MAX_TIERS = 2, 1000, 20
_COHORT_ID = re.compile(r"([1-9][0-9]{0,1})-([1-9][0-9]{0,9})")


def check_league(spec: LeagueSpec) -> None:
    """ValidationFailed (field ``league.*``) unless the settings are in range (docs/api.md §16)."""
    for name, lo, hi in (("cohort_size", MIN_COHORT, MAX_COHORT), ("tiers", 1, MAX_TIERS),
                         ("promote", 0, spec.cohort_size), ("demote", 0, spec.cohort_size)):
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValidationFailed(f"{name} must be an integer from {lo} to {hi}.", f"league.{name}")
    if spec.promote + spec.demote > spec.cohort_size:
        raise ValidationFailed("promote + demote must be at most cohort_size.", "league.promote")


def zone(local_rank: int, k: int, tier: int, spec: LeagueSpec) -> str | None:
    """The zone of local rank ``local_rank`` among a cohort's ``k`` ranked members."""
    if tier < spec.tiers and local_rank <= spec.promote:
        return PROMOTE
    if tier > 1 and local_rank > k - spec.demote:
        return DEMOTE
    return None


def zones(local_ranks: np.ndarray, ks: np.ndarray, tiers: np.ndarray, spec: LeagueSpec) -> np.ndarray:
    """:func:`zone` over columns: +1 promote, -1 demote, 0 none."""
    up = (tiers < spec.tiers) & (local_ranks <= spec.promote)
    down = ~up & (tiers > 1) & (local_ranks > ks - spec.demote)
    return up.astype(np.int8) - down.astype(np.int8)


def cohort_id(tier: int, number: int) -> str:
    return f"{tier}-{number}"


def parse_cohort_id(text: str) -> tuple[int, int] | None:
    """``(tier, number)`` of a cohort id ``"<tier>-<n>"``, None when malformed."""
    m = _COHORT_ID.fullmatch(text)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


class Cohort(NamedTuple):
    """One cohort: its tier, its number within the tier, and its members' ids in order of placement."""

    tier: int
    number: int
    members: list[str]

    @property
    def cohort_id(self) -> str:
        return cohort_id(self.tier, self.number)


@numba.njit(cache=True)
def _place(idx, cohort, ptier, c_tier, c_number, c_size, members, newest, numbers, n_cohorts, size):
    """Place each not yet placed player of ``idx`` in order; the new cohort count.
    The caller made room for every player to open a new cohort."""
    for i in range(len(idx)):
        p = idx[i]
        if cohort[p] >= 0:
            continue
        t = ptier[p]
        g = newest[t]
        if g < 0 or c_size[g] >= size:
            g = n_cohorts
            n_cohorts += 1
            numbers[t] += 1
            newest[t] = g
            c_tier[g] = t
            c_number[g] = numbers[t]
            c_size[g] = 0
        members[g * size + c_size[g]] = p
        c_size[g] += 1
        cohort[p] = g
    return n_cohorts


class LeagueTable:
    """The cohorts of one league board (see the module doc)."""

    def __init__(self, spec: LeagueSpec) -> None:
        self.spec = spec
        self.players = PlayerTable()
        self.cohort = np.zeros(0, np.int32)  # per player: its cohort's index, -1 not placed (carried only)
        self.ptier = np.zeros(0, np.int8)  # per player: the tier it is (or will be) placed in
        self.c_tier = np.zeros(0, np.int8)  # per cohort index
        self.c_number = np.zeros(0, np.int32)
        self.c_size = np.zeros(0, np.int32)
        self.members = np.zeros(0, np.int32)  # cohort g's members: members[g * size : g * size + c_size[g]]
        self.newest = np.full(spec.tiers + 1, -1, np.int32)  # per tier (1-based): its newest cohort
        self.numbers = np.zeros(spec.tiers + 1, np.int32)  # per tier: how many cohorts it has
        self.n_cohorts = 0
        self._by_id: dict[tuple[int, int], int] = {}
        #: an instance of a league series: the series' table, whose carried tiers place the players entering
        #: this one (docs/api.md §18); None: a board of its own (its tiers are its ``Q`` record's, else 1)
        self.base: LeagueTable | None = None

    @property
    def placed(self) -> int:
        """How many players entered (were placed)."""
        return int(self.c_size[:self.n_cohorts].sum())

    def _players_room(self) -> None:
        n = len(self.players)
        if n > len(self.cohort):
            size = max(64, 2 * n)
            for name, fill in (("cohort", -1), ("ptier", 1)):
                old = getattr(self, name)
                new = np.full(size, fill, old.dtype)
                new[:len(old)] = old
                setattr(self, name, new)

    def _cohorts_room(self, k: int) -> None:
        need = self.n_cohorts + k
        if need > len(self.c_size):
            size = max(16, 2 * need)
            for name in ("c_tier", "c_number", "c_size"):
                old = getattr(self, name)
                new = np.zeros(size, old.dtype)
                new[:len(old)] = old
                setattr(self, name, new)
            members = np.full(size * self.spec.cohort_size, -1, np.int32)
            members[:len(self.members)] = self.members
            self.members = members

    def _intern(self, buf: np.ndarray, offs: np.ndarray) -> np.ndarray:
        idx = self.players.intern_encoded(buf, offs)
        self._players_room()
        return idx

    # ------------------------------------------------------------------ fold

    def carry(self, player_ids: Sequence[str], tiers: np.ndarray) -> None:
        """The tiers a next season carries (a logged ``Q`` record): where these players will be placed."""
        if not len(player_ids):
            return
        idx = self._intern(*encode_ids(list(player_ids))).astype(np.int64)
        self.ptier[idx] = np.clip(np.asarray(tiers, np.int64), 1, self.spec.tiers).astype(np.int8)

    def place(self, player_ids: Sequence[str]) -> None:
        """Players entering, in log order: each not yet placed goes into its
        tier's newest cohort with room, else a new one. O(n)."""
        if len(player_ids):
            self.place_encoded(*encode_ids(list(player_ids)))

    def place_encoded(self, buf: np.ndarray, offs: np.ndarray) -> None:
        """:meth:`place` for ids as one UTF-8 buffer with offsets."""
        idx = self._intern(buf, offs).astype(np.int64)
        if self.base is not None:
            self._tiers_from_base(idx)
        self._cohorts_room(len(idx))
        before = self.n_cohorts
        self.n_cohorts = int(_place(idx, self.cohort, self.ptier, self.c_tier, self.c_number, self.c_size,
                                    self.members, self.newest, self.numbers, self.n_cohorts, self.spec.cohort_size))
        for g in range(before, self.n_cohorts):
            self._by_id[(int(self.c_tier[g]), int(self.c_number[g]))] = g

    def _tiers_from_base(self, idx: np.ndarray) -> None:
        """The players of ``idx`` not placed yet take the tier the series (``base``) carried for them now
        (1 if none), clipped to this league's tiers. O(n)."""
        fresh = idx[self.cohort[idx] < 0]
        if not len(fresh):
            return
        assert self.base is not None
        buf, offs = self.players.bytes_of(fresh)
        at = self.base.players.intern_encoded(buf, offs, create=False)
        tiers = np.ones(len(fresh), np.int64)
        known = at >= 0
        tiers[known] = np.maximum(self.base.ptier[at[known]].astype(np.int64), 1)
        self.ptier[fresh] = np.clip(tiers, 1, self.spec.tiers).astype(np.int8)

    def entrants(self, player_ids: Sequence[str], verdicts: np.ndarray) -> list[str]:
        """The players of a batch's admitted events (verdict 0) not placed yet,
        each once, in batch order: who the batch makes enter (a ``P`` record). Reads only."""
        admitted = np.flatnonzero(np.asarray(verdicts) == 0)
        if not len(admitted):
            return []
        buf, offs = encode_ids(player_ids)
        if len(admitted) < len(player_ids):
            buf, offs = gather(buf, offs, admitted)
        local = PlayerTable()
        local.intern_encoded(buf, offs)  # local indexes in order of first appearance
        lbuf, loffs = local.bytes_of(np.arange(len(local)))
        known = self.players.intern_encoded(lbuf, loffs, create=False)
        placed = np.zeros(len(local), bool)
        placed[known >= 0] = self.cohort[known[known >= 0]] >= 0
        new = np.flatnonzero(~placed)
        return local.ids_of(new) if len(new) else []

    # ----------------------------------------------------------------- reads

    def where(self, player_id: str) -> tuple[int, int] | None:
        """``(tier, number)`` of the player's cohort; None when they have not entered."""
        g = self.cohort_of(player_id)
        return None if g is None else (int(self.c_tier[g]), int(self.c_number[g]))

    def cohort_of(self, player_id: str) -> int | None:
        i = int(self.players.lookup([player_id])[0])
        if i < 0 or self.cohort[i] < 0:
            return None
        return int(self.cohort[i])

    def find(self, tier: int, number: int) -> int | None:
        """The index of cohort ``tier-number``, None when there is none."""
        return self._by_id.get((tier, number))

    def get(self, g: int) -> Cohort:
        """Cohort ``g``: tier, number and member ids in order of placement."""
        size = self.spec.cohort_size
        idx = self.members[g * size:g * size + int(self.c_size[g])]
        idx = idx[idx >= 0]  # an erased member's slot is -1 (docs/api.md §17)
        return Cohort(int(self.c_tier[g]), int(self.c_number[g]), self.players.ids_of(idx))

    def tier_of(self, player_id: str) -> tuple[int, bool]:
        """``(tier, entered)``: the tier of the player's cohort, else the tier they would be placed in when
        they enter (carried by a ``Q`` record, else, on a series' instance, the tier its series carried for
        them, else 1). O(1)."""
        i = int(self.players.lookup([player_id])[0])
        if i >= 0 and self.cohort[i] >= 0:
            return int(self.c_tier[self.cohort[i]]), True
        if self.base is not None:
            return min(self.base.tier_of(player_id)[0], self.spec.tiers), False
        return (1 if i < 0 else max(1, int(self.ptier[i]))), False

    def listing(self, tier: int | None = None, after: tuple[int, int] | None = None,
                limit: int = 100) -> tuple[list[tuple[int, int, int]], bool]:
        """Cohorts as ``(tier, number, members)`` by tier, then number: those after ``after`` (a cohort's
        (tier, number)), only tier ``tier`` when given, at most ``limit``; and whether more follow.
        ``members`` counts the players placed (erased ones left out, as :meth:`get` does). O(cohorts)."""
        c = self.n_cohorts
        size = self.spec.cohort_size
        tiers = self.c_tier[:c].astype(np.int64)
        numbers = self.c_number[:c].astype(np.int64)
        counts = (self.members[:c * size].reshape(c, size) >= 0).sum(axis=1) if c else np.zeros(0, np.int64)
        key = tiers * (1 << 32) + numbers
        keep = np.ones(c, bool)
        if tier is not None:
            keep &= tiers == tier
        if after is not None:
            keep &= key > after[0] * (1 << 32) + after[1]
        rows = np.flatnonzero(keep)
        rows = rows[np.argsort(key[rows], kind="stable")]
        page = rows[:limit]
        return ([(int(tiers[g]), int(numbers[g]), int(counts[g])) for g in page], len(rows) > limit)

    def cohort_columns(self, buf: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """Per id (as one buffer with offsets), its cohort index (-1: not placed)."""
        idx = self.players.intern_encoded(buf, offs, create=False)
        out = np.full(len(idx), -1, np.int64)
        known = idx >= 0
        out[known] = self.cohort[idx[known]]
        return out

    def erase(self, player_ids: Sequence[str]) -> None:
        """Forget players (docs/api.md §17): their cohort slot becomes -1 (the cohort keeps its size, so the
        placement of later players is as it would have been) and their id bytes are zeroed."""
        idx = self.players.lookup(list(player_ids))
        got = np.array(sorted({int(i) for i in idx.tolist() if i >= 0}), np.int32)
        if not len(got):
            return
        n = self.n_cohorts * self.spec.cohort_size
        self.members[:n][np.isin(self.members[:n], got)] = -1
        self.cohort[got] = -1
        self.ptier[got] = 0
        self.players.scrub(got)

    def entered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every placed player: (id bytes, offsets, cohort index)."""
        n = len(self.players)
        idx = np.flatnonzero(self.cohort[:n] >= 0)
        buf, offs = self.players.bytes_of(idx)
        return buf, offs, self.cohort[idx].astype(np.int64)

    # ------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        n, c = len(self.players), self.n_cohorts
        return {"players": self.players.to_state(), "cohort": self.cohort[:n].tobytes(),
                "ptier": self.ptier[:n].tobytes(), "c_tier": self.c_tier[:c].tobytes(),
                "c_number": self.c_number[:c].tobytes(), "c_size": self.c_size[:c].tobytes(),
                "members": self.members[:c * self.spec.cohort_size].tobytes()}

    @classmethod
    def from_state(cls, spec: LeagueSpec, state: dict) -> "LeagueTable":
        t = cls(spec)
        t.players = PlayerTable.from_state(state["players"])
        t.cohort = np.frombuffer(state["cohort"], np.int32).copy()
        t.ptier = np.frombuffer(state["ptier"], np.int8).copy()
        t.c_tier = np.frombuffer(state["c_tier"], np.int8).copy()
        t.c_number = np.frombuffer(state["c_number"], np.int32).copy()
        t.c_size = np.frombuffer(state["c_size"], np.int32).copy()
        t.members = np.frombuffer(state["members"], np.int32).copy()
        t.n_cohorts = len(t.c_size)
        for g in range(t.n_cohorts):
            tier = int(t.c_tier[g])
            t.newest[tier] = g
            t.numbers[tier] = max(int(t.numbers[tier]), int(t.c_number[g]))
            t._by_id[(tier, int(t.c_number[g]))] = g
        t._players_room()
        return t

    def _check(self) -> None:
        n, size = len(self.players), self.spec.cohort_size
        for g in range(self.n_cohorts):
            k = int(self.c_size[g])
            assert 1 <= k <= size
            mem = self.members[g * size:g * size + k]
            mem = mem[mem >= 0]  # erased members leave a -1
            assert (self.cohort[mem] == g).all()
            assert (self.ptier[mem] == self.c_tier[g]).all()
            if g != self.newest[int(self.c_tier[g])]:
                assert k == size, "only a tier's newest cohort has room"
        assert self.placed == int((self.cohort[:n] >= 0).sum())


class TierMoves(NamedTuple):
    """The tiers a next season carries: per player who had entered, the id and its new tier."""

    id_bytes: np.ndarray
    id_offsets: np.ndarray
    tiers: np.ndarray


def local_ranks(cohorts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For rows given in board rank order with their cohort index (``-1``:
    none), the rows of placed players grouped by cohort with their local
    rank and their cohort's ranked count: ``(rows, local_rank, k)``. O(n log n)."""
    on = np.flatnonzero(cohorts >= 0)
    g = cohorts[on]
    order = np.argsort(g, kind="stable")
    rows = on[order]
    gs = g[order]
    if not len(gs):
        z = np.zeros(0, np.int64)
        return z, z, z
    starts = np.flatnonzero(np.concatenate(([True], gs[1:] != gs[:-1])))
    counts = np.diff(np.append(starts, len(gs)))
    first = np.repeat(starts, counts)
    return rows, np.arange(len(gs)) - first + 1, np.repeat(counts, counts)


def next_tiers(table: LeagueTable, row_bytes: np.ndarray, row_offsets: np.ndarray, order: np.ndarray) -> TierMoves:
    """What next-season carries from a league board (docs/api.md §16): every
    player who had entered keeps their tier, except those in their cohort's
    promote zone (up one) or demote zone (down one) by the ranking now.
    ``row_bytes`` / ``row_offsets``: the board's rows' ids; ``order``: the
    ranked rows' positions in rank order (invalidated rows left out)."""
    buf, offs, g_all = table.entered()
    tiers = table.c_tier[g_all].astype(np.int64) if len(g_all) else np.zeros(0, np.int64)
    if len(order):
        ranked_b, ranked_o = gather(row_bytes, row_offsets, np.asarray(order, np.int64))
        g = table.cohort_columns(ranked_b, ranked_o)
        rows, lr, ks = local_ranks(g)
        if len(rows):
            t_rows = table.c_tier[g[rows]].astype(np.int64)
            move = zones(lr, ks, t_rows, table.spec)
            moved_b, moved_o = gather(ranked_b, ranked_o, rows[move != 0])
            where = PlayerTable()
            where.intern_encoded(buf, offs)
            at = where.intern_encoded(moved_b, moved_o, create=False)
            tiers[at] += move[move != 0]
    return TierMoves(buf, offs, tiers.astype(np.int8))
