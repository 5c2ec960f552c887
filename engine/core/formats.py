"""Format versions of what FlowRank writes to disk, and the refusal of newer ones.

Two layers, each with its own numbers (docs/storage.md, "Format versions"):

* **Envelopes** (framing): the segment header's ``version``
  (:data:`engine.log.framing.SEGMENT_VERSION`) and the snapshot envelope's
  ``version`` (:data:`engine.log.snapshots.SNAP_VERSION`). They say how to cut
  bytes into checksummed msgpack values, nothing about what the values mean.
* **Payloads** (meaning): the numbers below. :data:`LOG_FORMAT` is the log
  record vocabulary (the kinds in :data:`engine.core.records.KINDS` and the codes in
  :data:`engine.core.records.CODE`); every segment header carries the number its
  records were written in. The ``*_STATE_FORMAT`` numbers are the ``"format"``
  key of the snapshot state dicts (router, shard, partition).

A reader accepts every format up to the one it knows (a missing number or a
segment header's 0 means format 1, what was written before formats were
numbered) and refuses a newer one with :class:`UnsupportedFormat` instead of
guessing. Bump a number whenever a reader of the previous number would
misread what the new code writes, and add a golden fixture for the new format
(tests/fixtures/): the old fixtures must keep replaying.
"""

from __future__ import annotations

from engine.core.errors import UnsupportedFormat

#: Log record vocabulary: kinds and field layouts (records.KINDS), outcome codes
#: (records.CODE). 1: B T S C I D records, codes 1-14. 2: K (a board with its season
#: schedule) replaces B for new boards. 3: + M and E (scores and decisions with metadata).
#: 4: + L (a dead letter: a record, or a row of one, that replay skips).
#: 5: the ``latest`` policy (its name in K records, codes 15-16: APPLIED_LATEST, REJECTED_NOT_LATEST);
#: + R, W and G (a series, one window's instance of it, the score records of a request that fans out to
#: several boards; docs/api.md §15); + O and J (a board with entry options, a join; codes 17-19, §16);
#: + U, N and F (a board with subscores, its score frames and decisions; docs/api.md §14).
#: 6: + Q, P and A (the tiers a league's next season carries, players entering a league with a score
#: submission, a board's awards at FINALIZED) and the O record's
#: "league" and "prizes" options (docs/api.md §16).
#: 7: + X and Z (a player's erasure, and its completion on disk; docs/api.md §17).
#: 8: + H (players joining a competition in one request: docs/api.md §18, bulk entry).
#: 9: + V and Y (a series' instance with competition settings or subscores, the tiers an instance of a league
#: series carries to its series at FROZEN) and the O record's "subscores" option (docs/api.md §18).
LOG_FORMAT = 9
#: ``Router.to_state``: board specs, admission (dedup table, holds, decisions), corrections.
#: 2: board specs as K records (with the season schedule); format 1 holds B records.
#: 3: a held event with metadata has it as a 7th item (earlier holds load without).
#: 4: board specs may be U records (subscores), and a held event with subscores has them as an
#: 8th item (its metadata then always a 7th).
#: 5: a board with prizes has its awards as a 4th item ([spec record, admission, corrections, awards]), and
#: the admission of a league board its cohorts (``"league"``).
ROUTER_STATE_FORMAT = 5
#: ``ShardCore.to_state``: specs, partitions (each with its own format), dead letters (and,
#: additive since log format 4, ``dead_logged``: the dead letters the log holds a record of).
SHARD_STATE_FORMAT = 1
#: ``Partition.to_state``: players, row columns, journal (codes: records.CODE + journal audit codes).
#: 2: the journal moved to disk (engine.core.journal: a bounded tail, store sizes, runs, player heads).
#: 3: metadata (docs/api.md §13): the rows' metadata (``"meta"``) and the journal's (tail columns,
#: store sizes, ``meta_from``); a format-2 state loads with no metadata anywhere.
#: 4: latest boards: the rows' ``src`` column (int64, the journal row of each row's event; only on
#: latest boards, which no earlier format holds); journal codes 15-16. Subscores (docs/api.md §14): the
#: rows' subscores (``"subs"``, with their directions); the journal's payload of each row starts with the
#: event's subscores; a format-3 state loads as a partition without subscores.
PARTITION_STATE_FORMAT = 4


def state_format(state: dict, known: int, what: str) -> int:
    """The ``"format"`` of a snapshot state dict (1 when absent), refusing one
    newer than ``known``. ``what`` names the state in the error.

    >>> state_format({"format": 1}, 1, "router snapshot")
    1
    >>> state_format({}, 1, "router snapshot")
    1
    """
    found = state.get("format", 1) if isinstance(state, dict) else 1
    refuse_newer(found, known, what)
    return found


def refuse_newer(found: int, known: int, what: str) -> None:
    """Raise :class:`UnsupportedFormat` if ``found`` is newer than ``known``."""
    if not isinstance(found, int) or found > known:
        raise UnsupportedFormat(
            f"{what} is in format {found!r}, newer than format {known} that this FlowRank version reads; "
            "it was written by a newer FlowRank: run that version (or newer) on this data directory")
