"""Prizes and awards (docs/api.md §16, "Prizes"). Pure.

A board's prizes are up to :data:`MAX_PRIZES` non-overlapping 1-based rank
ranges, each with a reward (a JSON object of at most
:data:`MAX_REWARD_BYTES` bytes compact). When the board becomes FINALIZED,
:func:`compute_awards` turns the ranking at that log position into awards:
one per ranked player whose strict rank (cohort-local on a league) falls in
a range, in award order (rank order; on a league by tier, then cohort
number, then local rank). The router logs them after the FINALIZED record
as ``A`` records (:func:`award_records`, in parts, so no single append
holds ingest back for long) and folds them into an :class:`AwardTable`,
which answers the paged awards read. Awards never change afterwards.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from engine.core import records as R
from engine.core.errors import ValidationFailed
from engine.core.archive import rank_order, rows_from_wire
from engine.core.league import LeagueTable, cohort_id, local_ranks
from engine.core.model import Policy, Prize
from engine.core.players import PlayerTable, encode_ids, gather, ids_of

MAX_PRIZES = 100
MAX_REWARD_BYTES = 1024
#: awards per ``A`` record: one part (its pack, append and fold, ~15 ms) holds the event loop only briefly
AWARDS_PER_RECORD = 10_000


def check_prizes(prizes: Sequence[Prize]) -> None:
    """ValidationFailed (field ``prizes[i]...``) unless the ranges are valid and do not overlap."""
    if len(prizes) > MAX_PRIZES:
        raise ValidationFailed(f"A board has at most {MAX_PRIZES} prize ranges.", "prizes")
    for i, p in enumerate(prizes):
        if not 1 <= p.first <= p.last:
            raise ValidationFailed("ranks must be [from, to] with 1 <= from <= to.", f"prizes[{i}].ranks")
        if len(p.reward.encode()) > MAX_REWARD_BYTES:
            raise ValidationFailed(f"reward must encode to at most {MAX_REWARD_BYTES} bytes of compact JSON.",
                                   f"prizes[{i}].reward")
    ranges = sorted((p.first, p.last, i) for i, p in enumerate(prizes))
    for (_, last, _), (first, _, j) in zip(ranges, ranges[1:]):
        if first <= last:
            raise ValidationFailed("Prize rank ranges must not overlap.", f"prizes[{j}].ranks")


def prize_of(prizes: Sequence[Prize], ranks: np.ndarray) -> np.ndarray:
    """Per rank, the index of the prize range holding it (-1: none). O(n log p)."""
    if not prizes or not len(ranks):
        return np.full(len(ranks), -1, np.int64)
    by_first = sorted(range(len(prizes)), key=lambda i: prizes[i].first)
    firsts = np.array([prizes[i].first for i in by_first], np.int64)
    lasts = np.array([prizes[i].last for i in by_first], np.int64)
    at = np.searchsorted(firsts, ranks, side="right") - 1
    ok = (at >= 0) & (ranks <= lasts[np.maximum(at, 0)])
    out = np.full(len(ranks), -1, np.int64)
    out[ok] = np.asarray(by_first, np.int64)[at[ok]]
    return out


class Awards(NamedTuple):
    """Awards as columns, in award order: ids (one UTF-8 buffer with offsets),
    strict ranks, cohort tier and number (0 off leagues), prize index."""

    id_bytes: np.ndarray
    id_offsets: np.ndarray
    ranks: np.ndarray
    tiers: np.ndarray
    numbers: np.ndarray
    prizes: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ranks)


def compute_awards(prizes: Sequence[Prize], row_bytes: np.ndarray, row_offsets: np.ndarray, order: np.ndarray,
                   league: LeagueTable | None = None) -> Awards:
    """The awards of a board whose ranked rows, in rank order, are ``order``
    (positions into the rows' ids ``row_bytes`` / ``row_offsets``; rows
    invalidated are not ranked and not in it). On a league, ranks are local
    to each cohort and awards come by tier, cohort number, local rank.
    O(n log n) in numpy."""
    order = np.asarray(order, np.int64)
    if league is None:
        top = max((p.last for p in prizes), default=0)
        rows = order[:top]
        ranks = np.arange(1, len(rows) + 1, dtype=np.int64)
        tiers = np.zeros(len(rows), np.int8)
        numbers = np.zeros(len(rows), np.int32)
    else:
        ranked_b, ranked_o = gather(row_bytes, row_offsets, order)
        g = league.cohort_columns(ranked_b, ranked_o)
        at, ranks, _ = local_ranks(g)
        tiers = league.c_tier[g[at]].astype(np.int8)
        numbers = league.c_number[g[at]].astype(np.int32)
        by = np.lexsort((ranks, numbers, tiers))
        rows, ranks, tiers, numbers = order[at[by]], ranks[by], tiers[by], numbers[by]
    prize = prize_of(prizes, ranks)
    won = np.flatnonzero(prize >= 0)
    buf, offs = gather(row_bytes, row_offsets, rows[won])
    return Awards(buf, offs, ranks[won], tiers[won], numbers[won], prize[won].astype(np.int16))


def board_awards(policy: Policy, subscores: Sequence[str], prizes: Sequence[Prize], chunks: Sequence[Sequence[bytes]],
                 league: LeagueTable | None) -> Awards:
    """The awards of a board whose rows (every row, any status) are the wire
    column ``chunks`` (:func:`engine.core.archive.rows_from_wire`): ranked by the
    board comparator, then :func:`compute_awards`. What runs in a helper
    process for a big board (engine.router.control)."""
    rows = rows_from_wire(chunks)
    order = rank_order(policy, rows, subscores)[:int(np.count_nonzero(rows.active))]
    return compute_awards(prizes, rows.id_bytes, rows.id_offsets, order, league)


def award_parts(awards: Awards, per_record: int = AWARDS_PER_RECORD) -> int:
    """How many ``A`` records the awards take (at least one: an empty award set is logged too)."""
    return max(1, -(-awards.n // per_record))


def award_record(board_id: str, version: int, awards: Awards, k: int,
                 per_record: int = AWARDS_PER_RECORD) -> R.AwardsRecord:
    """The ``k``-th ``A`` record of a board's awards (parts of at most ``per_record``)."""
    lo, hi = k * per_record, min(awards.n, (k + 1) * per_record)
    o = awards.id_offsets
    ids = ids_of(awards.id_bytes[o[lo]:o[hi]], o[lo:hi + 1] - o[lo])
    return R.AwardsRecord(R.AWARDS, board_id, int(version), k, award_parts(awards, per_record), ids,
                          awards.ranks[lo:hi].astype("<i8").tobytes(), awards.tiers[lo:hi].astype(np.int8).tobytes(),
                          awards.numbers[lo:hi].astype("<i4").tobytes(), awards.prizes[lo:hi].astype("<i2").tobytes())


def award_records(board_id: str, version: int, awards: Awards, per_record: int = AWARDS_PER_RECORD) -> list:
    """Every ``A`` record of a board's awards, in order."""
    return [award_record(board_id, version, awards, k, per_record) for k in range(award_parts(awards, per_record))]


class AwardRow(NamedTuple):
    """One award as the awards read shows it (before its delivery state)."""

    award_id: str
    player_id: str
    rank: int
    cohort: str | None
    reward: str  # compact JSON text of the prize's reward
    seq: int  # its position among the board's awards (0-based, award order)


class AwardTable:
    """A board's awards as logged (``A`` records folded in part order), with
    the log offset of each part (the webhook outbox names messages by it)."""

    def __init__(self, board_id: str, prizes: Sequence[Prize]) -> None:
        self.board_id = board_id
        self.prizes = tuple(prizes)
        self.version = 0
        self.parts = 0  # how many parts the awards have (0: none logged yet)
        self.players = PlayerTable()  # award i's player is player i (a player has at most one award per board)
        self.ranks = np.zeros(0, np.int64)
        self.tiers = np.zeros(0, np.int8)
        self.numbers = np.zeros(0, np.int32)
        self.prize = np.zeros(0, np.int16)
        self.offsets: list[int] = []  # per part folded: its record's log offset
        self.firsts: list[int] = []  # per part folded: the index of its first award

    @property
    def complete(self) -> bool:
        return self.parts > 0 and len(self.offsets) == self.parts

    def __len__(self) -> int:
        return len(self.players)

    def fold(self, offset: int, rec: R.AwardsRecord) -> None:
        """Fold one logged part in (a part already folded changes nothing)."""
        if rec.part != len(self.offsets):
            return
        self.version, self.parts = rec.version, rec.parts
        buf, offs = encode_ids(rec.player_ids)
        n, at = len(offs) - 1, len(self)
        if rec.part == 0 and rec.parts > 1:  # the parts but the last are as long: room for all of them at once
            self.players.reserve(rec.parts * n, rec.parts * len(buf))
        self.offsets.append(offset)
        self.firsts.append(at)
        self.players.intern_encoded(buf, offs)
        for name, raw, dtype in (("ranks", rec.ranks, "<i8"), ("tiers", rec.tiers, np.int8),
                                 ("numbers", rec.numbers, "<i4"), ("prize", rec.prizes, "<i2")):
            col = getattr(self, name)
            if at + n > len(col):  # grown to the expected total on the first part, doubling after that
                grown = np.zeros(max(at + n, rec.parts * n if rec.part == 0 else 2 * len(col)), col.dtype)
                grown[:at] = col[:at]
                setattr(self, name, col := grown)
            col[at:at + n] = np.frombuffer(raw, dtype)

    def row(self, i: int) -> AwardRow:
        pid = self.players.id_of(i)
        tier = int(self.tiers[i])
        return AwardRow(f"{self.board_id}/{pid}", pid, int(self.ranks[i]),
                        cohort_id(tier, int(self.numbers[i])) if tier else None, self.prizes[int(self.prize[i])].reward,
                        i)

    def page(self, start: int, limit: int) -> list[AwardRow]:
        """Awards ``start ..`` (award order), an erased player's left out (docs/api.md §17)."""
        return [self.row(i) for i in range(start, min(len(self), start + limit)) if self.prize[i] >= 0]

    def of_player(self, player_id: str) -> list[AwardRow]:
        i = int(self.players.lookup([player_id])[0])
        return [] if i < 0 or self.prize[i] < 0 else [self.row(i)]

    def erase(self, player_ids: Sequence[str]) -> list[int]:
        """Forget the players' awards (docs/api.md §17): their prize index becomes -1 and their id bytes are
        zeroed; award numbering (and the outbox's) stays. Returns the award indexes erased."""
        idx = self.players.lookup(list(player_ids))
        got = sorted({int(i) for i in idx.tolist() if i >= 0})
        if got:
            at = np.array(got, np.int32)
            self.prize[at] = -1
            self.players.scrub(at)
        return got

    def part_of(self, i: int) -> tuple[int, int]:
        """(the log offset of award ``i``'s part, its index within the part)."""
        k = int(np.searchsorted(np.asarray(self.firsts), i, side="right")) - 1
        return self.offsets[k], i - self.firsts[k]

    def to_state(self) -> dict:
        n = len(self)
        return {"version": self.version, "parts": self.parts, "players": self.players.to_state(),
                "ranks": self.ranks[:n].tobytes(), "tiers": self.tiers[:n].tobytes(),
                "numbers": self.numbers[:n].tobytes(), "prize": self.prize[:n].tobytes(),
                "offsets": self.offsets, "firsts": self.firsts}

    @classmethod
    def from_state(cls, board_id: str, prizes: Sequence[Prize], state: dict) -> "AwardTable":
        t = cls(board_id, prizes)
        t.version, t.parts = state["version"], state["parts"]
        t.players = PlayerTable.from_state(state["players"])
        t.ranks = np.frombuffer(state["ranks"], np.int64).copy()
        t.tiers = np.frombuffer(state["tiers"], np.int8).copy()
        t.numbers = np.frombuffer(state["numbers"], np.int32).copy()
        t.prize = np.frombuffer(state["prize"], np.int16).copy()
        t.offsets, t.firsts = list(state["offsets"]), list(state["firsts"])
        return t
