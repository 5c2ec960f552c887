"""Journal.scrub (issue 28 item 2): a scrubbed row's event id and metadata leave every file of the journal.

Against a plain model of every row appended: after a scrub the scrubbed
rows read back with as many zero bytes (ids and metadata), their ids are not
found any more, every other id still is, the chains and records are
unchanged, and no file under the journal's directory (no blob of a memory
store) holds a scrubbed id's bytes or, in a run, its 64-bit hash. A scrub is
idempotent, survives a snapshot round trip, and a reopen from a snapshot
taken before it (files cut back, runs rebuilt) is made whole again by
scrubbing the same rows again (what a replay does).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.journal import (
    FENCE, OWNED, ROW, Journal, MemoryStore, Run, kept_blocks, owner_add, run_holds,
)
from tests.engine.test_journal import put_row
from engine.core.players import encode_ids, hash_bytes
from engine.log.journal_files import FilePlace, FileStore

PLAYERS = 10


class Model:
    """Every row appended: (player, id, metadata), which rows are scrubbed,
    and the row owning each id (the first row of an id no row owned when
    it came, as the partition decides)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, bytes]] = []
        self.owner: dict[str, int] = {}
        self.zeroed: set[int] = set()
        self.made = 0

    def new_id(self, rnd: random.Random, p: int) -> str:
        """Distinct and self-delimited (no id is inside another), half not ASCII."""
        self.made += 1
        return f"<{'é' if p % 2 else 'P'}{p:02d}E{self.made:06d}>"

    def scrubbed(self, rows) -> None:
        self.zeroed |= set(rows)
        self.owner = {e: r for e, r in self.owner.items() if r not in self.zeroed}


def grow(j: Journal, m: Model, rnd: random.Random, batches: int, most: int = 8) -> None:
    """Append ``batches`` batches as the partition's kernel would (one reserve
    each): new ids, redeliveries of a player's earlier id (not owned; never
    of a scrubbed row's), and metadata that quotes the id."""
    for _ in range(batches):
        batch = []
        for _ in range(rnd.randrange(1, most + 1)):
            p = rnd.randrange(PLAYERS)
            mine = [e for r, (q, e, _) in enumerate(m.rows) if q == p and r not in m.zeroed]
            eid = rnd.choice(mine) if mine and rnd.random() < 0.15 else m.new_id(rnd, p)
            meta = b'{"about":"%s"}' % eid.encode() if rnd.random() < 0.6 else b""
            batch.append((p, eid, meta))
        buf, offs = encode_ids([b[1] for b in batch])
        j.reserve(len(batch), len(buf), sum(len(b[2]) for b in batch))
        j.ensure_players(PLAYERS)
        for x, (p, eid, meta) in enumerate(batch):
            t = put_row(j, p, buf[offs[x]:offs[x + 1]], x, 0, 0, meta)
            if eid not in m.owner and j.find(eid) < 0:
                owner_add(j.slots, t, np.uint64(hash_bytes(j.earena, j.eoffs[t], j.eoffs[t + 1])))
                j.owned += 1
                m.owner[eid] = j.base + t
            m.rows.append((p, eid, meta))


def agree(j: Journal, m: Model) -> None:
    """The journal answers what the model says, row by row and id by id."""
    assert len(j) == len(m.rows)
    cols = j.columns(0, len(j))
    for r, (p, eid, meta) in enumerate(m.rows):
        raw = eid.encode()
        want_id = bytes(len(raw)) if r in m.zeroed else raw
        want_meta = bytes(len(meta)) if r in m.zeroed else meta
        assert j.record(r)[0] == p
        assert j.id_bytes(r) == want_id and j.meta_bytes(r) == want_meta
        assert cols.earena[cols.eoffs[r]:cols.eoffs[r + 1]].tobytes() == want_id
        assert cols.marena[cols.moffs[r]:cols.moffs[r + 1]].tobytes() == want_meta
    for p in range(PLAYERS):
        assert j.rows_of(p) == [r for r, row in enumerate(m.rows) if row[0] == p]
    for eid in {e for _, e, _ in m.rows}:
        assert j.find(eid) == m.owner.get(eid, -1), eid
    if m.rows:  # the stored rows by one batch lookup too
        ids = sorted({e for _, e, _ in m.rows})
        buf, offs = encode_ids(ids)
        got = j.find_stored(buf, offs, np.arange(len(ids), dtype=np.int64))
        for eid, r in zip(ids, got.tolist()):
            owner = m.owner.get(eid, -1)
            assert r == (owner if 0 <= owner < j.base else -1), eid
    zeroed = np.array(sorted(m.zeroed), np.int64)
    for run in j.runs:  # no entry left for a scrubbed row, even under the hash of its zero bytes
        assert not np.isin(run.rows, zeroed).any()
    stored = zeroed[zeroed < j.base]
    kinds = np.frombuffer(j.store.rows.read(0, j.base * ROW.itemsize), ROW)["kind"]
    assert not (kinds[stored] & OWNED).any(), "a scrubbed stored row owns nothing (a rebuild of the runs skips it)"
    j._check()


def files_of(j: Journal, where: Path | None) -> dict[str, bytes]:
    """Every byte the journal's store holds: the files under its directory, or a memory store's blobs."""
    if where is None:
        st_ = j.store.to_state(j.runs)
        out = {k: st_[k] for k in ("rows", "ids", "meta", "moffs")}
        assert isinstance(j.store, MemoryStore)
        out.update({f"run-{seq}": h + r for seq, (h, r) in j.store._runs.items()})
        return out
    return {f.name: f.read_bytes() for f in where.iterdir() if f.is_file()}


def leaks(j: Journal, where: Path | None, ids: set[str]) -> dict[str, list[str]]:
    """Which of ``ids`` some file still holds (and which files), as bytes
    anywhere or as its 64-bit hash in a run file."""
    files = files_of(j, where)
    found: dict[str, list[str]] = {}
    for eid in sorted(ids):
        raw = eid.encode()
        h = np.uint64(hash_bytes(np.frombuffer(raw, np.uint8), 0, len(raw))).astype("<u8").tobytes()
        for name, data in files.items():
            if raw in data or (name.startswith("run-") and h in data):
                found.setdefault(eid, []).append(name)
    return found


def make(kind: str, tmp_path: Path, tail: int) -> tuple[Journal, Path | None]:
    if kind == "memory":
        return Journal(MemoryStore(), tail), None
    return Journal(FileStore(tmp_path / "j"), tail), tmp_path / "j"


def reopen(j: Journal, state: dict, where: Path | None) -> Journal:
    return Journal.from_state(msgpack.unpackb(msgpack.packb(state)), None if where is None else FilePlace(where),
                              j.tail_rows)


def players_rows(m: Model, players: set[int]) -> list[int]:
    return [r for r, row in enumerate(m.rows) if row[0] in players]


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("tail", [3, 8])
def test_a_scrub_leaves_no_byte_or_hash_of_the_ids_in_any_file(tmp_path, kind, tail):
    rnd = random.Random(tail)
    j, where = make(kind, tmp_path, tail)
    m = Model()
    grow(j, m, rnd, 40)
    assert j.base > 0 and j.n > 0 and len(j.runs) >= 2  # stored rows, merged runs and a tail
    victims = {1, 4, 7}
    rows = players_rows(m, victims)
    ids = {m.rows[r][1] for r in rows}
    assert any(r < j.base for r in rows) and any(r >= j.base for r in rows)
    on_disk = {m.rows[r][1] for r in rows if r < j.base}
    in_runs = {e for e in on_disk if m.owner[e] < j.base}
    before = leaks(j, where, ids)
    assert on_disk <= set(before) and in_runs  # the scan sees them before
    assert all(any(f.startswith("run-") for f in before[e]) for e in in_runs)
    seqs = {run.seq for run in j.runs}

    wiped = j.scrub(np.array(rows[::-1]))  # any order
    assert wiped == sum(len(m.rows[r][1].encode()) + len(m.rows[r][2]) for r in rows)
    m.scrubbed(rows)
    agree(j, m)
    assert leaks(j, where, ids) == {}
    assert {run.seq for run in j.runs} != seqs  # the runs holding them were written again

    assert j.scrub(np.array(rows)) == wiped  # again: harmless
    agree(j, m)
    assert leaks(j, where, ids) == {}

    again = reopen(j, j.to_state(), where)  # a snapshot after the scrub
    agree(again, m)
    grow(again, m, rnd, 30)  # and the journal goes on: flushes, merges, new owners of nothing scrubbed
    agree(again, m)
    assert leaks(again, where, ids) == {}


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_scrub_of_tail_rows_only_touches_no_run(tmp_path, kind):
    j, where = make(kind, tmp_path, 1000)
    m = Model()
    grow(j, m, random.Random(2), 10)
    j.flush()
    grow(j, m, random.Random(3), 10)
    runs = [(run.seq, len(run)) for run in j.runs]
    rows = [r for r in players_rows(m, {2, 3}) if r >= j.base]
    j.scrub(np.array(rows))
    m.scrubbed(rows)
    assert [(run.seq, len(run)) for run in j.runs] == runs
    agree(j, m)
    j.flush()  # the scrubbed rows go to the store owning nothing: no run names them
    agree(j, m)
    assert leaks(j, where, {m.rows[r][1] for r in rows}) == {}


def test_a_reopen_from_a_snapshot_before_the_scrub_is_whole_once_scrubbed_again(tmp_path):
    """The files are cut back to the older snapshot's sizes (the zeroed bytes
    stay zeroed), its runs named by a scrub's rewrite or merged away are
    rebuilt from the rows (scrubbed rows no longer own their ids), and its
    tail still holds what it held: scrubbing the same rows again (a replay of
    the scrub) clears it."""
    rnd = random.Random(5)
    j = Journal(FileStore(tmp_path / "j"), 4)
    m = Model()
    grow(j, m, rnd, 20)
    older = j.to_state()
    at = len(m.rows)
    grow(j, m, rnd, 25)  # more flushes and merges after the snapshot
    rows = players_rows(m, {0, 5})
    ids = {m.rows[r][1] for r in rows}
    j.scrub(np.array(rows))
    assert leaks(j, tmp_path / "j", ids) == {}

    back = reopen(j, older, tmp_path / "j")
    assert [run.seq for run in back.runs] != [seq for seq, _ in older["runs"]]  # its runs were rebuilt
    cut = Model()
    cut.rows, cut.made = m.rows[:at], m.made
    cut.owner = {e: r for e, r in m.owner.items() if r < at}
    cut.scrubbed([r for r in rows if r < back.base])  # the files' part is scrubbed, the snapshot's tail is not
    agree(back, cut)
    redo = [r for r in rows if r < at]
    back.scrub(np.array(redo))
    cut.scrubbed(redo)
    agree(back, cut)
    grow(back, cut, rnd, 25)
    agree(back, cut)
    assert leaks(back, tmp_path / "j", {m.rows[r][1] for r in redo}) == {}


def test_rows_past_the_journal_are_refused(tmp_path):
    j, _ = make("memory", tmp_path, 4)
    grow(j, Model(), random.Random(1), 3)
    with pytest.raises(ValueError):
        j.scrub(np.array([len(j)]))
    with pytest.raises(ValueError):
        j.scrub(np.array([-1]))
    assert j.scrub(np.zeros(0, np.int64)) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([1, 2, 5, 16]), st.sampled_from(["memory", "file"]),
       st.lists(st.floats(0, 1), min_size=1, max_size=3))
def test_any_scrub_sets_keep_the_journal_whole(seed, tail, kind, shares):
    """Random journals, random sets of rows (not whole players: a redelivery
    row may go while its owner stays, or the reverse), scrubbed in a few
    rounds with more events between them: the journal agrees with the model
    after each, and after a snapshot round trip."""
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        j, where = make(kind, Path(tmp), tail)
        m = Model()
        for share in shares:
            grow(j, m, rnd, rnd.randrange(1, 12), 6)
            rows = [r for r in range(len(m.rows)) if rnd.random() < share]
            j.scrub(np.array(rows, np.int64))
            m.scrubbed(rows)
            agree(j, m)
            gone = {m.rows[r][1] for r in m.zeroed} - {e for r, (_, e, _) in enumerate(m.rows) if r not in m.zeroed}
            assert leaks(j, where, gone) == {}
        again = reopen(j, j.to_state(), where)
        agree(again, m)
        j.close()
        again.close()


@settings(deadline=None)
@given(st.lists(st.integers(0, 40), max_size=400), st.sets(st.integers(0, 450), max_size=200),
       st.sampled_from([FENCE, 2 * FENCE, 1 << 18]))
def test_a_run_filtered_in_blocks_is_the_run_without_those_rows(values, drop, block):
    """kept_blocks against a plain mask: the same entries in the same order,
    in full blocks of ``block`` (a multiple of FENCE, what write_run_blocks
    needs for its fence) but the last; run_holds counts what goes."""
    run = Run(0, np.array(sorted(values), np.uint64), np.random.default_rng(len(values)).permutation(len(values)))
    gone = np.array(sorted(drop), np.int64)
    keep = ~np.isin(run.rows, gone)
    blocks = [(h.copy(), r.copy()) for h, r in kept_blocks(run, gone, block)]
    assert all(len(h) == block for h, _ in blocks[:-1]) and all(0 < len(h) <= block for h, _ in blocks)
    got_h = np.concatenate([h for h, _ in blocks]) if blocks else np.zeros(0, np.uint64)
    got_r = np.concatenate([r for _, r in blocks]) if blocks else np.zeros(0, np.int64)
    assert got_h.tolist() == run.hashes[keep].tolist() and got_r.tolist() == run.rows[keep].tolist()
    assert run_holds(run, gone, block) == int((~keep).sum())
