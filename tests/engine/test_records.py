"""The on-disk tables, pinned: every number and letter FlowRank writes into the
log or a snapshot, with its meaning. Reordering the ``Outcome`` enum,
renaming a record kind, changing a field layout or renumbering a journal code
fails here. These tables are append-only (docs/storage.md, "Record
vocabulary"): to add an entry, add it here too and bump the format number it
belongs to (engine.core.formats), never change an existing line.

Also: snapshot states carry their format and a newer one is refused.
"""

from __future__ import annotations

from dataclasses import replace

import msgpack
import numpy as np
import pytest

from engine.core import formats

from engine.core import journal

from engine.core import partition
from engine.core import records as R
from engine.core.columns import ScoreColumns
from engine.core.errors import UnsupportedFormat
from engine.log.framing import encode_record, unpack_payload
from engine.core.model import BoardSpec, BoardState, EntrySpec, HeldEvent, LeagueSpec, Outcome, Policy, Prize, ScoreEvent
from engine.core.partition import Partition
from engine.core.placement import part_of
from engine.router.router import Router
from engine.runtime.shard import ShardCore
from engine.core.windows import Recurrence

#: Outcome codes in log records (verdicts, "S" verdict) and in snapshot journals.
OUTCOME_CODES = {
    1: "APPLIED_FIRST_SCORE",
    2: "APPLIED_NEW_BEST",
    3: "REJECTED_NOT_AN_IMPROVEMENT",
    4: "APPLIED",
    5: "APPLIED_NEW_BEST_TIME",
    6: "REJECTED_NOT_FASTER",
    7: "REJECTED_INVALID_TIMING",
    8: "DUPLICATE_IGNORED",
    9: "REJECTED_EVENT_ID_CONFLICT",
    10: "HELD_FOR_CORRECTION",
    11: "HELD_FOR_REVIEW",
    12: "REJECTED_UNKNOWN_SEASON",
    13: "DEAD_LETTERED",
    14: "REJECTED_TOTAL_OUT_OF_RANGE",
    15: "APPLIED_LATEST",
    16: "REJECTED_NOT_LATEST",
    17: "REJECTED_NOT_JOINED",
    18: "REJECTED_BOARD_FULL",
    19: "REJECTED_MAX_ATTEMPTS",
}

#: Record kinds: letter -> (name, fields after the letter).
RECORD_KINDS = {
    "B": ("board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above")),
    "T": ("state", ("board_id", "state")),
    "C": ("scores", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved", "submitted",
                     "verdicts")),
    "S": ("score", ("board_id", "event_id", "player_id", "value", "achieved_at", "submitted_at", "verdict")),
    "I": ("invalidation", ("board_id", "event_id", "correction_id", "reason", "moderator")),
    "D": ("decision", ("board_id", "event_id", "decision", "reason", "moderator", "player_id", "value",
                       "achieved_at", "submitted_at")),
    "K": ("scheduled board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above", "closes_at",
                              "finalize_after_s")),
    "R": ("series board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above", "closes_at",
                           "finalize_after_s", "recurrence")),
    "M": ("scores_meta", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved", "submitted",
                          "verdicts", "meta", "meta_offsets")),
    "E": ("decision_meta", ("board_id", "event_id", "decision", "reason", "moderator", "player_id", "value",
                            "achieved_at", "submitted_at", "metadata")),
    "L": ("dead_letter", ("board_id", "offset", "row", "event_id", "error")),
    "U": ("subscores board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above", "closes_at",
                              "finalize_after_s", "subscores")),
    "N": ("scores_subs", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved", "submitted",
                          "verdicts", "meta", "meta_offsets", "subscores")),
    "F": ("decision_subs", ("board_id", "event_id", "decision", "reason", "moderator", "player_id", "value",
                            "achieved_at", "submitted_at", "metadata", "subscores")),
    "O": ("options board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above", "closes_at",
                            "finalize_after_s", "recurrence", "options")),
    "J": ("join", ("board_id", "player_id", "position")),
    "H": ("joins", ("board_id", "player_ids", "first")),
    "V": ("instance board with options", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above",
                                          "closes_at", "finalize_after_s", "series", "starts_at", "ends_at",
                                          "options")),
    "Y": ("tiers carried to a series", ("board_id", "series", "player_ids", "tiers")),
    "W": ("instance board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above", "closes_at",
                             "finalize_after_s", "series", "starts_at", "ends_at")),
    "G": ("score group", ("parts",)),
    "Q": ("carried tiers", ("board_id", "player_ids", "tiers")),
    "P": ("league entry", ("board_id", "player_ids")),
    "A": ("awards", ("board_id", "version", "part", "parts", "player_ids", "ranks", "tiers", "numbers", "prizes")),
    "X": ("erasure", ("erasure_id", "requested_at", "subject", "player_id", "pseudonym", "key", "boards")),
    "Z": ("erasure complete", ("erasure_id", "completed_at")),
}

#: Journal-only audit codes (snapshot journals; above the Outcome codes).
AUDIT_CODES = {101: "INVALIDATED", 102: "ALREADY_INVALIDATED", 103: "REJECTED"}
#: Journal row kinds and partition row states (snapshot journals and row columns).
JOURNAL_KINDS = {0: "score", 1: "invalidation", 2: "decision"}
ROW_STATES = {0: "none", 1: "active", 2: "invalid"}
#: Strings on disk: policies (B records), board states (T records, router
#: snapshots), decisions (D records), outcome names (held events in router snapshots).
POLICIES = {"best_score", "cumulative", "fastest_time", "latest"}
BOARD_STATES = {"OPEN", "FROZEN", "FINALIZED", "ARCHIVED"}
DECISIONS = {"apply", "reject"}
#: The format numbers these tables belong to (bump with a new golden fixture).
FORMATS = {"LOG_FORMAT": 9, "ROUTER_STATE_FORMAT": 5, "SHARD_STATE_FORMAT": 1, "PARTITION_STATE_FORMAT": 4}


def test_outcome_codes_are_pinned():
    assert {code: o.value for o, code in R.CODE.items()} == OUTCOME_CODES
    assert {R.outcome_of(c).value for c in OUTCOME_CODES} == set(OUTCOME_CODES.values())
    assert R.APPLY == 0 and 0 not in OUTCOME_CODES
    assert all(o.value == o.name for o in Outcome)  # names double as the outcome strings on disk


def test_record_kinds_are_pinned():
    assert {k: (v.name, v.fields) for k, v in R.KINDS.items()} == RECORD_KINDS
    assert (R.BOARD, R.STATE, R.SCORES, R.SCORE, R.INVALIDATE, R.DECIDE, R.BOARD2) == (
        "B", "T", "C", "S", "I", "D", "K")
    assert R.BOARD_KINDS == {"B", "K", "R", "W", "O", "U", "V"} and R.SERIES == "R" and R.OPTIONS_BOARD == "O"
    assert R.JOIN == "J" and R.JOINS == "H" and R.INSTANCE == "W" and R.GROUP == "G"
    assert (R.SCORES_META, R.DECIDE_META) == ("M", "E")
    assert (R.BOARD_SUBS, R.SCORES_SUBS, R.DECIDE_SUBS) == ("U", "N", "F")
    assert R.SCORE_BATCHES == ("C", "M", "N") and R.DECISIONS == ("D", "E", "F")
    assert R.DEAD_LETTER == "L" and R.MAX_ERROR_CHARS == 500


def test_record_builders_match_the_kinds_table():
    spec = BoardSpec("b", Policy.BEST_SCORE, 3, 1000, 7)
    ev = ScoreEvent("b", "e1", "p1", 5, 10, 11)
    built = [
        R.board_record(spec),
        R.score_record(ev, None),
        R.scores_record(ScoreColumns.from_events([ev]), 0, np.zeros(1, np.uint8)),
    ]
    for rec in built:
        assert len(rec) == 1 + len(R.KINDS[rec[0]].fields), rec[0]
    assert R.spec_of(built[0]) == spec
    scheduled = BoardSpec("b", Policy.CUMULATIVE, 2, 1000, None, closes_at=1_793_527_500_000, finalize_after_s=0)
    assert R.spec_of(R.board_record(scheduled)) == scheduled
    series = BoardSpec("g:m:daily:x", Policy.BEST_SCORE, 3, recurrence=Recurrence("day", "Europe/Berlin", 240, 7))
    rec = R.board_record(series)
    assert rec[0] == R.SERIES and len(rec) == 1 + len(R.KINDS[rec[0]].fields)
    assert R.spec_of(rec) == series
    assert R.spec_of(msgpack.unpackb(msgpack.packb(rec, use_bin_type=True))) == series
    instance = BoardSpec("g:m:daily.20261207:x", Policy.BEST_SCORE, 3, closes_at=20, finalize_after_s=5,
                         series="g:m:daily:x", window=(10, 20))
    rec = R.board_record(instance)
    assert rec[0] == R.INSTANCE and len(rec) == 1 + len(R.KINDS[rec[0]].fields)
    assert R.spec_of(msgpack.unpackb(msgpack.packb(rec, use_bin_type=True))) == instance
    group = R.group_record([built[2], R.scores_record(ScoreColumns.from_events([ev._replace(board_id="c")]), 1,
                                                      np.zeros(1, np.uint8))])
    back = R.parse(msgpack.unpackb(msgpack.packb(group, use_bin_type=True)))
    assert back.kind == R.GROUP and back.board_id is None and R.boards_of(back) == ["b", "c"]
    assert [p.partition for p in R.group_parts(back)] == [0, 1]
    assert [(e.board_id, v) for e, v in R.logged_events(back)] == [("b", 0), ("c", 0)]

    assert R.event_of(built[1]) == ev and R.verdict_of(built[1]) is None
    cols, verdicts = R.columns_of(built[2])
    assert list(cols.events()) == [ev] and verdicts.tolist() == [0]


def test_subscores_records_round_trip_and_other_boards_keep_their_kinds():
    spec = BoardSpec("b", Policy.FASTEST_TIME, 2, 1000, None, subscores=("desc", "asc"))
    assert R.board_record(spec)[0] == "U" and R.spec_of(R.board_record(spec)) == spec
    assert R.board_record(BoardSpec("b", Policy.BEST_SCORE))[0] == "K"
    evs = [ScoreEvent("b", "e1", "p1", 5, 10, 11, b"", (-(2**63), 2**63 - 1)),
           ScoreEvent("b", "e2", "p2", 6, 10, 11, b'{"k":1}', (0, -1))]
    rec = R.scores_record(ScoreColumns.from_events(evs), 1, np.zeros(2, np.uint8))
    assert rec[0] == "N" and len(rec) == 1 + len(R.KINDS["N"].fields)
    back = msgpack.unpackb(msgpack.packb(rec))
    assert R.columns_of(back)[0].events() == evs
    plain = [ScoreEvent("b", "e1", "p1", 5, 10, 11)]
    assert R.scores_record(ScoreColumns.from_events(plain), 0, np.zeros(1, np.uint8))[0] == "C"
    held = HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW, b"", (3, 4))
    d = R.decide_record("b", "e1", "apply", None, None, held)
    assert d[0] == "F" and R.decided_event(msgpack.unpackb(msgpack.packb(d))) == ScoreEvent(
        "b", "e1", "p1", 5, 10, 11, b"", (3, 4))


#: One record of every kind, as the lists the writers built before records were named
#: (what a log holds): the named record of each must pack to exactly these bytes.
LISTS = {
    "B": ["B", "b", "best_score", 3, 1000, None],
    "K": ["K", "b", "cumulative", 2, 1000, 7, 1_793_527_500_000, 0],
    "R": ["R", "b", "cumulative", 2, 1000, 7, 1_793_527_500_000, 0,
          {"every": "week", "timezone": "Europe/Berlin", "at": "04:30", "keep": 12}],
    "T": ["T", "b", "FROZEN"],
    "C": ["C", "b", 1, ["e1", "e2"], ["p1", "p2"], b"\x05" + bytes(7) + b"\x06" + bytes(7), bytes(16), bytes(16),
          b"\x00\x08"],
    "M": ["M", "b", 0, ["e1"], ["p1"], b"\x05" + bytes(7), bytes(8), bytes(8), b"\x00", b'{"k":1}',
          bytes(8) + b"\x07" + bytes(7)],
    "S": ["S", "b", "e1", "p1", 5, 10, 11, 0],
    "I": ["I", "b", "e1", "correction:e1:1", "typo", "mod"],
    "D": ["D", "b", "e1", "apply", None, "mod", "p1", 5, 10, 11],
    "E": ["E", "b", "e1", "reject", "spam", None, "p1", 5, 10, 11, b'{"k":1}'],
    "L": ["L", "b", 41, 3, "e7", "RuntimeError: boom"],
    "U": ["U", "b", "fastest_time", 1, 1000, None, None, 3600, ["desc", "asc"]],
    "N": ["N", "b", 0, ["e1"], ["p1"], b"\x05" + bytes(7), bytes(8), bytes(8), b"\x00", b"", b"",
          b"\xff" * 8 + b"\x01" + bytes(7)],
    "F": ["F", "b", "e1", "apply", None, "mod", "p1", 5, 10, 11, b"", [7, -2]],
    "O": ["O", "b", "cumulative", 2, 1000, 7, 1_793_527_500_000, 0, None,
          {"entry": {"join_required": True, "max_players": 100, "max_attempts": None}}],
    "J": ["J", "b", "p1", 4],
    "H": ["H", "b", ["p2", "p1"], 5],
    "Q": ["Q", "b", ["p1", "p2"], b"\x02\x01"],
    "P": ["P", "b", ["p2", "p1"]],
    "A": ["A", "b", 12, 0, 1, ["p1"], b"\x01" + bytes(7), b"\x02", b"\x03" + bytes(3), b"\x00\x00"],
    "X": ["X", "ea1", 1_793_527_500_000, "0f" * 16, "p1", "\x01" + "\x02" * 15, b"k" * 16,
          [["b", ["e1"], bytes(12), bytes(4)]]],
    "Z": ["Z", "ea1", 1_793_527_600_000],
    "W": ["W", "g:m:d.20261207:x", "best_score", 2, 1000, None, 1_793_527_500_000, 3600, "g:m:d:x",
          1_793_441_100_000, 1_793_527_500_000],
    "G": ["G", [["C", "b", 1, ["e1"], ["p1"], b"\x05" + bytes(7), bytes(8), bytes(8), b"\x00"],
                ["C", "c", 0, ["e1"], ["p1"], b"\x05" + bytes(7), bytes(8), bytes(8), b"\x00"]]],
    "V": ["V", "g:m:w.20261207:x", "best_score", 2, 1000, None, 1_793_527_500_000, 3600, "g:m:w:x",
          1_792_922_700_000, 1_793_527_500_000,
          {"league": {"cohort_size": 30, "tiers": 5, "promote": 5, "demote": 5}, "subscores": ["desc"]}],
    "Y": ["Y", "g:m:w.20261207:x", "g:m:w:x", ["p1", "p2"], b"\x02\x01"],
}


def test_named_records_pack_to_the_bytes_of_the_lists():
    """Each kind's named record has the kind's fields, in order, after ``kind``;
    packing it gives the list's frame byte for byte, and reading the frame back
    and parsing it gives the record again."""
    assert set(LISTS) == set(RECORD_KINDS) == set(R.TYPES)
    pack = msgpack.Packer(use_bin_type=True).pack
    for kind, raw in LISTS.items():
        assert R.TYPES[kind]._fields == ("kind",) + RECORD_KINDS[kind][1], kind
        rec = R.parse(raw)
        assert type(rec) is R.TYPES[kind] and rec.kind == kind and list(rec) == raw
        assert pack(rec) == pack(raw), kind
        assert encode_record(rec) == encode_record(raw), kind
        back = R.parse(unpack_payload(pack(rec)))
        assert back == rec and R.parse(back) is back


def test_record_builders_pack_to_the_lists_they_replaced():
    """The writers' records are named tuples whose frames are the pinned lists."""
    pack = msgpack.Packer(use_bin_type=True).pack
    spec = BoardSpec("b", Policy.CUMULATIVE, 2, 1000, 7, closes_at=1_793_527_500_000, finalize_after_s=0)
    assert pack(R.board_record(spec)) == pack(LISTS["K"])  # a board without recurrence: the K frame, unchanged
    series = replace(spec, recurrence=Recurrence("week", "Europe/Berlin", 270, 12))
    assert pack(R.board_record(series)) == pack(LISTS["R"])
    ev1, ev2 = ScoreEvent("b", "e1", "p1", 5, 0, 0), ScoreEvent("b", "e2", "p2", 6, 0, 0)
    scores = R.scores_record(ScoreColumns.from_events([ev1, ev2]), 1, np.array([0, 8], np.uint8))
    assert type(scores) is R.ScoresRecord and pack(scores) == pack(LISTS["C"])
    meta = R.scores_record(ScoreColumns.from_events([ev1._replace(metadata=b'{"k":1}')]), 0, np.zeros(1, np.uint8))
    assert type(meta) is R.ScoresMetaRecord and pack(meta) == pack(LISTS["M"])
    assert pack(R.score_record(ScoreEvent("b", "e1", "p1", 5, 10, 11), None)) == pack(LISTS["S"])
    held = HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW)
    assert pack(R.decide_record("b", "e1", "apply", None, "mod", held)) == pack(LISTS["D"])
    held_meta = HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW, b'{"k":1}')
    assert pack(R.decide_record("b", "e1", "reject", "spam", None, held_meta)) == pack(LISTS["E"])
    dead = R.dead_letter_record(R.DeadLetter("b", 41, 3, "e7", "RuntimeError: boom"))
    assert pack(dead) == pack(LISTS["L"])
    entered = replace(spec, entry=EntrySpec(True, 100, None))
    assert pack(R.board_record(entered)) == pack(LISTS["O"])
    assert R.spec_of(LISTS["O"]) == entered
    assert pack(R.join_record("b", "p1", 4)) == pack(LISTS["J"])
    assert pack(R.joins_record("b", ["p2", "p1"], 5)) == pack(LISTS["H"])


def test_an_options_board_record_keeps_recurrence_and_entry_and_refuses_unknown_options():
    both = BoardSpec("g:m:daily:x", Policy.BEST_SCORE, 3, recurrence=Recurrence("day", "Europe/Berlin", 240, 7),
                     entry=EntrySpec(False, None, 3))
    rec = R.board_record(both)
    assert rec[0] == R.OPTIONS_BOARD
    assert R.spec_of(msgpack.unpackb(msgpack.packb(rec, use_bin_type=True))) == both
    newer = list(rec[:-1]) + [{"entry": rec.options["entry"], "bracket": {"size": 10}}]
    with pytest.raises(UnsupportedFormat, match="bracket"):
        R.spec_of(newer)
    league = BoardSpec("g:m:s:x", Policy.BEST_SCORE, 2, league=LeagueSpec(50, 5, 10, 10),
                       prizes=(Prize(1, 1, '{"gems":100,"note":"é"}'), Prize(2, 10, '{}')))
    rec = R.board_record(league)
    assert rec[0] == R.OPTIONS_BOARD and list(rec.options) == ["league", "prizes"]
    assert R.spec_of(msgpack.unpackb(msgpack.packb(rec, use_bin_type=True))) == league


def test_parse_refuses_a_list_of_another_layout_or_kind():
    for bad in (["T", "b"], ["T", "b", "FROZEN", "extra"]):
        with pytest.raises(TypeError):
            R.parse(bad)
    for unknown in (["?", "b"], [], None):
        with pytest.raises(UnsupportedFormat, match="at offset 12"):
            R.parse(unknown, 12)


def test_event_id_of_names_the_event_only_for_kinds_that_have_one():
    got = {kind: R.event_id_of(R.parse(raw)) for kind, raw in LISTS.items()}
    assert got == {"B": None, "K": None, "R": None, "W": None, "G": None, "T": None, "C": None, "M": None, "S": "e1",
                   "I": "e1", "D": "e1", "E": "e1", "L": "e7", "O": None, "J": None, "H": None, "U": None, "N": None, "F": "e1",
                   "Q": None, "A": None, "P": None, "X": None, "Z": None, "V": None, "Y": None}


def test_a_board_record_of_log_format_1_reads_without_a_schedule():
    """``B`` records (before ``K``) still replay: no closes_at, the default finalize_after_s."""
    spec = R.spec_of(["B", "g:m:s:x", "fastest_time", 3, 5000, 9])
    assert spec == BoardSpec("g:m:s:x", Policy.FASTEST_TIME, 3, 5000, 9)
    assert (spec.closes_at, spec.finalize_after_s) == (None, 3_600)


def test_metadata_records_only_when_an_event_carries_some():
    plain = ScoreEvent("b", "e1", "p1", 5, 10, 11)
    meta = ScoreEvent("b", "e2", "p2", 6, 10, 11, b'{"k":1}')
    assert R.scores_record(ScoreColumns.from_events([plain]), 0, np.zeros(1, np.uint8))[0] == R.SCORES
    rec = R.scores_record(ScoreColumns.from_events([plain, meta]), 0, np.zeros(2, np.uint8))
    assert rec[0] == R.SCORES_META and len(rec) == 1 + len(R.KINDS[rec[0]].fields)
    cols, _ = R.columns_of(rec)
    assert cols.events() == [plain, meta]
    held = HeldEvent("e2", "p2", 6, 10, 11, Outcome.HELD_FOR_REVIEW, b'{"k":1}')
    d = R.decide_record("b", "e2", "apply", "ok", "mod", held)
    assert d[0] == R.DECIDE_META and len(d) == 1 + len(R.KINDS[d[0]].fields)
    assert R.decided_event(d) == meta._replace(event_id="e2")
    plain_d = R.decide_record("b", "e2", "apply", "ok", "mod", HeldEvent("e2", "p2", 6, 10, 11, Outcome.HELD_FOR_REVIEW))
    assert plain_d[0] == R.DECIDE and R.decided_event(plain_d).metadata == b""


def test_dead_letter_records_round_trip_and_bound_their_error():
    row = R.DeadLetter("b", 41, 3, "e7", "RuntimeError: boom")
    whole = R.DeadLetter(None, 9, None, None, "x" * 2000)
    for d in (row, whole):
        rec = R.dead_letter_record(d)
        assert rec[0] == R.DEAD_LETTER and len(rec) == 1 + len(R.KINDS[rec[0]].fields)
        back = R.dead_letter_of(msgpack.unpackb(msgpack.packb(rec, use_bin_type=True)))
        assert back == d._replace(error=d.error[:R.MAX_ERROR_CHARS])
    assert row.key == (41, 3) and whole.key == (9, None)
    assert len(R.error_text(ValueError("y" * 5000))) == R.MAX_ERROR_CHARS
    assert R.error_text(KeyError("k")) == "KeyError: 'k'"


def test_only_dead_letter_payloads_start_with_its_head():
    """``DEAD_LETTER_HEAD`` tells a dead-letter record from every other kind
    by its first bytes (what the skip-set scan reads)."""
    ev = ScoreEvent("b", "e1", "p1", 5, 10, 11, b'{"k":1}')
    held = HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW, b'{"k":1}')
    others = [
        R.board_record(BoardSpec("b", Policy.BEST_SCORE, 3)), ["B", "b", "best_score", 1, 1000, None],
        R.board_record(BoardSpec("b", Policy.BEST_SCORE, 3, recurrence=Recurrence("day"))),
        R.board_record(BoardSpec("b", Policy.BEST_SCORE, 3, closes_at=2, series="s", window=(1, 2))),
        R.group_record([R.scores_record(ScoreColumns.from_events([ev]), 0, np.zeros(1, np.uint8))]),
        [R.STATE, "b", "FROZEN"], R.score_record(ev, None),
        R.scores_record(ScoreColumns.from_events([ev._replace(metadata=b"")]), 0, np.zeros(1, np.uint8)),
        R.scores_record(ScoreColumns.from_events([ev]), 0, np.zeros(1, np.uint8)),
        [R.INVALIDATE, "b", "e1", "c1", None, None], R.decide_record("b", "e1", "apply", None, None, held),
        R.decide_record("b", "e1", "apply", None, None, HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW)),
        R.board_record(BoardSpec("b", Policy.BEST_SCORE, 3, subscores=("asc",))),
        R.scores_record(ScoreColumns.from_events([ev._replace(subscores=(1,))]), 0, np.zeros(1, np.uint8)),
        R.decide_record("b", "e1", "apply", None, None, HeldEvent("e1", "p1", 5, 10, 11, Outcome.HELD_FOR_REVIEW,
                                                                  b"", (1,))),
        ["L", "b", 1], ["L"],  # not the dead-letter layout
        R.board_record(BoardSpec("b", Policy.BEST_SCORE, 3, entry=EntrySpec(True, 6, 7))), R.join_record("b", "p", 0),
        R.joins_record("b", ["p", "q"], 1),
        R.carry_record("b", ["p"], np.array([2])), R.parse(LISTS["A"]), R.parse(LISTS["P"]), R.parse(LISTS["X"]),
        R.parse(LISTS["Z"]), R.parse(LISTS["V"]), R.series_carry_record("b", "s", ["p"], np.array([2])),
    ]
    assert {r[0] for r in others} | {R.DEAD_LETTER} == set(RECORD_KINDS)
    for rec in others:
        assert not msgpack.packb(rec, use_bin_type=True).startswith(R.DEAD_LETTER_HEAD), rec[0]
    for d in (R.DeadLetter("b", 1, 0, "e", "x"), R.DeadLetter(None, 2**40, None, None, "")):
        assert msgpack.packb(R.dead_letter_record(d), use_bin_type=True).startswith(R.DEAD_LETTER_HEAD)


def test_dead_letters_in_keeps_one_per_named_event():
    a, b = R.DeadLetter("b", 4, 1, "e1", "boom"), R.DeadLetter("b", 4, None, None, "bang")
    log = [(3, [R.STATE, "b", "FROZEN"]), (5, R.dead_letter_record(a)), (6, R.dead_letter_record(b)),
           (7, R.dead_letter_record(a._replace(error="again")))]
    assert R.dead_letters_in(log) == {(4, 1): a, (4, None): b}


def test_journal_and_partition_codes_are_pinned():
    assert journal.AUDIT_NAMES == AUDIT_CODES
    assert (journal.INVALIDATED, journal.ALREADY_INVALIDATED, journal.REJECTED) == (101, 102, 103)
    assert min(AUDIT_CODES) > max(OUTCOME_CODES)
    assert dict(enumerate(journal.KIND_NAMES)) == JOURNAL_KINDS
    assert (journal.KIND_SCORE, journal.KIND_INVALIDATION, journal.KIND_DECISION) == (0, 1, 2)
    assert (partition.ST_NONE, partition.ST_ACTIVE, partition.ST_INVALID) == (0, 1, 2)


def test_strings_on_disk_are_pinned():
    assert {p.value for p in Policy} == POLICIES
    assert {s.value for s in BoardState} == BOARD_STATES
    assert set(DECISIONS) == {"apply", "reject"}


def test_format_numbers_are_pinned():
    """Bumping one is a deliberate act: update this table, docs/storage.md and
    add a golden fixture (tests/fixtures/make_golden.py)."""
    assert {name: getattr(formats, name) for name in FORMATS} == FORMATS


def test_check_kind_refuses_unknown_kinds():
    for kind in RECORD_KINDS:
        R.check_kind(0, [kind])
    for bad in (["?", "b"], [], "B", None):
        with pytest.raises(UnsupportedFormat):
            R.check_kind(7, bad)


# ----------------------------------------------------------- state formats


def _shard() -> ShardCore:
    core = ShardCore(0, 1)
    spec = BoardSpec("b", Policy.CUMULATIVE, 2)
    events = [ScoreEvent("b", f"e{i}", f"p{i % 5}", i, i, i) for i in range(20)]
    recs = [R.board_record(spec)]
    for p in range(2):
        mine = [e for e in events if part_of(e.player_id, 2) == p]
        recs.append(R.scores_record(ScoreColumns.from_events(mine), p, np.zeros(len(mine), np.uint8)))
    core.replay(enumerate(recs))
    return core


def test_states_carry_their_format_and_load_without_it():
    core = _shard()
    state = core.to_state()
    assert state["format"] == formats.SHARD_STATE_FORMAT
    assert all(p[2]["format"] == formats.PARTITION_STATE_FORMAT for p in state["parts"])
    state.pop("format")
    for p in state["parts"]:
        p[2].pop("format")
    assert ShardCore.from_state(state).checksum_of_state() == core.checksum_of_state()


def test_newer_state_formats_are_refused():
    state = _shard().to_state()
    state["format"] = formats.SHARD_STATE_FORMAT + 1
    with pytest.raises(UnsupportedFormat, match="newer than format"):
        ShardCore.from_state(state)
    pstate = _shard().to_state()["parts"][0][2]
    pstate["format"] = formats.PARTITION_STATE_FORMAT + 1
    with pytest.raises(UnsupportedFormat):
        Partition.from_state(Policy.CUMULATIVE, 1000, pstate)
    router = Router(_OneShard(), None)
    rstate = router.to_state()
    assert rstate["format"] == formats.ROUTER_STATE_FORMAT
    rstate["format"] += 1
    with pytest.raises(UnsupportedFormat):
        Router(_OneShard(), None).load_state(rstate)


class _OneShard:
    n = 1


def test_a_series_spec_survives_the_log_and_every_snapshot_that_holds_board_records():
    """A recurring board's ``R`` record folds into the router and a shard, and
    their snapshots (which hold specs as board records) give the same spec back."""
    from engine.router.control import BoardControl
    from engine.router.registry import BoardRegistry

    series = BoardSpec("g:m:daily:x", Policy.BEST_SCORE, 2, recurrence=Recurrence("month", "Australia/Lord_Howe", 90, 3))
    plain = BoardSpec("g:m:S1:x", Policy.BEST_SCORE, 2)
    instance = BoardSpec("g:m:daily.20261201:x", Policy.BEST_SCORE, 2, closes_at=20, series=series.board_id,
                         window=(10, 20))
    log = [list(msgpack.unpackb(msgpack.packb(R.board_record(s), use_bin_type=True)))
           for s in (series, plain, instance)]
    assert [rec[0] for rec in log] == [R.SERIES, R.BOARD2, R.INSTANCE]
    ctl = BoardControl(BoardRegistry(2), None, None)  # type: ignore[arg-type]  # fold only: no I/O
    for offset, rec in enumerate(log):
        ctl.registry.apply(offset, rec)
    state = msgpack.unpackb(msgpack.packb(ctl.to_state(), use_bin_type=True), strict_map_key=False)
    reloaded = BoardControl(BoardRegistry(2), None, None)  # type: ignore[arg-type]
    reloaded.load_state(state)
    for spec in (series, plain, instance):
        assert ctl.registry.ctl(spec.board_id).spec == reloaded.registry.ctl(spec.board_id).spec == spec
    assert ctl.registry.instances_of(series.board_id) == reloaded.registry.instances_of(series.board_id) == [
        instance.board_id]
    core = ShardCore(0, 1)
    core.replay(enumerate(log))
    again = ShardCore.from_state(msgpack.unpackb(msgpack.packb(core.to_state(), use_bin_type=True),
                                                 strict_map_key=False))
    assert core.specs[series.board_id] == again.specs[series.board_id] == series
    assert again.specs[plain.board_id] == plain
