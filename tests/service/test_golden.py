"""Golden fixtures: data directories written by earlier FlowRank versions
(tests/fixtures/golden_*/, made by tests/fixtures/make_golden.py) must keep
replaying to the results pinned next to them: the same checksum, version,
ranked rows, quarantine and histories of every board, and the same admission
(a redelivery stays a duplicate, a reused id a conflict). Each is opened from
a copy three ways: newest snapshots + log tail, the log alone (snapshots
deleted), and with another shard count (shard snapshots ignored, router
snapshot used). A format change adds a fixture; it never edits one
(docs/storage.md, "Golden fixtures").

Also: a data directory that holds a format newer than this version reads
refuses to open (``UnsupportedFormat``) instead of being misread.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from engine.core import formats
from engine.core import records as R
from engine.core.errors import UnsupportedFormat
from engine.log import SegmentedFileLog
from engine.log.framing import encode_batch
from engine.log.snapshots import decode_snapshot, encode_snapshot
from tests.fixtures.make_golden import (dead_letters, observe, observe_competitions, observe_erasures, open_data,
                                       probe_event, stop_without_snapshot)
from tests.service.helpers import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = sorted((p for p in FIXTURES.glob("golden_*") if (p / "expected.json").is_file()),
                key=lambda p: (len(p.name), p.name))  # golden_v2 before golden_v10: the last is the newest


def test_there_is_a_fixture_for_todays_formats():
    from tests.fixtures.make_golden import formats_now

    written = [json.loads((p / "expected.json").read_text())["formats"] for p in GOLDEN]
    assert formats_now() in written, (
        "the on-disk formats changed (engine.core.formats, SEGMENT_VERSION, SNAP_VERSION): add a golden fixture "
        "for them with `python -m tests.fixtures.make_golden tests/fixtures/golden_vN` (docs/storage.md)")


def _with_meta(expected: dict) -> bool:
    """Whether a fixture pins metadata (written from log format 3 on)."""
    return "metadata" in next(iter(expected["boards"].values()))


def _with_subscores(expected: dict) -> bool:
    """Whether a fixture pins subscores (written from log format 5 on)."""
    return "subscores" in next(iter(expected["boards"].values()))


def _copy(fixture: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(fixture / "data", data)
    return data


@pytest.mark.parametrize("mode", ["snapshot+tail", "log only", "other shard count"])
@pytest.mark.parametrize("fixture", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_fixture_replays_to_its_pinned_results(fixture, mode, tmp_path):
    expected = json.loads((fixture / "expected.json").read_text())
    data = _copy(fixture, tmp_path)
    n_shards = expected["n_shards"]
    if mode == "log only":
        shutil.rmtree(data / "snapshots")
    elif mode == "other shard count":
        n_shards += 1

    async def go():
        svc = await open_data(data, n_shards)
        try:
            await _check_pinned(svc, expected)
        finally:
            await stop_without_snapshot(svc)

    run(go())


async def _check_pinned(svc, expected: dict) -> None:
    """What the fixture pins, read from ``svc``; then the probes, submitted one at a time."""
    assert await observe(svc, expected["players"], _with_meta(expected),
                         _with_subscores(expected)) == expected["boards"]
    if "schedules" in expected:  # golden_v3 on: season schedules (K records, router format 2)
        got = {b.board_id: [b.closes_at, b.finalize_after_s] for b in await svc.list_boards()}
        # (golden_v6 on: a series' instances of the days it was written and replayed are not pinned)
        pinned = {b: v for b, v in got.items() if b in expected["schedules"]}
        assert pinned == expected["schedules"]
        assert all(R.parse(R.board_record(svc.router.boards[b].spec)).kind in (R.INSTANCE, R.INSTANCE_OPTIONS)
                   for b in set(got) - set(pinned)), sorted(set(got) - set(pinned))
    if "competitions" in expected:  # golden_v7 on: league cohorts and awards (docs/api.md §16)
        assert await observe_competitions(svc) == expected["competitions"]
    if "erasures" in expected:  # golden_v8 on: erasures and their status (docs/api.md §17)
        got = await observe_erasures(svc, {e: v[0] for e, v in expected["erasures"].items()})
        assert got == expected["erasures"]
    if "dead_letters" in expected:  # golden_v5 on: dead-letter records, honoured with the bug fixed
        assert dead_letters(svc) == expected["dead_letters"]
    probes = [probe_event(p["event"]) for p in expected["probes"]]
    results = [(await svc.submit([ev]))[0].outcome.value for ev in probes]  # one at a time: as pinned
    assert results == [p["outcome"] for p in expected["probes"]]


# ------------------------------------------------- imported into PostgreSQL


@pytest.fixture(scope="module")
def golden_database(pg_cluster):
    """``url_for(fixture)``: one database per fixture on the session's pg_cluster (made on first use,
    dropped at the end of the module), its log's tables dropped before each use: every import is into
    an empty log."""
    import psycopg

    made: dict[str, str] = {}

    def url_for(fixture: Path) -> str:
        if fixture.name not in made:
            made[fixture.name] = pg_cluster.create_database(f"golden_{fixture.name}_{os.getpid()}")
        with psycopg.connect(made[fixture.name], autocommit=True, connect_timeout=5) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        return made[fixture.name]

    yield url_for
    with psycopg.connect(pg_cluster.url_for("postgres", "primary"), autocommit=True, connect_timeout=5) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS golden_{name}_{os.getpid()} WITH (FORCE)")


@pytest.mark.parametrize("mode", ["snapshot+tail", "log only", "other shard count"])
@pytest.mark.parametrize("fixture", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_fixture_imported_into_postgresql_replays_to_its_pinned_results(fixture, mode, tmp_path,
                                                                              golden_database):
    """``flowrank log import`` of the fixture's data directory into an empty PostgreSQL log, then the
    service opened on that log (its log/ and snapshots/ gone from the directory: only the database is read;
    keys, journals, archives and erasure.key stay) reads and admits exactly as pinned."""
    from engine.log.pg_import import import_data_dir
    from engine.log.pg_log import PostgresLog

    expected = json.loads((fixture / "expected.json").read_text())
    data = _copy(fixture, tmp_path)
    n_shards = expected["n_shards"]
    if mode == "log only":
        shutil.rmtree(data / "snapshots")
    elif mode == "other shard count":
        n_shards += 1
    url = golden_database(fixture)
    with SegmentedFileLog.open(data / "log", record_format=expected["formats"]["log_format"]) as log:
        source = [(o, r) for o, r in log.read_from(0)]
        formats = log.record_formats()
    report = import_data_dir(data, url, chunk_records=64)  # several COPYs per segment
    snaps = len(list((data / "snapshots").glob("*.snap"))) if mode != "log only" else 0
    assert (report.records, report.snapshots, report.skipped_snapshots) == (len(source), snaps, [])
    with PostgresLog.open(url, writer=False) as log:
        assert list(log.read_from(0)) == source
        assert log.record_formats()[:len(formats)] == formats
    shutil.rmtree(data / "log")
    if (data / "snapshots").exists():
        shutil.rmtree(data / "snapshots")

    async def go():
        svc = await open_data(data, n_shards, log_url=url)
        try:
            await _check_pinned(svc, expected)
            assert svc.event_log.end_offset() > len(source)  # what this run appended went to the database
        finally:
            await stop_without_snapshot(svc)
        assert not (data / "log").exists()

    run(go())


@pytest.mark.parametrize("fixture", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_fixture_covers_what_it_claims(fixture, tmp_path):
    """The fixture really holds a snapshot part way, a log tail after it,
    several segments and every record kind the current code writes."""
    expected = json.loads((fixture / "expected.json").read_text())
    data = _copy(fixture, tmp_path)
    snaps = sorted((data / "snapshots").glob("router.*.snap"))
    assert snaps, "no router snapshot"
    snap_offset = int(snaps[-1].name.split(".")[1])
    with SegmentedFileLog.open(data / "log", record_format=expected["formats"]["log_format"]) as log:
        assert len(log.segments()) > 1
        assert 0 < snap_offset < log.end_offset(), "the snapshot must leave a log tail"
        kinds = [rec[0] for _, rec in log.read_from(0)]
    assert {R.STATE, R.SCORES, R.INVALIDATE, R.DECIDE} <= set(kinds)
    board_kind = R.BOARD2 if expected["formats"]["log_format"] >= 2 else R.BOARD
    assert board_kind in kinds
    assert R.STATE in kinds[snap_offset:] and R.DECIDE in kinds[snap_offset:]
    if expected["formats"]["log_format"] >= 3:  # metadata: scores and decisions that carry it
        assert {R.SCORES_META, R.DECIDE_META} <= set(kinds)
    if expected["formats"]["log_format"] >= 5:  # subscores: a board, its score frames and a decision
        assert {R.BOARD_SUBS, R.SCORES_SUBS, R.DECIDE_SUBS} <= set(kinds)
    if expected["formats"]["log_format"] >= 4:  # dead letters: one before the snapshot, one in the tail
        assert R.DEAD_LETTER in kinds[:snap_offset] and R.DEAD_LETTER in kinds[snap_offset:]
        assert len(expected["dead_letters"]) == kinds.count(R.DEAD_LETTER) == 2
    if expected["formats"]["log_format"] >= 5:  # a series, its instances, and fan-outs before and after the snapshot
        assert {R.SERIES, R.INSTANCE} <= set(kinds)
        assert R.GROUP in kinds[:snap_offset] and R.GROUP in kinds[snap_offset:]
    if expected["formats"]["log_format"] >= 6:  # a league with prizes: entries, awards, the tiers carried
        assert R.ENTER in kinds[:snap_offset] and {R.AWARDS, R.CARRY} <= set(kinds[snap_offset:])
    if expected["formats"]["log_format"] >= 9:  # a league series: its instances, the tiers carried on both sides
        assert R.INSTANCE_OPTIONS in kinds[:snap_offset] and R.SERIES_CARRY in kinds[:snap_offset]
        assert R.SERIES_CARRY in kinds[snap_offset:]
    if expected["formats"]["log_format"] >= 7:  # erasures: one complete before the snapshot, one pending after it
        assert {R.ERASE, R.ERASED} <= set(kinds[:snap_offset]) and R.ERASE in kinds[snap_offset:]
        assert R.ERASED not in kinds[snap_offset:]


# ------------------------------------------------------- newer formats refuse


def _newest_fixture(tmp_path: Path) -> Path:
    return _copy(GOLDEN[-1], tmp_path)


def _open_refuses(data: Path, match: str) -> None:
    async def go():
        with pytest.raises(UnsupportedFormat, match=match):
            svc = await open_data(data)
            await stop_without_snapshot(svc)

    run(go())


def _rewrite_snapshot(path: Path, change) -> None:
    offset, state = decode_snapshot(path.read_bytes())
    change(state)
    path.write_bytes(encode_snapshot(offset, state))


def test_a_segment_of_a_newer_record_format_refuses_to_open(tmp_path):
    data = _newest_fixture(tmp_path)
    seg = sorted((data / "log").glob("*.log"))[1]
    raw = bytearray(seg.read_bytes())
    struct.pack_into("<H", raw, 6, formats.LOG_FORMAT + 1)  # the header's record_format
    seg.write_bytes(bytes(raw))
    _open_refuses(data, f"records in format {formats.LOG_FORMAT + 1}")


@pytest.mark.parametrize("name, where", [("router", "router snapshot"), ("shard-1", "snapshot shard-1"),
                                         ("shard-2/partition", "partition state")])
def test_a_snapshot_state_of_a_newer_format_refuses_to_open(tmp_path, name, where):
    data = _newest_fixture(tmp_path)
    owner = name.split("/")[0]
    path = sorted((data / "snapshots").glob(f"{owner}.*.snap"))[-1]
    known = {"router": formats.ROUTER_STATE_FORMAT, "shard-1": formats.SHARD_STATE_FORMAT,
             "shard-2/partition": formats.PARTITION_STATE_FORMAT}[name]

    def newer(state):
        if name.endswith("/partition"):
            state["parts"][0][2]["format"] = known + 1
        else:
            state["format"] = known + 1

    _rewrite_snapshot(path, newer)
    _open_refuses(data, f"{where} is in format {known + 1}")


def test_a_snapshot_without_a_format_key_reads_as_format_1(tmp_path):
    """States written before the key existed are the first format."""
    fixture = GOLDEN[-1]
    expected = json.loads((fixture / "expected.json").read_text())
    data = _copy(fixture, tmp_path)

    def strip(state):
        state.pop("format", None)
        for part in state.get("parts", []):
            part[2].pop("format", None)

    for path in (data / "snapshots").glob("*.snap"):
        _rewrite_snapshot(path, strip)

    async def go():
        svc = await open_data(data, expected["n_shards"])
        try:
            assert await observe(svc, expected["players"], _with_meta(expected),
                                 _with_subscores(expected)) == expected["boards"]
        finally:
            await stop_without_snapshot(svc)

    run(go())


def test_an_unknown_record_kind_in_the_tail_refuses_to_open(tmp_path):
    data = _newest_fixture(tmp_path)
    last = sorted((data / "log").glob("*.log"))[-1]
    blob, _ = encode_batch([["?", "golden:best:1", "something new"]])
    with open(last, "ab") as f:
        f.write(blob)
    _open_refuses(data, "has kind '\\?', not in log record format")

