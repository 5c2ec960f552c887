"""A board partition as columns: players, rows, the rank index, the journal.

One partition holds the players of one board that hash to one partition
number (all of them when the board has ``shards=1``). It is the only
mutator of rows: :meth:`Partition.apply_columns` decides each event's
outcome against the player's row under the board comparator (API §6) and
changes the row only when the event ranks strictly better (best_score /
fastest_time), adds its delta (cumulative) or is more recent than the row's
event (latest: :func:`engine.core.policy.latest_order`). Admission checks that need
the whole board (dedup, season state, review) come before, in
:mod:`engine.core.admission`; their verdicts arrive with the batch.

State (no Python object per player or per event):

* ``players``: :class:`~engine.core.players.PlayerTable`, id <-> int32 index;
* rows, indexed by player: ``val``, ``ach``, ``sub`` (int64), ``rv`` (row
  version, int32), ``st`` (0 none, 1 ACTIVE, 2 INVALIDATED); on latest
  boards only, ``src`` (int64): the journal row of the event that is the
  row. Two events achieved and submitted at the same moment are ordered by
  their ids, and the row keeps no id of its own: the kernel compares the new
  id with that journal row's (in the tail, in memory; older, read from the
  store before the batch, :meth:`Partition._stored_row_ids`), and an
  invalidation knows exactly whether it hit the row's event;
* ``meta``: the rows' metadata (docs/api.md §13), bytes of canonical compact
  JSON only for the players whose row has some, and ``has_meta`` (uint8 per
  player) to find them without a Python step per player: a row keeps the
  metadata of the event that gave it its current value (best / fastest: the
  best event; cumulative: the latest applied one);
* ``index``: :class:`~engine.core.rank_index.RankIndex` of the ACTIVE rows' keys;
* ``journal``: :class:`~engine.core.journal.Journal`, every event seen, for
  invalidation recompute, redeliveries past the dedup window and history:
  on disk but for a bounded tail, plus each player's newest journal row.

A batch is one numba kernel call over the batch's columns: outcomes are
decided event by event in order (exactly as one-at-a-time application
would), and each touched player's index entry moves once at the end.

Keys: inside the index a key is ``(primary, tie, player)`` with primary
``~value`` for the descending policies (``~v == -v - 1``: no overflow at
INT64_MIN) and ``value`` for fastest_time. On the wire and in
:mod:`engine.core.ranking` a key stays ``(-value | value, tie, player_id)``
(:mod:`engine.core.policy`), Python ints and str.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import numba
import numpy as np

from engine.core import records as R
from engine.core.checksum import row_digest
from engine.core.columns import ScoreColumns, int64_column as _i64, meta_columns
from engine.core.dedup import fingerprint
from engine.core.errors import EventNotFound
from engine.core.export import Block, key_subscores, metadata_arena
from engine.core.formats import PARTITION_STATE_FORMAT, state_format
from engine.core.journal import (
    ALREADY_INVALIDATED,
    AUDIT_NAMES,
    INVALIDATED,
    KIND_DECISION,
    KIND_INVALIDATION,
    KIND_NAMES,
    KIND_SCORE,
    REJECTED,
    TAIL_ROWS,
    Journal,
    JournalColumns,
    StorePlace,
    owner_add,
    owner_find,
)
from engine.core.model import INT64_MAX, INT64_MIN, Outcome, Policy, RowChange, RowStatus, ScoreEvent
from engine.core.players import BatchIds, PlayerTable, encode_ids, gather, hash_bytes, same_bytes
from engine.core.policy import FIRST, IMPROVED, NOT_IMPROVED, RankKey, key_for
from engine.core.rank_index import NO_DIRS, NO_SUBS, RankIndex

__all__ = ["Partition", "Row", "Applied", "KIND_SCORE", "KIND_DECISION", "KIND_INVALIDATION"]

ACTIVE = RowStatus.ACTIVE
ROW_COLUMNS = ("val", "ach", "sub", "rv", "st")  # the per-player row columns every snapshot holds
INVALIDATED_STATUS = RowStatus.INVALIDATED
ST_NONE, ST_ACTIVE, ST_INVALID = 0, 1, 2
_POLICY_CODE = {Policy.BEST_SCORE: 0, Policy.CUMULATIVE: 1, Policy.FASTEST_TIME: 2, Policy.LATEST: 3}
POL_LATEST = 3
_C = R.CODE
_CANDIDATES = np.array(sorted(_C[o] for o in (
    Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED_NEW_BEST, Outcome.REJECTED_NOT_AN_IMPROVEMENT,
    Outcome.APPLIED, Outcome.APPLIED_NEW_BEST_TIME, Outcome.REJECTED_NOT_FASTER,
    Outcome.APPLIED_LATEST, Outcome.REJECTED_NOT_LATEST)), np.uint8)
_CANDIDATE_SET = frozenset(_CANDIDATES.tolist())
_OUT_OF_RANGE = R.CODE[Outcome.REJECTED_TOTAL_OUT_OF_RANGE]  # audit of a refused invalidation
_NO_META = np.zeros(0, np.uint8)


def outcome_name(code: int) -> str:
    """The history's name of a journal outcome code."""
    return AUDIT_NAMES.get(code) or R.outcome_of(code).value  # a batch without metadata: an empty arena (offsets all 0)


def _codes(policy: Policy) -> np.ndarray:
    """Outcome codes the kernel hands out, per policy."""
    improved = IMPROVED[policy]
    return np.array([
        _C[FIRST[policy]], _C[improved], _C[NOT_IMPROVED.get(policy, improved)], _C[Outcome.REJECTED_INVALID_TIMING],
        _C[Outcome.DUPLICATE_IGNORED], _C[Outcome.REJECTED_EVENT_ID_CONFLICT], _C[Outcome.REJECTED_TOTAL_OUT_OF_RANGE],
    ], np.uint8)


class Row(NamedTuple):
    """A player's standing, read from the columns. ``key`` is None unless ACTIVE."""

    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    status: RowStatus
    row_version: int
    key: RankKey | None
    metadata: bytes | None = None  # canonical compact JSON, None when the row has none
    subscores: tuple[int, ...] | None = None  # None on a board without subscores (docs/api.md §14)

    def change(self) -> RowChange:
        return RowChange(self.player_id, self.value, self.achieved_at, self.status, self.metadata, self.subscores)


class Invalidation(NamedTuple):
    """What invalidating one event did to its player's row."""

    row: Row  # the row afterwards
    change: RowChange | None  # the version step, None when nothing changed
    refused: bool  # cumulative: the total without the event would leave int64


class Applied(NamedTuple):
    """Per event of an applied batch."""

    codes: np.ndarray  # uint8 outcome codes (engine.core.records.CODE)
    changed: np.ndarray  # bool: the ranking changed (one version step)
    values: np.ndarray  # int64: the row's value after the event (when changed)
    achieved: np.ndarray  # int64: the row's achieved_at after the event (when changed)
    players: np.ndarray | None = None  # int32: each event's player in the partition's PlayerTable


@numba.njit(cache=True, inline="always")
def bytes_greater(a, a0, a1, b, b0, b1):
    """``a[a0:a1]`` sorts strictly after ``b[b0:b1]`` (bytewise; for UTF-8
    ids the same as code-point order)."""
    la, lb = a1 - a0, b1 - b0
    m = la if la < lb else lb
    for k in range(m):
        x, y = a[a0 + k], b[b0 + k]
        if x != y:
            return x > y
    return la > lb


@numba.njit(cache=True)
def _apply_kernel(pol, max_time, codes, idx, vals, achs, subs, verdicts, kind, ebuf, eoffs, mbuf, moffs,
                  r_val, r_ach, r_sub, r_rv, r_st, esc, r_sc, dirs, r_src, pre_buf, pre_offs,
                  j_pid, j_kind, j_val, j_ach, j_sub, j_out, j_prev, j_eoffs, j_earena, j_moffs, j_marena,
                  jn, slots, base, heads,
                  prior, prior_pid, prior_val, prior_ach, prior_sub, prior_meta,
                  out_code, out_changed, out_val, out_ach):
    """Apply a batch in order. Returns (tail rows now, newly owned, changes).
    ``prior[x] >= 0``: event x's id is owned by a stored journal row, whose
    player and content are ``prior_*[x]`` (``prior_meta[x]``: its metadata
    equals event x's). Event x's journal payload (its metadata; on a board
    with subscores, after them) is ``mbuf[moffs[x]:moffs[x + 1]]``; its
    subscores are ``esc[x]``, a row's ``r_sc[p]`` (no columns on a board
    without subscores), compared in the directions ``dirs``.
    latest (pol 3): ``r_src[p]`` is the journal row of the event that is
    player p's row; when that row is stored (before the tail) and event x
    ties it on both timestamps, its id is ``pre_buf[pre_offs[x]:pre_offs[x + 1]]``."""
    owned = 0
    changes = 0
    big = np.int64(9223372036854775807)
    small = np.int64(-9223372036854775807 - 1)
    # Touch every row, journal head and owner slot the batch will use first:
    # these loads are independent of each other, so the CPU overlaps their
    # cache misses (a million players' rows are mostly out of cache); the
    # loop below, where each event depends on the one before, then finds
    # them in cache.
    n = len(idx)
    hs = np.empty(n, np.uint64)
    mask = len(slots) - 1
    touched = np.int64(0)  # returned (and ignored) so the compiler keeps the loads
    for x in range(n):
        p = idx[x]
        h = hash_bytes(ebuf, eoffs[x], eoffs[x + 1])
        hs[x] = h
        touched += r_val[p] + r_ach[p] + r_st[p] + heads[p] + slots[np.int64(h & np.uint64(mask))]
    for x in range(n):
        p = idx[x]
        v, a, s = vals[x], achs[x], subs[x]
        s0, s1 = eoffs[x], eoffs[x + 1]
        m0, m1 = moffs[x], moffs[x + 1]
        verdict = verdicts[x]
        own = False
        changed = False
        if verdict != 0:
            code = verdict
        else:
            r = owner_find(slots, j_eoffs, j_earena, ebuf, s0, s1, hs[x])
            if r >= 0:  # an id older than the dedup window, seen here before
                same = (j_pid[r] == p and j_val[r] == v and j_ach[r] == a and j_sub[r] == s
                        and same_bytes(j_marena, j_moffs[r], j_moffs[r + 1], mbuf, m0, m1))
                code = codes[4] if same else codes[5]
            elif prior[x] >= 0:  # the same, its row already on disk
                same = (prior_pid[x] == p and prior_val[x] == v and prior_ach[x] == a and prior_sub[x] == s
                        and prior_meta[x])
                code = codes[4] if same else codes[5]
            elif pol == 2 and not (0 < v <= max_time):
                code = codes[3]
            elif pol == 1:
                st = r_st[p]
                if st != 1:
                    r_val[p], r_ach[p], r_sub[p] = v, a, s
                    code, changed, own = codes[1], True, True
                else:
                    cur = r_val[p]
                    if (v > 0 and cur > big - v) or (v < 0 and cur < small - v):
                        code = codes[6]
                    else:
                        r_val[p] = cur + v
                        if a > r_ach[p]:
                            r_ach[p] = a
                        r_sub[p] = s
                        code, changed, own = codes[1], True, True
            else:
                st = r_st[p]
                own = True
                if st == 0:
                    code, changed = codes[0], True
                elif st == 2:
                    code, changed = codes[1], True
                elif pol == 0:
                    better = v > r_val[p] or (v == r_val[p] and _subs_then(esc, x, r_sc, p, dirs, a < r_ach[p]))
                    code, changed = (codes[1], True) if better else (codes[2], False)
                elif pol == 3:  # the later event: achieved_at, then submitted_at, then the greater id
                    ra, rs = r_ach[p], r_sub[p]
                    if a != ra:
                        newer = a > ra
                    elif s != rs:
                        newer = s > rs
                    else:
                        r0 = r_src[p]
                        if r0 >= base:
                            t = r0 - base
                            newer = bytes_greater(ebuf, s0, s1, j_earena, j_eoffs[t], j_eoffs[t + 1])
                        else:
                            newer = bytes_greater(ebuf, s0, s1, pre_buf, pre_offs[x], pre_offs[x + 1])
                    code, changed = (codes[1], True) if newer else (codes[2], False)
                else:
                    better = v < r_val[p] or (v == r_val[p] and _subs_then(esc, x, r_sc, p, dirs, s < r_sub[p]))
                    code, changed = (codes[1], True) if better else (codes[2], False)
                if changed:
                    r_val[p], r_ach[p], r_sub[p] = v, a, s
                    if dirs is not None:
                        for c in range(len(dirs)):
                            r_sc[p, c] = esc[x, c]
                    if pol == 3:
                        r_src[p] = base + jn
        if changed:
            r_rv[p] = 1 if r_st[p] == 0 else r_rv[p] + 1
            r_st[p] = 1
            changes += 1
            out_val[x], out_ach[x] = r_val[p], r_ach[p]
        out_code[x] = code
        out_changed[x] = changed
        # journal row
        j_pid[jn], j_kind[jn], j_val[jn], j_ach[jn], j_sub[jn], j_out[jn] = p, kind, v, a, s, code
        j_prev[jn] = heads[p]
        heads[p] = base + jn
        e0 = j_eoffs[jn]
        for k in range(s1 - s0):
            j_earena[e0 + k] = ebuf[s0 + k]
        j_eoffs[jn + 1] = e0 + (s1 - s0)
        q0 = j_moffs[jn]
        for k in range(m1 - m0):
            j_marena[q0 + k] = mbuf[m0 + k]
        j_moffs[jn + 1] = q0 + (m1 - m0)
        if own:
            owner_add(slots, jn, hs[x])
            owned += 1
        jn += 1
    return jn, owned, changes, touched


@numba.njit(cache=True, inline="always")
def _subs_then(esc, x, r_sc, p, dirs, tie_better):
    """Whether event x ranks strictly before row p once their primaries are
    equal: by the first subscore that differs, in its direction, else by
    ``tie_better`` (the policy's tie keys). No subscores: ``tie_better``."""
    if dirs is not None:  # a board without subscores passes None: compiled away
        for c in range(len(dirs)):
            e, r = esc[x, c], r_sc[p, c]
            if e != r:
                return e < r if dirs[c] > 0 else e > r
    return tie_better


@numba.njit(cache=True, inline="always")
def index_key(pol, val, ach, sub, r):
    """Row ``r``'s rank-index key (primary, tie), ascending = better:
    fastest_time (pol 2) by (value, submitted_at); best_score and cumulative
    by (~value, achieved_at), i.e. higher value first with no overflow at
    INT64_MIN (``~v == -v - 1``). The player id's bytes settle the rest."""
    if pol == 2:
        return val[r], sub[r]
    return ~val[r], ach[r]


@numba.njit(cache=True)
def _row_keys(pol, rows, val, ach, sub, st, active, kp, kt):
    """Whether each row is ACTIVE and its index key: one pass instead of a
    numpy gather per column."""
    for k in range(len(rows)):
        r = rows[k]
        active[k] = st[r] == ST_ACTIVE
        kp[k], kt[k] = index_key(pol, val, ach, sub, r)


@numba.njit(cache=True)
def _moves(pol, touched, was, op, ot, osc, val, ach, sub, st, sc, rp, rt, ri, ip, it, ii):
    """The index keys to remove (old keys of rows that were ACTIVE and moved
    or left) and to insert (new keys of rows ACTIVE now that moved or came):
    (removals, insertions) written to the front of rp/rt/ri and ip/it/ii."""
    nr = 0
    ni = 0
    for k in range(len(touched)):
        r = touched[k]
        now = st[r] == ST_ACTIVE
        np_, nt = index_key(pol, val, ach, sub, r)
        same = was[k] and now and op[k] == np_ and ot[k] == nt
        if osc is not None:  # subscores (None on a board without them: compiled away)
            for c in range(osc.shape[1]):
                same = same and osc[k, c] == sc[r, c]
        if was[k] and not same:
            rp[nr], rt[nr], ri[nr] = op[k], ot[k], r
            nr += 1
        if now and not same:
            ip[ni], it[ni], ii[ni] = np_, nt, r
            ni += 1
    return nr, ni


@numba.njit(cache=True)
def distinct(idx):
    """The distinct values of an int32 array, in order of first appearance:
    an open-addressing set the size of the batch (no sort, and nothing the
    size of the board)."""
    n = len(idx)
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    slots = np.full(size, -1, np.int32)
    out = np.empty(n, np.int32)
    k = 0
    for x in range(n):
        v = idx[x]
        pos = (v * 0x9E3779B1) & mask
        while True:
            cur = slots[pos]
            if cur == v:
                break
            if cur < 0:
                slots[pos] = v
                out[k] = v
                k += 1
                break
            pos = (pos + 1) & mask
    return out[:k]


def _strip_prefix(cols: JournalColumns, w: int) -> JournalColumns:
    """Journal columns with the first ``w`` bytes of each metadata payload
    that has them dropped (a payload shorter than ``w``, an invalidation's,
    is empty). Numpy: O(rows + bytes)."""
    starts, ends = cols.moffs[:-1], cols.moffs[1:]
    keep0 = np.where(ends - starts >= w, starts + w, ends)
    lens = ends - keep0
    offs = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    total = int(offs[-1])
    q = np.arange(total, dtype=np.int64) - np.repeat(offs[:-1], lens)
    arena = cols.marena[np.repeat(keep0, lens) + q] if total else np.zeros(0, np.uint8)
    return cols._replace(marena=arena, moffs=offs)


def _take_rows(cols: JournalColumns, rows: np.ndarray) -> JournalColumns:
    """The given rows of journal columns, arenas gathered."""
    earena, eoffs = gather(cols.earena, cols.eoffs, rows)
    marena, moffs = gather(cols.marena, cols.moffs, rows)
    return JournalColumns(cols.pid[rows], cols.kind[rows], cols.out[rows], cols.val[rows], cols.ach[rows],
                          cols.sub[rows], earena, eoffs, marena, moffs, cols.invalid[rows])


class RankedCut(NamedTuple):
    """Ranked rows of a partition as they were at a cut (:meth:`Partition.ranked_cut`):
    copies, plus the player table's arrays, which later changes leave as they
    were for these rows."""

    primary: np.ndarray  # the rank index's keys
    tie: np.ndarray
    ids: np.ndarray  # the players' indexes in the table
    value: np.ndarray | None  # None: ~primary (every policy but fastest_time: index_key)
    achieved: np.ndarray | None  # None: the tie
    has_meta: np.ndarray | None  # bool per row; None when the partition holds no metadata
    meta: dict | None  # player index -> metadata bytes (a copy), None when no row here has any
    sc: np.ndarray | None  # raw subscores (rows, k) on a board with subscores
    directions: tuple
    arena: np.ndarray  # the player table's id bytes and offsets at the cut
    offs: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.ids)

    def block(self, start: int, stop: int) -> Block:
        """Rows ``start .. stop - 1`` of the cut as an export block: columns
        gathered, a Python step only per row that has metadata. O(k)."""
        ids = self.ids[start:stop]
        arena, offs = gather(self.arena, self.offs, np.ascontiguousarray(ids, np.int64))
        if self.meta is not None and self.has_meta is not None and self.has_meta[start:stop].any():
            get = self.meta.get
            mb, mo = metadata_arena([get(p) if h else None
                                     for p, h in zip(ids.tolist(), self.has_meta[start:stop].tolist())])
        else:
            mb, mo = np.zeros(0, np.uint8), np.zeros(len(ids) + 1, np.int64)
        sub = key_subscores(self.sc[start:stop], self.directions) if self.sc is not None else None
        primary, tie = self.primary[start:stop], self.tie[start:stop]
        return Block(primary, tie, ~primary if self.value is None else self.value[start:stop],
                     tie if self.achieved is None else self.achieved[start:stop], arena, offs, mb, mo, sub)


class Partition:
    """Rows of one board partition. Not thread-safe; one owner mutates it."""

    def __init__(self, policy: Policy, max_plausible_time_ms: int, journal: Journal | None = None,
                 subscores: Sequence[str] = ()):
        self.policy = policy
        #: subscores (docs/api.md §14): their directions, as declared; ``dirs`` the
        #: same as 1 (asc) / -1 (desc); ``sc`` the rows' subscores, a row per player
        #: (no memory at all on a board without them: NO_SUBS, never indexed)
        self.subscores = tuple(subscores)
        self.k = len(self.subscores)
        self.dirs = np.array([1 if d == "asc" else -1 for d in self.subscores], np.int64) if self.k else NO_DIRS
        self.sc = np.zeros((64, self.k), np.int64) if self.k else NO_SUBS
        self.max_plausible_time_ms = max_plausible_time_ms
        self.players = PlayerTable()
        self.val = np.zeros(64, np.int64)
        self.ach = np.zeros(64, np.int64)
        self.sub = np.zeros(64, np.int64)
        self.rv = np.zeros(64, np.int32)
        self.st = np.zeros(64, np.uint8)
        self.has_meta = np.zeros(64, np.uint8)
        self.meta: dict[int, bytes] = {}
        self._pol = _POLICY_CODE[policy]
        # latest boards only (else empty): per player the journal row of the event that is the row
        self.src = np.full(64 if self._pol == POL_LATEST else 0, -1, np.int64)
        self._row_columns = ROW_COLUMNS + (("src",) if self._pol == POL_LATEST else ())
        self.index = RankIndex()
        self.journal = Journal() if journal is None else journal
        self.journal.ensure_players(len(self.val))
        self.changes = 0
        # players erased (docs/api.md §17): their index is never reused and their journal rows stay (their ids
        # scrubbed), left out of history chunks; sorted int32
        self.gone = np.zeros(0, np.int32)
        self._codes = _codes(policy)
        self._wire_key = key_for(policy)

    # ------------------------------------------------------------------ keys

    def _keys(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index (primary, tie) of the given players' current rows (:func:`index_key`)."""
        k = len(rows)
        active, kp, kt = np.empty(k, np.bool_), np.empty(k, np.int64), np.empty(k, np.int64)
        _row_keys(self._pol, np.asarray(rows, np.int64), self.val, self.ach, self.sub, self.st, active, kp, kt)
        return kp, kt

    def _sd(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The rows' subscores and their directions as the kernels take them:
        (None, None) on a board without subscores, so numba compiles those
        kernels without the subscores branches (their speed is unchanged)."""
        return (self.sc, self.dirs) if self.k else (None, None)

    def _internal(self, key: RankKey) -> tuple[int, int]:
        """A wire key's (primary, tie) as the index holds them."""
        primary, tie = int(key[0]), int(key[-2])
        return (primary, tie) if self._pol == 2 else (primary - 1, tie)  # ~(-w) == w - 1

    def _key(self, v: int, a: int, s: int, pid: str, subs: Sequence[int] = ()) -> RankKey:
        """A row's wire key: ``(primary, tie, player_id)`` (:mod:`engine.core.policy`);
        on a board with subscores ``(primary, *subscores, tie, player_id)``,
        each subscore negated when descending (Python ints: exact, no overflow),
        so wire keys still compare as plain tuples."""
        base = self._wire_key(v, a, s, pid)
        if not self.k:
            return base
        return (base[0], *[x if d > 0 else -x for x, d in zip(subs, self.dirs.tolist())], base[1], base[2])

    def _raw_subs(self, key: RankKey) -> list[int]:
        """The subscores of a wire key, as the rows hold them."""
        return [x if d > 0 else -x for x, d in zip(key[1:-2], self.dirs.tolist())]

    def _payload(self, cols: ScoreColumns, mbuf: np.ndarray, moffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each event's journal payload on a board with subscores: its k
        subscores (little-endian int64) then its metadata, as one arena and
        offsets. So the journal compares a redelivery on its subscores and
        gives an invalidation's recompute the subscores of every event,
        without a column of its own. Numpy: O(n + bytes)."""
        n, w = len(cols), 8 * self.k
        subs = cols.subs
        if subs is None or subs.shape != (n, self.k):
            raise ValueError(f"every event of this board carries {self.k} subscores")
        raw = np.ascontiguousarray(subs, "<i8").view(np.uint8).reshape(n, w)
        lens = moffs[1:] - moffs[:-1]
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lens + w, out=offs[1:])
        arena = np.empty(int(offs[-1]), np.uint8)
        starts = offs[:-1]
        arena[(starts[:, None] + np.arange(w)).ravel()] = raw.ravel()
        total = int(lens.sum())
        if total:  # byte q of event x's metadata: from mbuf[moffs[x] + q] to arena[offs[x] + w + q]
            q = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
            arena[np.repeat(starts + w, lens) + q] = mbuf[np.repeat(moffs[:-1], lens) + q]
        return arena, offs

    def _split(self, payload: bytes) -> tuple[tuple[int, ...] | None, bytes]:
        """A journal payload's subscores (None on a board without them, or a
        row without a payload, such as an invalidation's) and metadata."""
        w = 8 * self.k
        if not self.k or len(payload) < w:
            return None, payload
        return tuple(np.frombuffer(payload[:w], "<i8").tolist()), payload[w:]

    # ------------------------------------------------------------------ writes

    def apply_columns(self, cols: ScoreColumns, verdicts: np.ndarray | None = None, kind: int = KIND_SCORE,
                      ids: BatchIds | None = None, ids_new: bool = False) -> Applied:
        """Apply a batch in order: one kernel call, one index move per touched
        player. ``verdicts`` (uint8, 0 = apply) are outcomes decided before
        apply (duplicate, held, conflict), which are only journalled.
        ``ids``: the batch's ids already encoded (:class:`BatchIds`), when the caller has them.
        ``ids_new``: the caller vouches that no event of verdict 0 was seen
        before (the board's dedup table has never evicted an id, so it would
        have caught it), and the journal's stored runs are not searched for
        redeliveries older than the dedup window (one probe per event and run)."""
        n = len(cols)
        if ids is None:
            ids = BatchIds.of(cols.player_ids, cols.event_ids)
        idx = self.players.intern_encoded(ids.players, ids.player_offs)
        self._reserve_rows(len(self.players))
        ebuf, eoffs = ids.events, ids.event_offs
        mbuf, moffs = (cols.meta, cols.moffs) if cols.moffs is not None else (_NO_META, np.zeros(n + 1, np.int64))
        meta_cols = (mbuf, moffs)
        if self.k:  # the journal keeps each event's subscores in front of its metadata
            mbuf, moffs = self._payload(cols, mbuf, moffs)
            esc = np.ascontiguousarray(cols.subs, np.int64)
        else:
            esc = None
        self.journal.reserve(n, len(ebuf), len(mbuf))
        if verdicts is None:
            verdicts = np.zeros(n, np.uint8)
        touched = distinct(idx)
        k = len(touched)
        was_active, old_p, old_t = np.empty(k, np.bool_), np.empty(k, np.int64), np.empty(k, np.int64)
        _row_keys(self._pol, touched, self.val, self.ach, self.sub, self.st, was_active, old_p, old_t)
        old_sc = self.sc[touched] if self.k else None
        j = self.journal
        codes = np.empty(n, np.uint8)
        changed = np.empty(n, np.bool_)
        out_val = np.zeros(n, np.int64)
        out_ach = np.zeros(n, np.int64)
        prior, pp, pv, pa, ps, pm = self._prior(ebuf, eoffs, verdicts, mbuf, moffs, ids_new)
        pre_buf, pre_offs = self._stored_row_ids(idx, cols, verdicts)
        jn, owned, changes, _ = _apply_kernel(
            self._pol, self.max_plausible_time_ms, self._codes, idx, _i64(cols.values), _i64(cols.achieved),
            _i64(cols.submitted), verdicts, kind, ebuf, eoffs, mbuf, moffs,
            self.val, self.ach, self.sub, self.rv, self.st, esc, *self._sd(), self.src, pre_buf, pre_offs,
            j.pid, j.kind, j.val, j.ach, j.sub, j.out, j.prev, j.eoffs, j.earena, j.moffs, j.marena,
            j.n, j.slots, j.base, j.heads,
            prior, pp, pv, pa, ps, pm,
            codes, changed, out_val, out_ach)
        j.n, j.owned = int(jn), j.owned + int(owned)
        self.changes += int(changes)
        if self.meta or cols.moffs is not None:
            self._keep_metadata(idx, changed, *meta_cols)
        self._move(touched, was_active, old_p, old_t, old_sc)
        return Applied(codes, changed, out_val, out_ach, idx)

    def _keep_metadata(self, idx: np.ndarray, changed: np.ndarray, mbuf: np.ndarray, moffs: np.ndarray) -> None:
        """Each changed row takes the metadata of the batch's last event that
        changed it (best / fastest: the new best; cumulative: the latest
        applied). Numpy to find them; a Python step only per changed player
        that has or gets metadata."""
        xs = np.flatnonzero(changed)
        if not len(xs):
            return
        rev = xs[::-1]
        players, first = np.unique(idx[rev], return_index=True)
        last = rev[first]
        lens = moffs[last + 1] - moffs[last]
        gets = lens > 0
        loses = ~gets & (self.has_meta[players] != 0)
        meta = self.meta
        for p in players[loses].tolist():
            meta.pop(p, None)
        self.has_meta[players[loses]] = 0
        if gets.any():
            raw = mbuf.tobytes()
            for p, x in zip(players[gets].tolist(), last[gets].tolist()):
                meta[p] = raw[moffs[x]:moffs[x + 1]]
            self.has_meta[players[gets]] = 1

    def _stored_row_ids(self, idx: np.ndarray, cols: ScoreColumns,
                        verdicts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """latest boards: for each event that ties its player's row on both
        timestamps while that row's event is stored (before the journal's
        tail, out of the kernel's reach), the id bytes of the row's event, as
        an arena and offsets (``n + 1``; an empty slice for the others).
        Numpy to find them; one stored read per such event (rare: a full
        timestamp tie with a row older than the tail). Other policies: empty."""
        n = len(idx)
        offs = np.zeros(n + 1, np.int64)
        if self._pol != POL_LATEST or not n:
            return _NO_META, offs
        src = self.src[idx]
        need = ((verdicts == 0) & (self.st[idx] == ST_ACTIVE) & (src >= 0) & (src < self.journal.base)
                & (self.ach[idx] == _i64(cols.achieved)) & (self.sub[idx] == _i64(cols.submitted)))
        if not need.any():
            return _NO_META, offs
        lens = np.zeros(n, np.int64)
        raws = {}
        for x in np.flatnonzero(need).tolist():
            raws[x] = self.journal.id_bytes(int(src[x]))
            lens[x] = len(raws[x])
        offs[1:] = np.cumsum(lens)
        buf = np.zeros(int(offs[-1]), np.uint8)
        for x, raw in raws.items():
            buf[offs[x]:offs[x + 1]] = np.frombuffer(raw, np.uint8)
        return buf, offs

    def _prior(self, ebuf: np.ndarray, eoffs: np.ndarray, verdicts: np.ndarray, mbuf: np.ndarray,
               moffs: np.ndarray, ids_new: bool = False) -> tuple:
        """Stored journal rows owning the batch's ids (redeliveries from before
        the tail), and their player and content, for the kernel (metadata: a
        bool, equal to the event's)."""
        n = len(verdicts)
        j = self.journal
        prior = np.full(n, -1, np.int64)
        content = [np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)]
        same_meta = np.zeros(n, np.bool_)
        if j.runs and not ids_new:
            sel = np.flatnonzero(verdicts == 0)
            prior[sel] = j.find_stored(ebuf, eoffs, sel)
            for x in np.flatnonzero(prior >= 0).tolist():
                r = int(prior[x])
                pid, _, _, v, a, s, _ = j.record(r)
                for col, item in zip(content, (pid, v, a, s)):
                    col[x] = item
                same_meta[x] = j.meta_bytes(r) == mbuf[moffs[x]:moffs[x + 1]].tobytes()
        return (prior, *content, same_meta)

    def _move(self, touched: np.ndarray, was_active: np.ndarray, old_p: np.ndarray, old_t: np.ndarray,
              old_sc: np.ndarray | None = None) -> None:
        """Move the touched players' index keys to their rows' current keys.
        On a board with subscores ``old_sc`` are the touched rows' subscores
        before the change: the index reads a key's subscores through its
        player (``self.sc``), so the old ones are put back while the old keys
        are removed."""
        k = len(touched)
        rp, rt, ri = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int32)
        ip, it, ii = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int32)
        sc, dirs = self._sd()
        nr, ni = _moves(self._pol, touched, was_active, old_p, old_t, old_sc if self.k else None, self.val, self.ach,
                        self.sub, self.st, sc, rp, rt, ri, ip, it, ii)
        arena, offs = self.players.arena, self.players.offs
        if nr:
            if sc is not None:
                new_sc = sc[touched]
                sc[touched] = old_sc
                try:
                    self.index.remove_many(rp[:nr], rt[:nr], ri[:nr], arena, offs, sc, dirs)
                finally:
                    sc[touched] = new_sc
            else:
                self.index.remove_many(rp[:nr], rt[:nr], ri[:nr], arena, offs)
        if ni:
            ip, it, ii = ip[:ni], it[:ni], ii[:ni]
            if ni > 64:  # in key order: neighbouring inserts share blocks (cache)
                order = np.lexsort((it, ip))
                ip, it, ii = ip[order], it[order], ii[order]
            self.index.insert_many(ip, it, ii, arena, offs, sc, dirs)

    def _reserve_rows(self, n: int) -> None:
        if n > len(self.val):
            size = len(self.val)
            while n > size:
                size += size // 4 + 64  # 1.25x: at most a quarter of the rows allocated ahead
            for name in self._row_columns + ("has_meta",):
                a = getattr(self, name)
                b = np.zeros(size, a.dtype)
                b[: len(a)] = a
                setattr(self, name, b)
            if self.k:
                sc = np.zeros((size, self.k), np.int64)
                sc[: len(self.sc)] = self.sc
                self.sc = sc
            self.journal.ensure_players(size)

    def apply(self, ev: ScoreEvent, kind: int = KIND_SCORE) -> tuple[Outcome, RowChange | None]:
        """Apply one admitted event (a batch of one)."""
        got = self.apply_columns(ScoreColumns.from_events([ev]), kind=kind)
        outcome = R.outcome_of(int(got.codes[0]))
        if not got.changed[0]:
            return outcome, None
        return outcome, RowChange(ev.player_id, int(got.values[0]), int(got.achieved[0]), ACTIVE, ev.metadata or None,
                                  tuple(ev.subscores) if self.k else None)

    def record(self, ev: ScoreEvent, outcome: Outcome, kind: int = KIND_SCORE) -> None:
        """Journal an event decided before apply (duplicate, held, conflict)."""
        self.apply_columns(ScoreColumns.from_events([ev]), np.array([R.CODE[outcome]], np.uint8), kind)

    def record_rejection(self, ev: ScoreEvent) -> None:
        """A moderator rejected a held event: audit it as a decision."""
        self.apply_columns(ScoreColumns.from_events([ev]), np.array([REJECTED], np.uint8), KIND_DECISION)

    def owns_event(self, event_id: str) -> bool:
        """Whether an event with this id reached this partition's comparator."""
        return self.journal.find(event_id) >= 0

    def invalidate(self, event_id: str, correction_id: str) -> Invalidation:
        """Invalidate an event the partition applied and recompute its row.

        best / fastest: the best remaining valid candidate event under the
        comparator, with that event's timestamps; cumulative: the sum of the
        remaining valid deltas (a compensating delta). No valid event left:
        the row becomes INVALIDATED (unranked). Idempotent: invalidating an
        invalid event changes nothing. cumulative: when the remaining sum
        would leave int64 (an earlier delta offset this one) the invalidation
        is refused, audited as REJECTED_TOTAL_OUT_OF_RANGE, and changes
        nothing; the row is always the sum of its valid deltas. O(the
        player's events) reads of the journal. Raises EventNotFound when the
        event never reached this partition.
        """
        j = self.journal
        r = j.find(event_id)
        if r < 0:
            raise EventNotFound(f"No applied event {event_id!r} on this board.", "event_id")
        p, _, _, v, a, s, _ = j.record(r)
        subs = self._split(j.meta_bytes(r))[0] if self.k else None
        audit = ALREADY_INVALIDATED if r in j.invalid else INVALIDATED
        if audit == INVALIDATED and self._pol == 1 and not INT64_MIN <= int(self.val[p]) - v <= INT64_MAX:
            audit = _OUT_OF_RANGE
        j.append_one(p, correction_id, KIND_INVALIDATION, v, a, s, audit)
        if audit != INVALIDATED:
            return Invalidation(self._row(p), None, audit == _OUT_OF_RANGE)
        j.invalid.add(r)
        change = self._after_invalidation(p, r, v, a, s, subs)
        return Invalidation(self._row(p), change, False)

    def _after_invalidation(self, p: int, r: int, v: int, a: int, s: int,
                            subs: tuple[int, ...] | None = None) -> RowChange | None:
        """The row once an applied event (journal row r, content v, a, s) of player p is
        invalid, reading no more of the player's events than needed: the
        result is always the full recompute's.

        * best / fastest: the row is the content of the best valid event; when
          the invalidated event's content differs, that event is still valid
          and still the best: nothing changes (no read at all).
        * latest: the row is the latest valid event; when the invalidated
          event is not the row's (``src``, exact even between events of equal
          content), nothing changes.
        * cumulative: the row is (sum of the valid deltas, their latest
          achieved_at, the newest one's submitted_at). The sum loses ``v``;
          when ``a`` was not the latest achieved_at the latest stays; the
          newest valid event is found walking back from the newest row.
        Otherwise (the best itself, or the latest achieved_at): the full
        recompute, O(the player's events)."""
        if self.st[p] != ST_ACTIVE:
            return self._recompute(p)
        if self._pol == POL_LATEST:
            return None if r != int(self.src[p]) else self._recompute(p)
        if self._pol != 1:
            if (int(self.val[p]), int(self.ach[p]), int(self.sub[p])) != (v, a, s):
                return None
            if self.k and tuple(self.sc[p].tolist()) != subs:
                return None
            return self._recompute(p)
        latest = int(self.ach[p])
        if a >= latest:
            return self._recompute(p)
        j = self.journal
        for q in j.newest_first(p):
            _, kind, out, _, _, newest_sub, _ = j.record(q)
            if kind != KIND_INVALIDATION and out in _CANDIDATE_SET and q not in j.invalid:
                return self._set_row(p, (int(self.val[p]) - v, latest, newest_sub), j.meta_bytes(q))
        return self._recompute(p)

    def _recompute(self, p: int) -> RowChange | None:
        j = self.journal
        cand = []
        for r in j.rows_of(p):
            _, kind, out, v, a, s, _ = j.record(r)
            if kind != KIND_INVALIDATION and out in _CANDIDATE_SET and r not in j.invalid:
                cand.append((v, a, s, r))
        if not cand:
            return self._set_row(p, None)
        if self._pol == 1:
            return self._set_row(p, (sum(c[0] for c in cand), max(c[1] for c in cand), cand[-1][2]),
                                 j.meta_bytes(cand[-1][3]))
        if self._pol == POL_LATEST:  # the latest valid event (policy.latest_order, on the ids' UTF-8 bytes)
            last = max(cand, key=lambda c: (c[1], c[2], j.id_bytes(c[3])))
            self.src[p] = last[3]  # before _set_row: it may find the content unchanged
            if self.k:  # the payload starts with the event's subscores
                subs, meta = self._split(j.meta_bytes(last[3]))
                return self._set_row(p, last[:3], meta, subs)
            return self._set_row(p, last[:3], j.meta_bytes(last[3]))
        pid = self.players.id_of(p)
        if self.k:
            key, split = self._key, self._split
            full = [(key(v, a, s, pid, split(j.meta_bytes(r))[0] or ()), (v, a, s), r) for v, a, s, r in cand]
            _, row, r = min(full, key=lambda c: c[0])
            subs, meta = split(j.meta_bytes(r))
            return self._set_row(p, row, meta, subs)
        wkey = self._wire_key
        best = min(cand, key=lambda c: wkey(c[0], c[1], c[2], pid))
        return self._set_row(p, best[:3], j.meta_bytes(best[3]))

    def _set_row(self, p: int, new: tuple[int, int, int] | None, meta: bytes = b"",
                 subs: tuple[int, ...] | None = None) -> RowChange | None:
        """Player p's row becomes ``new`` with metadata ``meta`` and (on a
        board with them) subscores ``subs`` (None: INVALIDATED, the metadata
        and subscores kept); one version step when that changes anything."""
        touched = np.array([p], np.int32)
        was_active = self.st[touched] == ST_ACTIVE
        old_p, old_t = self._keys(touched)
        old_sc = self.sc[touched] if self.k else None
        if new is None:
            if self.st[p] == ST_INVALID:
                return None
            self.st[p] = ST_INVALID
        else:
            if (self.st[p] == ST_ACTIVE and (int(self.val[p]), int(self.ach[p]), int(self.sub[p])) == new
                    and self.meta.get(p, b"") == meta and (not self.k or tuple(self.sc[p].tolist()) == subs)):
                return None
            self.val[p], self.ach[p], self.sub[p] = new
            if self.k and subs is not None:
                self.sc[p] = subs
            self.st[p] = ST_ACTIVE
            if meta:
                self.meta[p] = meta
                self.has_meta[p] = 1
            elif self.has_meta[p]:
                del self.meta[p]
                self.has_meta[p] = 0
        self.rv[p] += 1
        self.changes += 1
        self._move(touched, was_active, old_p, old_t, old_sc)
        return self._row(p).change()

    def erase(self, player_ids: Sequence[str]) -> list[RowChange]:
        """Forget players (docs/api.md §17): each one's row leaves the ranking (one version step and an
        ``ERASED`` change for a ranked row; an INVALIDATED row goes without a step), their journal rows'
        event ids and metadata are zeroed (:meth:`Journal.scrub`, on disk too), and their id bytes too
        (:meth:`PlayerTable.scrub`), so a later event with the same id starts a new player. Ids the
        partition does not know are ignored. O(their events) plus one index removal each."""
        idx = self.players.lookup(list(player_ids))
        out: list[RowChange] = []
        for p in sorted({int(i) for i in idx.tolist() if i >= 0}):
            pid = self.players.id_of(p)
            touched = np.array([p], np.int32)
            was_active = self.st[touched] == ST_ACTIVE
            if was_active[0]:
                old_p, old_t = self._keys(touched)
                old_sc = self.sc[touched].copy() if self.k else None
                self.st[p] = ST_NONE
                self.changes += 1
                self._move(touched, was_active, old_p, old_t, old_sc)
                out.append(RowChange(pid, None, None, RowStatus.ERASED))  # type: ignore[arg-type]
            self.st[p] = ST_NONE
            self.val[p] = self.ach[p] = self.sub[p] = 0
            self.rv[p] = 0
            if self.k:
                self.sc[p] = 0
            if self.has_meta[p]:
                del self.meta[p]
                self.has_meta[p] = 0
            if self._pol == POL_LATEST:
                self.src[p] = -1
            rows = self.journal.rows_of(p)
            if rows:  # the run files' entries are left to the erasure job (Journal.scrub_runs), in one batch
                self.journal.scrub(np.array(rows, np.int64), runs=False)
            self.players.scrub(touched)
            self.gone = np.union1d(self.gone, touched).astype(np.int32)
        return out

    def overwrite_rows(self, player_ids: Sequence[str], values: np.ndarray, achieved: np.ndarray,
                       status: RowStatus, metadata: Sequence[bytes | None] | None = None) -> None:
        """The rows of ``player_ids`` become what changes say they are now, in
        order, one version each (a row's version grows by one per change, and
        an ``ERASED`` change forgets the row): no policy decides anything here.
        This is how a copy of rows kept elsewhere follows a board's deltas (a
        rank mirror, :mod:`engine.core.rank_mirror`); a board's own partitions
        change only through :meth:`apply_columns` and the corrections. Every
        change has ``status``; ``metadata``: None (no row has any) or one
        bytes-or-None per change. Not for a board with subscores. Columnar:
        one interning pass, a few numpy passes, one index move. O(k log n)."""
        k = len(player_ids)
        if not k:
            return
        idx = self.players.intern(player_ids)
        self._reserve_rows(len(self.players))
        touched, rev_first, steps = np.unique(idx[::-1], return_index=True, return_counts=True)
        last = (k - 1 - rev_first).astype(np.int64)  # each player's last change in the chunk
        touched, steps = touched.astype(np.int32), steps.astype(np.int32)
        was_active = self.st[touched] == ST_ACTIVE
        old_p, old_t = self._keys(touched)
        if status is not RowStatus.INVALIDATED:  # erased, or changed: the row's metadata goes (or is its change's)
            for q in touched[self.has_meta[touched] != 0].tolist():
                del self.meta[q]
            self.has_meta[touched] = 0
        if status is RowStatus.ERASED:
            self.st[touched] = ST_NONE
            self.val[touched] = self.ach[touched] = self.sub[touched] = 0
            self.rv[touched] = 0
        else:
            self.val[touched] = np.asarray(values, np.int64)[last]
            self.ach[touched] = np.asarray(achieved, np.int64)[last]
            self.rv[touched] += steps
            if status is RowStatus.ACTIVE:
                self.st[touched] = ST_ACTIVE
                if metadata is not None:
                    for q, j in zip(touched.tolist(), last.tolist()):
                        m = metadata[j]
                        if m:
                            self.meta[q] = m
                            self.has_meta[q] = 1
            else:  # INVALIDATED: out of the ranking, its metadata kept (as _set_row keeps it)
                self.st[touched] = ST_INVALID
        self.changes += k
        self._move(touched, was_active, old_p, old_t)

    @classmethod
    def from_row_columns(cls, policy: Policy, max_plausible_time_ms: int, chunks: Sequence[list]) -> "Partition":
        """A partition holding the rows of :meth:`columns` answers (one list per
        partition read, any number): the rows only, no journal history.
        Columnar: one interning pass and one sorted index build. O(n log n)."""
        p = cls(policy, max_plausible_time_ms)
        bufs, offs_parts, base = [], [np.zeros(1, np.int64)], 0
        cols: dict[str, list] = {"val": [], "ach": [], "sub": [], "rv": [], "act": []}
        metas: list = []
        for c in chunks:
            buf, offs = np.frombuffer(c[0], np.uint8), np.frombuffer(c[1], "<i8").astype(np.int64)
            bufs.append(buf)
            offs_parts.append(offs[1:] + base)
            base += len(buf)
            for name, raw, dt in (("val", c[2], "<i8"), ("ach", c[3], "<i8"), ("sub", c[4], "<i8"),
                                  ("rv", c[5], "<i8"), ("act", c[6], np.uint8)):
                cols[name].append(np.frombuffer(raw, dt))
            metas.append(c[7] if c[7] else None)
            if len(c) > 8:
                raise ValueError("from_row_columns: a board with subscores has no rank mirror")
        buf = np.concatenate(bufs) if bufs else np.zeros(0, np.uint8)
        offs = np.concatenate(offs_parts)
        idx = p.players.intern_encoded(buf, offs)
        n = len(p.players)
        p._reserve_rows(n)
        p.val[idx] = np.concatenate(cols["val"]) if bufs else 0
        p.ach[idx] = np.concatenate(cols["ach"]) if bufs else 0
        p.sub[idx] = np.concatenate(cols["sub"]) if bufs else 0
        p.rv[idx] = np.concatenate(cols["rv"]).astype(np.int32) if bufs else 0
        act = np.concatenate(cols["act"]).astype(bool) if bufs else np.zeros(0, bool)
        p.st[idx] = np.where(act, ST_ACTIVE, ST_INVALID)
        at = 0
        for m, vals in zip(metas, cols["val"]):
            if m is not None:
                for q, raw in zip(idx[at:at + len(vals)].tolist(), m):
                    if raw:
                        p.meta[q] = raw
                        p.has_meta[q] = 1
            at += len(vals)
        p._index_active_rows()
        return p

    def _index_active_rows(self) -> None:
        """Put every ACTIVE row's key into the (empty) index, in key order, the
        index sized once: a partition loaded or built in bulk."""
        active = np.flatnonzero(self.st[: len(self.players)] == ST_ACTIVE).astype(np.int32)
        kp, kt = self._keys(active)
        order = np.lexsort((kt, kp))  # byte ties are settled by the index itself
        self.index.reserve(len(active))
        self.index.insert_many(kp[order], kt[order], active[order], self.players.arena, self.players.offs, *self._sd())

    # ------------------------------------------------------------------- reads

    def __len__(self) -> int:
        """Number of ranked (ACTIVE) rows."""
        return len(self.index)

    def _row(self, p: int, pid: str | None = None) -> Row:
        if pid is None:
            pid = self.players.id_of(p)
        v, a, s = int(self.val[p]), int(self.ach[p]), int(self.sub[p])
        active = self.st[p] == ST_ACTIVE
        if self.k:
            subs = tuple(self.sc[p].tolist())
            return Row(pid, v, a, s, ACTIVE if active else INVALIDATED_STATUS, int(self.rv[p]),
                       self._key(v, a, s, pid, subs) if active else None, self.meta.get(p), subs)
        return Row(pid, v, a, s, ACTIVE if active else INVALIDATED_STATUS, int(self.rv[p]),
                   self._wire_key(v, a, s, pid) if active else None, self.meta.get(p))

    def _lookup(self, player_ids: Sequence[str]) -> np.ndarray:
        idx = self.players.lookup(player_ids)
        if len(idx):
            known = idx >= 0
            idx[known & (self.st[np.maximum(idx, 0)] == ST_NONE)] = -1
        return idx

    def get(self, player_id: str) -> Row | None:
        return self.get_many([player_id])[0]

    def get_many(self, player_ids: Sequence[str]) -> list[Row | None]:
        """The row of each id (any status), or None: one lookup and one column
        gather for the whole list, so a batch of reads costs about one read."""
        idx = self._lookup(player_ids)
        found = np.flatnonzero(idx >= 0)
        out: list[Row | None] = [None] * len(player_ids)
        for k, row in zip(found.tolist(), self._rows_at(idx[found])):
            out[k] = row
        return out

    def multi_get(self, player_ids: Iterable[str]) -> list[Row]:
        """Rows for the ids that have one (any status), in the given order."""
        ids = list(player_ids)
        return [self._row(p, pid) for pid, p in zip(ids, self._lookup(ids).tolist()) if p >= 0]

    def all_rows(self) -> list[Row]:
        """Every row (any status), in player interning order."""
        return self._rows_at(np.flatnonzero(self.st[: len(self.players)] != ST_NONE))

    def row_count(self) -> int:
        """Rows of any status (what :meth:`columns` returns without a range)."""
        return int(np.count_nonzero(self.st[: len(self.players)] != ST_NONE))

    def columns(self, start: int = 0, count: int | None = None) -> list:
        """Every row (any status) as wire columns, for an archive: ``[id bytes,
        id offsets, values, achieved, submitted, row versions, active,
        metadata]``: the ids' UTF-8 bytes in one buffer, the numbers as
        little-endian int64 bytes, ``active`` as uint8 bytes; metadata one
        bytes per row (b"" none), or an empty list when no row has any (no
        Python object per row then). With ``count``: rows ``start .. start +
        count - 1`` of them in player order (chunks of a board that does not
        change between the calls). O(n)."""
        ids = np.flatnonzero(self.st[: len(self.players)] != ST_NONE)
        if count is not None:
            ids = ids[start:start + count]
        arena, offs = self.players.bytes_of(ids)
        get = self.meta.get
        out = [arena.tobytes(), offs.astype("<i8").tobytes(), self.val[ids].astype("<i8").tobytes(),
               self.ach[ids].astype("<i8").tobytes(), self.sub[ids].astype("<i8").tobytes(),
               self.rv[ids].astype("<i8").tobytes(), (self.st[ids] == ST_ACTIVE).astype(np.uint8).tobytes(),
               [get(p, b"") for p in ids.tolist()] if self.meta else []]
        if self.k:  # a 9th column on a board with subscores (docs/api.md §14): the rows' subscores, row by row
            out.append(np.ascontiguousarray(self.sc[ids], "<i8").tobytes())
        return out

    def ranked_cut(self, start: int = 0, stop: int | None = None) -> "RankedCut":
        """Ranked rows ``start .. stop - 1`` (default: all; local rank order,
        clamped) as they are now, for blocks gathered later, on another thread,
        while this partition goes on changing (an export's spill,
        docs/storage.md): the index keys and the players' indexes copied as
        columns, 20 bytes a row (values and achieved_at follow from the key;
        28 on a fastest_time board, whose achieved_at is not in it), the
        metadata map copied only when a row has some. The id bytes are read
        later from the player table's arrays as they are now: ids are only ever
        appended there (a grown table gets new arrays and leaves these), and an
        erasure only zeroes bytes. O(log n + k)."""
        prim, tie, ids = self.index.slice(start, len(self.index) if stop is None else stop)
        fastest = self.policy is Policy.FASTEST_TIME  # key (time, submitted_at); else (~value, achieved_at)
        has = self.has_meta[ids] != 0 if self.meta and len(ids) else None
        return RankedCut(prim, tie, ids, prim if fastest else None, self.ach[ids] if fastest else None, has,
                         dict(self.meta) if has is not None and has.any() else None,
                         self.sc[ids] if self.k else None, self.subscores, self.players.arena, self.players.offs)

    def _rows_at(self, ids: np.ndarray) -> list[Row]:
        """Rows of many players: column gathers, then one record each."""
        names = self.players.ids_of(ids)
        vals, achs, subs = self.val[ids].tolist(), self.ach[ids].tolist(), self.sub[ids].tolist()
        rvs, active = self.rv[ids].tolist(), (self.st[ids] == ST_ACTIVE).tolist()
        key = self._wire_key
        if self.k:
            get = self.meta.get
            skey = self._key
            return [Row(pid, v, a, s, ACTIVE if on else INVALIDATED_STATUS, rv, skey(v, a, s, pid, c) if on else None,
                        get(p), tuple(c))
                    for pid, v, a, s, rv, on, p, c in zip(names, vals, achs, subs, rvs, active, ids.tolist(),
                                                          self.sc[ids].tolist())]
        if self.meta:
            get = self.meta.get
            return [Row(pid, v, a, s, ACTIVE if on else INVALIDATED_STATUS, rv, key(v, a, s, pid) if on else None,
                        get(p)) for pid, v, a, s, rv, on, p in zip(names, vals, achs, subs, rvs, active, ids.tolist())]
        return [Row(pid, v, a, s, ACTIVE if on else INVALIDATED_STATUS, rv, key(v, a, s, pid) if on else None)
                for pid, v, a, s, rv, on in zip(names, vals, achs, subs, rvs, active)]

    def top(self, offset: int, limit: int) -> list[Row]:
        """Active rows ranked offset+1 .. offset+limit (local ranks). O(log n + limit)."""
        _, _, ids = self.index.slice(offset, offset + limit)
        return self._rows_at(ids)

    def ranks(self, player_ids: Iterable[str]) -> list[int | None]:
        """Local 1-based ranks (None for unranked or unknown ids), in order.
        One kernel call for the whole list. O(k log n)."""
        idx = self._lookup(list(player_ids))
        ok = idx >= 0
        ok[ok] = self.st[idx[ok]] == ST_ACTIVE
        sel = idx[ok]
        p, t = self._keys(sel)
        counts = self.index.count_less_many(p, t, sel, self.players.arena, self.players.offs, *self._sd())
        full = np.zeros(len(idx), np.int64)
        full[ok] = counts + 1
        out: list[int | None] = full.tolist()  # type: ignore[assignment]
        for k in np.flatnonzero(~ok).tolist():
            out[k] = None
        return out

    def rank(self, player_id: str) -> int | None:
        return self.ranks([player_id])[0]

    def row_and_rank(self, player_id: str) -> tuple[Row, int | None] | None:
        """The player's row (any status) and local rank (None unless ACTIVE),
        from one id lookup; None when there is no row. O(log n)."""
        at = self._lookup([player_id])
        p = int(at[0])
        if p < 0:
            return None
        row = self._row(p, player_id)
        if row.key is None:
            return row, None
        kp, kt = self._keys(at)
        return row, 1 + int(self.index.count_less_many(kp, kt, at.astype(np.int32), self.players.arena,
                                                       self.players.offs, *self._sd())[0])

    def count_better_than(self, key: RankKey) -> int:
        """How many ACTIVE rows rank strictly before a wire key (whose player
        may live elsewhere). O(log n). The exact-rank coordinator sums it."""
        return self.count_better_many([key])[0]

    def count_better_many(self, keys: Sequence[RankKey]) -> list[int]:
        p, t, ids = self._query(keys)
        return self.index.count_less_many(p, t, ids, self.players.arena, self.players.offs, *self._sd()).tolist()

    def _query(self, keys: Sequence[RankKey]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Index keys for wire keys: each query id goes after the table's
        players in the arena (scratch space, not interned), so it compares by
        bytes whether or not the player lives here."""
        pt = self.players
        buf, boffs = encode_ids([k[-1] for k in keys])
        pt.reserve_scratch(len(keys), len(buf))
        n, base = pt.n, int(pt.offs[pt.n])
        if self.k:  # the query keys' subscores go in the same scratch rows
            self._reserve_rows(n + len(keys))
            self.sc[n:n + len(keys)] = np.array([self._raw_subs(k) for k in keys], np.int64).reshape(len(keys), self.k)
        pt.arena[base:base + len(buf)] = buf
        pt.offs[n + 1:n + 1 + len(keys)] = base + boffs[1:]
        prim = [self._internal(k) for k in keys]
        return (np.array([x[0] for x in prim], np.int64), np.array([x[1] for x in prim], np.int64),
                np.arange(n, n + len(keys), dtype=np.int32))

    def neighbours(self, key: RankKey, above: int, below: int) -> tuple[list[Row], list[Row], int]:
        """Up to ``above`` rows just before ``key`` and ``below`` rows just
        after it (``key`` itself excluded), each in rank order, and how many
        rows rank before ``key``. O(log n + k)."""
        return self.neighbours_many([key], [above], [below])[0]

    def neighbours_many(self, keys: Sequence[RankKey], above: Sequence[int],
                        below: Sequence[int]) -> list[tuple[list[Row], list[Row], int]]:
        """:meth:`neighbours` of many keys: one count kernel call and one row
        gather for the whole batch. O(k log n + rows)."""
        los = self.count_better_many(keys)
        n = len(self.index)
        spans: list[tuple[int, int, int, int]] = []  # (before start, before stop, after start, after stop)
        for key, lo, a, b in zip(keys, los, above, below):
            hi = lo
            if lo < n:
                p, t, ids = self.index.slice(lo, lo + 1)
                ip, it = self._internal(key)
                if (int(p[0]) == ip and int(t[0]) == it and self.players.id_of(int(ids[0])) == key[-1]
                        and (not self.k or self.sc[int(ids[0])].tolist() == self._raw_subs(key))):
                    hi = lo + 1
            spans.append((max(0, lo - a) if a > 0 else lo, lo, hi, min(n, hi + b) if b > 0 else hi))
        chunks = [self.index.slice(x, y)[2] for s in spans for x, y in ((s[0], s[1]), (s[2], s[3]))]
        rows = self._rows_at(np.concatenate(chunks)) if chunks else []
        out, at = [], 0
        for (bs, be, as_, ae), lo in zip(spans, los):
            k1, k2 = be - bs, ae - as_
            out.append((rows[at:at + k1], rows[at + k1:at + k1 + k2], lo))
            at += k1 + k2
        return out

    def sample_keys(self, step: int) -> list[list]:
        """Every ``step``-th ranked key (the ``step``-th, ``2*step``-th, ...), as wire keys."""
        n = len(self.index)
        _, _, ids = self.index.slice(0, n)
        sel = ids[step - 1::step]
        return [list(r.key) for r in self._rows_at(sel) if r.key is not None]

    def player_history(self, player_id: str) -> list[tuple]:
        """``(event_id, kind, value, achieved_at, submitted_at, outcome,
        invalidated, metadata)`` per event of the player, in application
        order: ``invalidated`` whether a later invalidation made the event
        invalid, ``metadata`` its compact JSON (b"" none)."""
        p = int(self.players.lookup([player_id])[0])
        if p < 0:
            return []
        j = self.journal
        out = []
        for r in j.rows_of(p):
            _, kind, code, v, a, s, _ = j.record(r)
            meta = j.meta_bytes(r)
            if self.k:  # the payload's subscores are not part of the history's metadata
                meta = self._split(meta)[1]
            out.append((j.event_id(r), KIND_NAMES[kind], v, a, s, outcome_name(code), r in j.invalid, meta))
        return out

    def event_fingerprints(self, player_id: str) -> tuple[list[str], list[int]]:
        """The ids of the player's events the board remembers (not duplicates or conflicts: their id is
        another event's) with each one's content fingerprint (engine.core.dedup.fingerprint, subscores
        included), first copy of each id: what an erasure keeps keyed hashes of (docs/api.md §17)."""
        p = int(self.players.lookup([player_id])[0])
        if p < 0:
            return [], []
        j = self.journal
        skip = (R.CODE[Outcome.DUPLICATE_IGNORED], R.CODE[Outcome.REJECTED_EVENT_ID_CONFLICT])
        ids: list[str] = []
        fps: list[int] = []
        seen: set[str] = set()
        for r in j.rows_of(p):
            _, kind, code, v, a, s, _ = j.record(r)
            if kind == KIND_INVALIDATION or code in skip:
                continue
            eid = j.event_id(r)
            if eid in seen:
                continue
            seen.add(eid)
            subs, meta = self._split(j.meta_bytes(r)) if self.k else (None, j.meta_bytes(r))
            ids.append(eid)
            fps.append(fingerprint(player_id, v, a, s, meta, tuple(subs or ())))
        return ids, fps

    def history_chunk(self, start: int, count: int) -> tuple[JournalColumns, int]:
        """Journal rows ``start .. start+count-1`` as columns (their ``pid``
        indexes :attr:`players`) and how many rows the journal has: an
        archive reads a partition's history this way, chunk by chunk."""
        cols = self.journal.columns(start, start + count)
        if len(self.gone) and cols.n:  # erased players' rows (their ids scrubbed) are no one's history
            keep = ~np.isin(cols.pid, self.gone)
            if not keep.all():
                cols = _take_rows(cols, np.flatnonzero(keep))
        if self.k:  # each row's payload starts with its event's subscores: the history's metadata is the rest
            cols = _strip_prefix(cols, 8 * self.k)
        return cols, len(self.journal)

    def checksum_sum(self) -> int:
        """Sum mod 2**128 of a stable per-row hash: order-independent and
        additive across partitions (see :mod:`engine.core.checksum`)."""
        ids = np.flatnonzero(self.st[: len(self.players)] != ST_NONE)
        names = self.players.ids_of(ids)
        status = np.where(self.st[ids] == ST_ACTIVE, 0, 1).tolist()
        words = (ACTIVE.value, INVALIDATED_STATUS.value)
        metas = [self.meta.get(p) for p in ids.tolist()] if self.meta else [None] * len(ids)
        args = [names, self.val[ids].tolist(), self.ach[ids].tolist(), [words[x] for x in status],
                self.rv[ids].tolist(), metas]
        if self.k:  # only boards with subscores hash them: every other checksum stays as it was
            args.append([tuple(c) for c in self.sc[ids].tolist()])
        total = sum(map(row_digest, *args))
        return total & ((1 << 128) - 1)

    def nbytes(self) -> int:
        """Bytes of the per-player state: ids, rows and the rank index."""
        n = len(self.players)
        meta = sum(len(m) + 80 for m in self.meta.values())  # bytes object + dict slot, only rows with metadata
        src = 8 if self._pol == POL_LATEST else 0  # latest: the journal row of each row's event
        return (self.players.nbytes() + n * (8 * 3 + 4 + 1 + 1 + 8 + src + 8 * self.k) + self.index.nbytes()
                + meta)  # + journal head; + the subscores' own 8 bytes each

    # --------------------------------------------------------------- snapshots

    def to_state(self, sync: bool = True) -> dict:
        """Plain msgpack-able state: arrays as bytes (copies: the partition goes on changing).
        ``sync``: see :meth:`engine.core.journal.Journal.to_state`."""
        n = len(self.players)
        return {
            "format": PARTITION_STATE_FORMAT,
            "players": self.players.to_state(),
            "rows": {name: getattr(self, name)[:n].tobytes() for name in self._row_columns},
            "journal": self.journal.to_state(sync),
            "changes": self.changes,
            "meta": self._meta_state(),
            # format 4: the subscores' directions and the rows' subscores (row-major little-endian int64)
            "subs": {"dirs": list(self.subscores), "rows": np.ascontiguousarray(self.sc[:n], "<i8").tobytes()},
        } | ({"gone": self.gone.astype("<i4").tobytes()} if len(self.gone) else {})  # additive: erased players

    def _meta_state(self) -> dict:
        """The rows' metadata as columns: players (int32), offsets, one arena."""
        players = np.flatnonzero(self.has_meta[: len(self.players)]).astype(np.int32)
        items = [self.meta[p] for p in players.tolist()]
        arena, offs = meta_columns(items)
        return {"players": players.tobytes(), "offs": b"" if offs is None else offs.tobytes(),
                "arena": b"" if arena is None else arena.tobytes()}

    @classmethod
    def from_state(cls, policy: Policy, max_plausible_time_ms: int, state: dict,
                   journal: StorePlace | None = None, tail_rows: int = TAIL_ROWS) -> "Partition":
        """``journal``: where the journal's store is (None: in memory). Raises
        :class:`~engine.core.journal.JournalLost` when it is not as the snapshot left it."""
        state_format(state, PARTITION_STATE_FORMAT, "partition state")
        subs = state.get("subs") or {"dirs": [], "rows": b""}  # absent before format 4: no subscores
        p = cls(policy, max_plausible_time_ms, subscores=subs["dirs"])
        p.players = PlayerTable.from_state(state["players"])
        n = len(p.players)
        p._reserve_rows(n)
        for name in p._row_columns:  # src (latest boards) from format 4, the first with latest boards
            a = getattr(p, name)
            a[:n] = np.frombuffer(state["rows"][name], a.dtype)
        if p.k:
            p.sc[:n] = np.frombuffer(subs["rows"], "<i8").reshape(n, p.k)
        meta = state.get("meta")  # absent before format 3: no metadata
        if meta is not None and meta["players"]:
            players = np.frombuffer(meta["players"], np.int32)
            offs = np.frombuffer(meta["offs"], np.int64).tolist()
            raw = meta["arena"]
            p.meta = {int(q): raw[offs[k]:offs[k + 1]] for k, q in enumerate(players.tolist())}
            p.has_meta[players] = 1
        p.journal = Journal.from_state(state["journal"], journal, tail_rows)
        p.journal.ensure_players(len(p.val))
        if "owner" not in state["journal"]:  # a snapshot without the owner table: rebuild it
            j = p.journal
            owned = np.zeros(j.n, np.bool_)
            first_seen: set[bytes] = set()
            candidates = np.isin(j.out[: j.n], _CANDIDATES) & (j.kind[: j.n] != KIND_INVALIDATION)
            for r in np.flatnonzero(candidates).tolist():
                raw = j.earena[j.eoffs[r]:j.eoffs[r + 1]].tobytes()
                if raw not in first_seen:
                    first_seen.add(raw)
                    owned[r] = True
            j.rebuild_owner(owned)
        p._index_active_rows()
        p.changes = state["changes"]
        p.gone = np.frombuffer(state.get("gone", b""), "<i4").astype(np.int32)
        return p

    # -------------------------------------------------------------- invariants

    def _check(self) -> None:
        """O(n log n) self-check used by tests (STYLE §11)."""
        self._check_rows()
        n = len(self.players)
        j = self.journal
        assert np.all(j.pid[: j.n] < n)
        assert self.changes >= 0
        if self._pol == POL_LATEST:  # each row is its latest valid event, and src names that event's row
            for p in np.flatnonzero(self.st[:n] == ST_ACTIVE).tolist():
                cand = [r for r in j.rows_of(p) if j.record(r)[1] != KIND_INVALIDATION
                        and j.record(r)[2] in _CANDIDATE_SET and r not in j.invalid]
                last = max(cand, key=lambda r: (j.record(r)[4], j.record(r)[5], j.id_bytes(r)))
                assert int(self.src[p]) == last, "src is not the latest valid event"
                _, _, _, v, a, s, _ = j.record(last)
                assert (int(self.val[p]), int(self.ach[p]), int(self.sub[p])) == (v, a, s), "row != its src event"

    def _check_rows(self) -> None:
        """The rows' own invariants (a partition with no journal history too:
        a rank mirror's, engine.core.rank_mirror): ids, the index against the
        ACTIVE rows, row versions, metadata."""
        pt = self.players
        pt._check()
        self.index._check(pt.arena, pt.offs, *self._sd())
        n = len(pt)
        active = np.flatnonzero(self.st[:n] == ST_ACTIVE)
        assert len(active) == len(self.index), "index size != ACTIVE rows"
        rows = [self._row(p) for p in active.tolist()]
        expected = sorted(r.key for r in rows if r.key is not None)
        got = [r.key for r in self.top(0, len(self.index))]
        assert got == expected, "index keys disagree with rows"
        assert np.all(self.rv[:n][self.st[:n] != ST_NONE] >= 1)
        assert set(np.flatnonzero(self.has_meta[:n]).tolist()) == set(self.meta), "has_meta disagrees with meta"
        assert all(self.meta.values()), "an empty metadata entry"
