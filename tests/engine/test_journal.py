"""engine.core.journal: the journal on disk, against a plain list of every row.

One contract, both stores (STYLE §12): whatever the tail size, the rows a
journal hands back (by player, by event id, one by one) are the rows appended,
and a snapshot taken at any point reopens to the same journal: files longer
than the snapshot are cut back, run files merged away are rebuilt from the
rows, and files that are gone raise JournalLost.
"""

from __future__ import annotations

import random
import shutil

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.journal import (
    FENCE, KIND_SCORE, Journal, JournalColumns, JournalLost, MemoryStore, Run, merged_blocks, owner_add, probe_run,
)
from engine.log.journal_files import FilePlace, FileStore
from engine.core.players import encode_ids, hash_bytes

TRICKY = ["e", "é", "𝔘", "e\ud800", "a" * 40, "a" * 39 + "b"]


def make(kind: str, tmp_path, tail: int) -> Journal:
    return Journal(MemoryStore() if kind == "memory" else FileStore(tmp_path / "j"), tail)



def put_row(j: Journal, p: int, raw, v: int, a: int, s: int, meta: bytes) -> int:
    """Append one score row of player ``p`` (event id bytes ``raw``) to the tail, as the partition's
    kernel does after ``reserve``; its tail index."""
    t = j.n
    j.pid[t], j.kind[t], j.out[t], j.val[t], j.ach[t], j.sub[t] = p, KIND_SCORE, 1, v, a, s
    j.prev[t] = j.heads[p]
    j.heads[p] = j.base + t
    e0 = j.eoffs[t]
    j.earena[e0:e0 + len(raw)] = raw
    j.eoffs[t + 1] = e0 + len(raw)
    m0 = j.moffs[t]
    j.marena[m0:m0 + len(meta)] = np.frombuffer(meta, np.uint8)
    j.moffs[t + 1] = m0 + len(meta)
    j.n += 1
    return t

def append_batch(j: Journal, rows: list, rnd: random.Random, n: int, owned_ids: dict) -> None:
    """Append n rows as the partition's kernel would (a batch: one reserve),
    owning the ids not owned yet; record them in ``rows`` / ``owned_ids``."""
    batch = []
    for _ in range(n):
        eid = rnd.choice(TRICKY) + str(rnd.randrange(200))
        meta = b'{"m":%d}' % rnd.randrange(10**rnd.randrange(1, 9)) if rnd.random() < 0.5 else b""
        batch.append((rnd.randrange(12), eid, rnd.randrange(-5, 5), rnd.randrange(4), rnd.randrange(4), meta))
    buf, offs = encode_ids([b[1] for b in batch])
    j.reserve(len(batch), len(buf), sum(len(b[5]) for b in batch))
    j.ensure_players(12)
    for x, (p, eid, v, a, s, meta) in enumerate(batch):
        t = put_row(j, p, buf[offs[x]:offs[x + 1]], v, a, s, meta)
        r = j.base + t
        if eid not in owned_ids and j.find(eid) < 0:
            owner_add(j.slots, t, np.uint64(hash_bytes(j.earena, j.eoffs[t], j.eoffs[t + 1])))
            j.owned += 1
            owned_ids[eid] = r
        rows.append((p, eid, v, a, s, meta))


def check(j: Journal, rows: list, owned_ids: dict) -> None:
    assert len(j) == len(rows)
    for r, (p, eid, v, a, s, meta) in enumerate(rows):
        got = j.record(r)
        assert (got[0], got[3], got[4], got[5]) == (p, v, a, s)
        assert j.event_id(r) == eid
        assert j.meta_bytes(r) == meta
    for p in range(12):
        assert j.rows_of(p) == [r for r, row in enumerate(rows) if row[0] == p]
    for eid, r in owned_ids.items():
        assert j.find(eid) == r
    assert j.find("never-seen") == -1
    assert j.n <= max(j.tail_rows, 50)  # memory: the tail stays bounded
    check_columns(j)
    j._check()


def check_columns(j: Journal) -> None:
    """Journal.columns over windows inside the store, across its edge with
    the tail, inside the tail and past the end: the rows one by one."""
    n = len(j)
    kept, j.invalid = j.invalid, set(range(0, n, 3)) | j.invalid
    try:
        for a, b in [(0, n), (0, 1), (n // 3, 2 * n // 3 + 1), (max(0, j.base - 2), j.base + 2), (j.base, n),
                     (n - 1, n + 5), (n, n), (-3, 2)]:
            cols = j.columns(a, b)
            rs = range(max(0, a), min(n, b))
            assert cols.n == len(rs) and len(cols.eoffs) == len(cols.moffs) == len(rs) + 1
            for k, r in enumerate(rs):
                got = (cols.pid[k], cols.kind[k], cols.out[k], cols.val[k], cols.ach[k], cols.sub[k])
                assert tuple(int(x) for x in got) == j.record(r)[:6]
                assert cols.earena[cols.eoffs[k]:cols.eoffs[k + 1]].tobytes() == j.id_bytes(r)
                assert cols.marena[cols.moffs[k]:cols.moffs[k + 1]].tobytes() == j.meta_bytes(r)
                assert bool(cols.invalid[k]) == (r in j.invalid)
            back = JournalColumns.from_wire(cols.to_wire())
            assert all(np.array_equal(x, y) for x, y in zip(back, cols))
    finally:
        j.invalid = kept


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("tail", [1, 3, 16, 10**6])
def test_rows_by_player_and_by_id_equal_what_was_appended(tmp_path, kind, tail):
    rnd = random.Random(tail)
    j = make(kind, tmp_path, tail)
    rows: list = []
    owned: dict = {}
    for _ in range(40):
        append_batch(j, rows, rnd, rnd.randrange(1, 9), owned)
    check(j, rows, owned)
    if tail < 10**6:
        assert j.base > 0 and j.runs  # the store really holds rows
        assert len(j.runs) <= 2 + int(np.log2(max(2, len(owned))))  # runs merge by size


@pytest.mark.parametrize("tail", [2, 5])
def test_a_snapshot_reopens_after_more_writes_and_merged_runs(tmp_path, tail):
    rnd = random.Random(7)
    j = Journal(FileStore(tmp_path / "j"), tail)
    rows: list = []
    owned: dict = {}
    for _ in range(15):
        append_batch(j, rows, rnd, rnd.randrange(1, 6), owned)
    state = msgpack.unpackb(msgpack.packb(j.to_state()))
    at, owned_at = list(rows), dict(owned)
    for _ in range(25):  # the files grow past the snapshot, runs merge away
        append_batch(j, rows, rnd, rnd.randrange(1, 6), owned)
    again = Journal.from_state(state, FilePlace(tmp_path / "j"), tail)
    check(again, at, owned_at)
    more_rows, more_owned = list(at), dict(owned_at)
    append_batch(again, more_rows, random.Random(1), 9, more_owned)  # and it goes on from there
    check(again, more_rows, more_owned)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_snapshot_from_before_metadata_reopens_with_none_for_its_rows(tmp_path, kind):
    """A format-2 journal (no metadata files or columns): its rows read back
    with no metadata; rows written after it keep theirs (``meta_from``)."""
    rnd = random.Random(11)
    j = make(kind, tmp_path, 3)
    rows: list = []
    owned: dict = {}
    for _ in range(6):
        append_batch(j, rows, rnd, 4, owned)
    state = msgpack.unpackb(msgpack.packb(j.to_state()))
    state["format"] = 2
    for key in ("moffs", "marena", "meta_from"):
        state.pop(key)
    for key in ("meta", "moffs", "meta_size", "moffs_size"):
        state["store"].pop(key, None)
    again = Journal.from_state(state, FilePlace(tmp_path / "j"), 3)
    assert again.meta_from == state["base"] > 0
    old = [(p, eid, v, a, s, b"") for p, eid, v, a, s, _ in rows]
    check(again, old, owned)
    for _ in range(6):
        append_batch(again, old, rnd, 4, owned)
    check(again, old, owned)
    assert any(m for *_, m in old[state["base"]:])


def test_lost_files_raise_journal_lost(tmp_path):
    j = Journal(FileStore(tmp_path / "j"), 2)
    rnd = random.Random(3)
    append_batch(j, [], rnd, 9, {})
    append_batch(j, [], rnd, 9, {})
    state = j.to_state()
    shutil.copytree(tmp_path / "j", tmp_path / "copy")
    (tmp_path / "j" / "rows").write_bytes(b"")
    with pytest.raises(JournalLost):
        Journal.from_state(state, FilePlace(tmp_path / "j"), 2)
    shutil.rmtree(tmp_path / "j")
    with pytest.raises(JournalLost):
        Journal.from_state(state, FilePlace(tmp_path / "j"), 2)
    FileStore(tmp_path / "other")  # a fresh journal elsewhere is another incarnation
    with pytest.raises(JournalLost):
        Journal.from_state(state, FilePlace(tmp_path / "other"), 2)
    Journal.from_state(state, FilePlace(tmp_path / "copy"), 2)  # the files themselves are all it needs


def test_memory_in_use_does_not_grow_with_events(tmp_path):
    j = Journal(FileStore(tmp_path / "j"), 64)
    rnd = random.Random(9)
    sizes = []
    for round_ in range(6):
        for _ in range(60):
            append_batch(j, [], rnd, 8, {})
        sizes.append(j.nbytes())
    assert max(sizes) <= 2 * min(sizes), sizes  # 2,880 events per round, a bounded tail


@settings(deadline=None)  # the first call compiles the kernel
@given(st.lists(st.integers(0, 300), max_size=700), st.lists(st.integers(0, 301), max_size=40))
def test_probe_run_finds_the_first_position_of_each_hash(values, queries):
    hashes = np.array(sorted(values), np.uint64)
    run = Run(0, hashes, np.arange(len(hashes), dtype=np.int64))  # its fence, as every run builds it
    got = probe_run(run.hashes, run.fence, np.array(queries, np.uint64))
    for q, pos in zip(queries, got.tolist()):
        first = int(np.searchsorted(hashes, q))
        assert pos == (first if first < len(hashes) and hashes[first] == q else -1)


@settings(deadline=None)  # the first call compiles the kernel
@given(st.lists(st.integers(0, 50), max_size=300), st.lists(st.integers(0, 50), max_size=300),
       st.sampled_from([64, 128, 1 << 18]))
def test_a_merge_in_blocks_equals_a_stable_sort_of_both_runs(a_vals, b_vals, block):
    """merged_blocks against the merge it replaced (concatenate, stable argsort):
    same hashes, same rows for equal hashes (the older run's first), any block size."""
    a = Run(0, np.array(sorted(a_vals), np.uint64), np.arange(len(a_vals), dtype=np.int64))
    b = Run(1, np.array(sorted(b_vals), np.uint64), 1000 + np.arange(len(b_vals), dtype=np.int64))
    h = np.concatenate([a.hashes, b.hashes])
    r = np.concatenate([a.rows, b.rows])
    order = np.argsort(h, kind="stable")
    blocks = [(x.copy(), y.copy()) for x, y in merged_blocks(a, b, block)]
    assert all(len(x) <= block for x, _ in blocks)
    got_h = np.concatenate([x for x, _ in blocks]) if blocks else np.zeros(0, np.uint64)
    got_r = np.concatenate([y for _, y in blocks]) if blocks else np.zeros(0, np.int64)
    assert got_h.tolist() == h[order].tolist() and got_r.tolist() == r[order].tolist()


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_run_written_in_blocks_is_the_run_written_at_once(tmp_path, kind):
    store = MemoryStore() if kind == "memory" else FileStore(tmp_path / "j")
    rnd = np.random.default_rng(3)
    hashes = np.sort(rnd.integers(0, 2**63, 1000).astype(np.uint64))
    rows = rnd.integers(0, 10**6, 1000)
    whole = store.write_run(0, hashes, rows)
    parts = store.write_run_blocks(1, 1000, [(hashes[k:k + 128], rows[k:k + 128]) for k in range(0, 1000, 128)])
    for run in (whole, parts):
        assert run.hashes.tolist() == hashes.tolist() and run.rows.tolist() == rows.tolist()
        assert run.fence.tolist() == hashes[::FENCE].tolist()
    again = store.load_run(1, 1000)  # as a snapshot reopens it
    assert again.hashes.tolist() == hashes.tolist() and again.fence.tolist() == parts.fence.tolist()
    with pytest.raises(ValueError):
        store.write_run_blocks(2, 1001, [(hashes, rows)])


def mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
                inside = len(head) >= 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.parametrize("dropping", [True, False])
def test_lookups_leave_no_page_of_the_runs_mapped(tmp_path, monkeypatch, dropping):
    """A lookup maps a page of each run, and the kernel maps the whole folio
    around it; after each batch's lookups the journal drops them, so the
    process holds nothing of its runs between batches (with the drop switched
    off, the same lookups leave most of the run mapped)."""
    if not dropping:
        monkeypatch.setattr(Run, "drop_pages", lambda self: None)
    store = FileStore(tmp_path / "j")
    j = Journal(store, 64)
    n = 1 << 20  # one run of 16 MiB: 8 MiB of hashes
    hashes = np.sort(np.random.default_rng(5).integers(0, 2**63, n).astype(np.uint64))
    rows = np.arange(n, dtype=np.int64)
    j.runs = [store.write_run(0, hashes, rows)]
    path = (tmp_path / "j" / "run-00000000").resolve()
    ids = [f"q{k}" for k in range(4000)]
    buf, offs = encode_ids(ids)
    for k in range(0, len(ids), 10):
        assert (j.find_stored(buf, offs, np.arange(k, k + 10)) == -1).all()
    held = mapped_kib(path)
    if dropping:
        assert held == 0, held
        assert j.runs[0].hashes.tolist() == hashes.tolist()  # the run reads back whole after a drop
    else:
        assert held > 4096, held  # most of the 8 MiB of hashes


def test_check_finds_a_broken_chain_a_lost_owner_and_an_unsorted_run(tmp_path):
    j = make("memory", tmp_path, 4)
    rnd, rows, owned = random.Random(7), [], {}
    for _ in range(12):
        append_batch(j, rows, rnd, rnd.randrange(1, 6), owned)
    j._check()
    assert j.runs and j.n
    head = int(j.heads[0])
    j.heads[0] = -1
    with pytest.raises(AssertionError):
        j._check()
    j.heads[0] = head
    j.owned += 1
    with pytest.raises(AssertionError):
        j._check()
    j.owned -= 1
    run = j.runs[0]
    assert len(run) > 1
    run.hashes = run.hashes[::-1].copy()  # a run out of hash order
    with pytest.raises(AssertionError):
        j._check()
