"""engine.log.outbox: puts idempotent per log offset, reads in seq order, durable
delivery state, a torn tail cut at every byte of the last put, faults at each step."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import LogCorruption, StorageUnavailable
from engine.core.webhooks import DELIVERED, FAILED, PENDING, Message, state_message
from engine.log.outbox import INDEX_EVERY, MESSAGES_FILE, STATE_DTYPE, STATE_FILE, Outbox
from tests.log.conftest import FsyncCounter


def msgs(tag: str, n: int, created_ms: int = 1_000) -> list[Message]:
    return [Message(f"state/{tag}/{i}", f'{{"m":"{tag}-{i}"}}'.encode(), created_ms + i) for i in range(n)]


def everything(ob: Outbox) -> list[Message]:
    return [m for _, m in ob.read(0, ob.count)]


def test_puts_get_dense_seqs_and_are_idempotent_per_log_offset(outbox):
    assert outbox.covered_offset == -1 and outbox.count == 0
    assert outbox.put(3, msgs("a", 2)) == 0
    assert outbox.put(8, msgs("b", 3)) == 2
    assert (outbox.covered_offset, outbox.count) == (8, 5)
    assert outbox.put(3, msgs("a", 2)) == 0 and outbox.put(8, msgs("b", 3)) == 2  # a replay after a crash
    assert outbox.count == 5
    assert outbox.first_seq(8) == 2 and outbox.first_seq(5) is None and outbox.first_seq(99) is None
    assert outbox.put(9, []) == 5 and outbox.covered_offset == 8  # nothing to keep: nothing written
    assert outbox.put(4, []) == 5  # a covered record without messages
    with pytest.raises(ValueError, match="had no put"):
        outbox.put(5, msgs("lost", 1))
    with pytest.raises(TypeError):
        outbox.put(10, [Message("state/x/y", "not bytes", 1)])  # type: ignore[arg-type]
    assert everything(outbox) == msgs("a", 2) + msgs("b", 3)
    outbox.check()


def test_reads_come_back_in_seq_order_in_chunks(outbox):
    expected = []
    for off in range(40):
        batch = msgs(f"p{off}", off % 7 + 1)
        assert outbox.put(off, batch) == len(expected)
        expected += batch
    for start in (0, 1, INDEX_EVERY - 1, INDEX_EVERY, INDEX_EVERY + 5, len(expected) - 1):
        for n in (1, 3, 100):
            got = outbox.read(start, n)
            assert got == list(enumerate(expected))[start:start + n]
    assert outbox.read(len(expected), 10) == [] and outbox.read(0, 0) == []
    assert outbox.message(17) == expected[17]
    with pytest.raises(IndexError):
        outbox.message(len(expected))


def test_large_bodies_read_across_blocks(outbox):
    big = [Message(f"award/b/{i}", bytes([65 + i]) * (700_000 + i), i) for i in range(4)]
    outbox.put(0, big)
    assert everything(outbox) == big
    assert outbox.read(2, 5) == [(2, big[2]), (3, big[3])]


def test_delivery_state_is_durable_and_counted(tmp_path):
    path = str(tmp_path / "ob")
    with Outbox.open(path) as ob:
        ob.put(0, msgs("a", 200))
        ob.set_status([5, 6, 7], [DELIVERED, FAILED, PENDING], [1, 9, 2])
        ob.set_status(np.array([6, 100, 6]), DELIVERED, np.array([3, 1, 4]))  # the last of a seq wins
        st_, at = ob.status([0, 5, 6, 7, 100])
        assert st_.tolist() == [PENDING, DELIVERED, DELIVERED, PENDING, DELIVERED]
        assert at.tolist() == [0, 1, 4, 2, 1] and st_.dtype == np.uint8 and at.dtype == np.uint32
        assert ob.counts() == {"pending": 197, "delivered": 3, "failed": 0, "attempts": 8}
        ob.check()
    with Outbox.open(path) as ob:
        assert ob.status([0, 5, 6, 7, 100])[0].tolist() == [PENDING, DELIVERED, DELIVERED, PENDING, DELIVERED]
        assert ob.counts() == {"pending": 197, "delivered": 3, "failed": 0, "attempts": 8}
        assert os.path.getsize(os.path.join(path, STATE_FILE)) == 101 * STATE_DTYPE.itemsize  # only what was written
        with pytest.raises(IndexError):
            ob.status([200])
        with pytest.raises(IndexError):
            ob.set_status([200], DELIVERED, 1)
        with pytest.raises(ValueError):
            ob.set_status([1], 3, 1)
        ob.check()


def test_oldest_pending_moves_forward_past_finished_messages(outbox):
    assert outbox.oldest_pending() is None
    outbox.put(0, msgs("a", 10))
    assert outbox.oldest_pending() == (0, msgs("a", 10)[0])
    outbox.set_status([0, 1, 3], [DELIVERED, FAILED, DELIVERED], 1)
    assert outbox.oldest_pending_seq() == 2
    outbox.set_status(range(2, 10), DELIVERED, 1)
    assert outbox.oldest_pending() is None
    outbox.put(1, msgs("b", 2))
    assert outbox.oldest_pending()[0] == 10
    outbox.check()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=30), st.data())
def test_property_reopen_keeps_every_put_and_every_result(tmp_path_factory, sizes, data):
    path = str(tmp_path_factory.mktemp("ob"))
    expected: list[Message] = []
    state: dict[int, tuple[int, int]] = {}
    with Outbox.open(path) as ob:
        for off, n in enumerate(sizes):
            ob.put(off * 2, msgs(f"o{off}", n))
            expected += msgs(f"o{off}", n)
            if expected and data.draw(st.booleans()):
                seqs = data.draw(st.lists(st.integers(0, len(expected) - 1), max_size=8))
                codes = data.draw(st.lists(st.sampled_from([PENDING, DELIVERED, FAILED]), min_size=len(seqs),
                                           max_size=len(seqs)))
                ob.set_status(seqs, codes, [7] * len(seqs))
                state.update({s: (c, 7) for s, c in zip(seqs, codes)})
    with Outbox.open(path) as ob:
        ob.check()
        got = ob.read(0, ob.count)  # the messages of retired segments (all final) are gone, the rest kept
        assert got == [(s, expected[s]) for s, _ in got]
        st_, _ = ob.status(np.arange(len(expected)))
        assert {s for s, _ in got} >= {s for s in range(len(expected)) if st_[s] == PENDING}
        assert ob.covered_offset == max([2 * off for off, n in enumerate(sizes) if n], default=-1)
        st_, at = ob.status(np.arange(len(expected)))
        assert {s: (int(st_[s]), int(at[s])) for s in range(len(expected)) if st_[s] or at[s]} == \
            {s: v for s, v in state.items() if v != (PENDING, 0)}


# ---------------------------------------------------------------- crash safety


def _torn_fixture(tmp_path) -> tuple[str, int, int, bytes]:
    """An outbox with two finished puts (results recorded) and a third put;
    returns (dir, size before the third put, size after it, the file)."""
    path = str(tmp_path / "ob")
    with Outbox.open(path) as ob:
        ob.put(1, msgs("a", 3))
        ob.put(2, msgs("b", 2))
        ob.set_status([0, 4], [DELIVERED, FAILED], [1, 3])
        before = os.path.getsize(os.path.join(path, MESSAGES_FILE))
        ob.put(5, msgs("c", 3))
    data = open(os.path.join(path, MESSAGES_FILE), "rb").read()
    return path, before, len(data), data


def test_a_torn_last_put_is_cut_at_every_byte_boundary(tmp_path, caplog):
    path, before, after, data = _torn_fixture(tmp_path)
    for cut in range(before, after + 1):
        with open(os.path.join(path, MESSAGES_FILE), "wb") as f:
            f.write(data[:cut])
        with Outbox.open(path) as ob:
            ob.check()
            whole = cut == after
            assert ob.count == (8 if whole else 5), cut
            assert ob.covered_offset == (5 if whole else 2)
            assert everything(ob) == msgs("a", 3) + msgs("b", 2) + (msgs("c", 3) if whole else [])
            assert ob.status([0, 4])[0].tolist() == [DELIVERED, FAILED]
            assert os.path.getsize(os.path.join(path, MESSAGES_FILE)) == (after if whole else before)
            assert ob.put(5, msgs("c", 3)) == 5  # the caller puts the record again: same seqs
        assert (cut in (before, after)) or "unfinished put" in caplog.text


def test_a_torn_header_is_rewritten(tmp_path):
    path = str(tmp_path / "ob")
    os.makedirs(path)
    with open(os.path.join(path, MESSAGES_FILE), "wb") as f:
        f.write(b"FRWH")
    with Outbox.open(path) as ob:
        assert ob.put(0, msgs("a", 1)) == 0
    with open(os.path.join(path, MESSAGES_FILE), "r+b") as f:
        f.write(b"XXXX")
    with pytest.raises(LogCorruption, match="bad header at byte offset 0"):
        Outbox.open(path)


def test_a_hole_inside_the_last_put_is_still_a_torn_put(tmp_path):
    """Pages written back out of order: the middle of the unfinished put is zeros, its end is whole."""
    path, before, after, data = _torn_fixture(tmp_path)
    holed = data[:before + 5] + b"\0" * 20 + data[before + 25:]
    with open(os.path.join(path, MESSAGES_FILE), "wb") as f:
        f.write(holed)
    with Outbox.open(path) as ob:
        assert ob.count == 5 and ob.covered_offset == 2


def test_damage_before_the_last_put_is_corruption_not_a_torn_tail(tmp_path):
    path, before, after, data = _torn_fixture(tmp_path)
    damaged = bytearray(data)
    damaged[20] ^= 0xFF  # inside the first put's first message
    with open(os.path.join(path, MESSAGES_FILE), "wb") as f:
        f.write(bytes(damaged))
    with pytest.raises(LogCorruption, match="followed by a valid frame of another put"):
        Outbox.open(path)


def test_state_records_past_the_messages_or_unknown_read_safely(tmp_path):
    path = str(tmp_path / "ob")
    with Outbox.open(path) as ob:
        ob.put(0, msgs("a", 4))
        ob.set_status([1], DELIVERED, 1)
    with open(os.path.join(path, STATE_FILE), "r+b") as f:
        f.seek(2 * STATE_DTYPE.itemsize)
        f.write(bytes([9, 0, 0, 0, 1, 0, 0, 0]))  # an unknown status: read as pending (a redelivery)
        f.seek(10 * STATE_DTYPE.itemsize)
        f.write(bytes([1, 0, 0, 0, 1, 0, 0, 0]))  # past the messages: cut
    with Outbox.open(path) as ob:
        assert ob.status([0, 1, 2, 3])[0].tolist() == [PENDING, DELIVERED, PENDING, PENDING]
        assert os.path.getsize(os.path.join(path, STATE_FILE)) == 4 * STATE_DTYPE.itemsize
        ob.check()


def abandon(ob: Outbox) -> None:
    """Close an outbox's files the way a killed process does: nothing written, nothing cleaned up."""
    for seg in ob._segments:
        os.close(seg.fd)
        os.close(seg.state_fd)
    os.close(ob._done_fd)
    ob._closed = True


class Killed(BaseException):
    """The process dies here (not an OSError: nothing is cleaned up)."""


@pytest.mark.parametrize("step", ["write", "fsync"])
def test_death_at_each_step_of_a_put_leaves_it_whole_or_absent(tmp_path, step):
    path = str(tmp_path / "ob")
    armed = [False]

    def hook(op, _path):
        if armed[0] and op == step:
            raise Killed()

    ob = Outbox.open(path, fault_hook=hook)
    ob.put(0, msgs("a", 2))
    armed[0] = True
    with pytest.raises(Killed):
        ob.put(1, msgs("b", 70))
    abandon(ob)  # the process is gone: no close(), no truncate
    with Outbox.open(path) as again:
        again.check()
        assert again.count in (2, 72)
        assert everything(again)[:2] == msgs("a", 2)
        assert again.put(1, msgs("b", 70)) == 2 and again.count == 72
        assert everything(again) == msgs("a", 2) + msgs("b", 70)


@pytest.mark.parametrize("op", ["write", "fsync"])
def test_a_failed_put_keeps_nothing_and_the_next_one_succeeds(tmp_path, op):
    hook = FsyncCounter()
    with Outbox.open(str(tmp_path / "ob"), fault_hook=hook) as ob:
        ob.put(0, msgs("a", 2))
        hook.fail[op] = OSError(28, "No space left on device")
        with pytest.raises(StorageUnavailable):
            ob.put(1, msgs("b", 2))
        assert ob.count == 2 and ob.covered_offset == 0
        hook.fail.clear()
        assert ob.put(1, msgs("b", 2)) == 2
        assert everything(ob) == msgs("a", 2) + msgs("b", 2)
        ob.check()
    with Outbox.open(str(tmp_path / "ob")) as ob:
        assert everything(ob) == msgs("a", 2) + msgs("b", 2)


@pytest.mark.parametrize("op", ["state.write", "state.fsync"])
def test_a_failed_result_write_changes_nothing_visible(tmp_path, op):
    hook = FsyncCounter()
    with Outbox.open(str(tmp_path / "ob"), fault_hook=hook) as ob:
        ob.put(0, msgs("a", 3))
        ob.set_status([0], DELIVERED, 1)
        hook.fail[op] = OSError(5, "I/O error")
        with pytest.raises(StorageUnavailable):
            ob.set_status([1, 2], DELIVERED, 1)
        assert ob.status([0, 1, 2])[0].tolist() == [DELIVERED, PENDING, PENDING]
        assert ob.counts()["delivered"] == 1
        hook.fail.clear()
        ob.set_status([1], DELIVERED, 2)
    with Outbox.open(str(tmp_path / "ob")) as ob:
        assert ob.status([0, 1, 2])[0].tolist() == [DELIVERED, DELIVERED, PENDING]


def test_one_fsync_per_put_and_per_batch_of_results(tmp_path):
    hook = FsyncCounter()
    with Outbox.open(str(tmp_path / "ob"), fault_hook=hook) as ob:
        ob.put(0, msgs("a", 500))
        ob.set_status(np.arange(0, 500, 2), DELIVERED, 1)
        ob.set_status(np.arange(1, 500, 2), FAILED, 1)
    # the segment is then all final: retired (one done frame, one fsync, the files unlinked)
    assert hook.counts == {"create": 1, "write": 1, "fsync": 1, "dirsync": 1, "state.write": 2, "state.fsync": 2,
                           "done.write": 1, "done.fsync": 1, "unlink": 1}


def test_state_is_seq_indexed_and_needs_no_write_for_new_messages(tmp_path):
    hook = FsyncCounter()
    with Outbox.open(str(tmp_path / "ob"), fault_hook=hook) as ob:
        for off in range(10):
            ob.put(off, state_message_batch(off))
        assert ob.counts()["pending"] == 20
    assert "state.write" not in hook.counts


def state_message_batch(off: int) -> list[Message]:
    return [state_message(f"b{off}", s, off, created_ms=off) for s in ("FROZEN", "FINALIZED")]


def test_scrub_blanks_an_erased_players_award_messages_in_place(tmp_path):
    """An erasure (docs/api.md §17): the player's award messages keep their place and length, hold neither
    their id nor their body any more, a pending one is failed (never sent); the rest are untouched."""
    from engine.core.webhooks import award_message

    board = "g:m:s:x"
    msgs = [award_message(board, p, k + 1, None, {"coins": k}, 3, 1000 + k)
            for k, p in enumerate(["p-a", "p/slash-Zz9", "p-b", "p-c"])]
    with Outbox.open(str(tmp_path)) as box:
        box.put(10, msgs[:2])
        box.put(11, [state_message(board, "FINALIZED", 3, 999)])
        box.put(12, msgs[2:])
        box.set_status([0], DELIVERED, 1)
        assert box.scrub(["p/slash-Zz9", "p-a", "nobody"]) == 2
        assert box.scrub(["p/slash-Zz9", "p-a"]) == 0  # idempotent: blanked ids no longer match
        statuses, _ = box.status([0, 1, 2, 3, 4])
        assert statuses.tolist() == [DELIVERED, FAILED, PENDING, PENDING, PENDING]
        kept = box.read(0, 10)
    raw = (tmp_path / MESSAGES_FILE).read_bytes()
    assert b"p/slash-Zz9" not in raw and b"p-a" not in raw and b"p-b" in raw
    with Outbox.open(str(tmp_path)) as box:  # every frame still verifies
        again = box.read(0, 10)
        assert again == kept and box.count == 5
    assert again[0][1].message_id == f"award/{board}/xxx" and again[0][1].body.strip() == b""
    assert again[3][1] == msgs[2]


# ---------------------------------------------------------------- retiring (an outbox that stays small)


def segment_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("messages."))


def test_finished_segments_leave_the_files_and_their_states_stay(tmp_path):
    path = str(tmp_path / "ob")
    with Outbox.open(path, segment_bytes=600) as ob:
        for off in range(12):  # 30 bytes a message: a new segment every 20 or so
            assert ob.put(off, msgs(f"r{off}", 5)) == 5 * off
        assert len(segment_files(path)) > 2
        ob.set_status(np.arange(0, 40), DELIVERED, 1)
        ob.set_status([40, 41], [FAILED, PENDING], [7, 3], due_ms=[0, 123_456])
        ob.check()
        assert ob.retired >= 1
        live_first = min(int(n.split(".")[1]) for n in segment_files(path))
        assert live_first > 0 and ob.read(0, 3)[0][0] == live_first  # reads skip what was retired
        with pytest.raises(IndexError):
            ob.message(0)
        assert ob.status([0, 39, 40, 41])[0].tolist() == [DELIVERED, DELIVERED, FAILED, PENDING]
        assert ob.first_seq(0) == 0 and ob.first_seq(7) == 35 and ob.covered_offset == 11
        ob.set_status([0], FAILED, 9)  # final already, its segment retired: left as it is
        assert ob.status([0])[0].tolist() == [DELIVERED]
    with Outbox.open(path, segment_bytes=600) as ob:
        ob.check()
        st_, at = ob.status(np.arange(60))
        assert st_[:40].tolist() == [DELIVERED] * 40 and at[:40].tolist() == [1] * 40
        assert (st_[40], at[40], st_[41], at[41]) == (FAILED, 7, PENDING, 3)
        assert ob.due([41, 42]).tolist() == [123_456, 0]  # the next attempt survives a restart
        assert ob.counts() == {"pending": 19, "delivered": 40, "failed": 1, "attempts": 40 + 7 + 3}
        assert ob.first_seq(3) == 15 and ob.covered_offset == 11 and ob.count == 60
        ob.set_status(np.arange(41, 60), DELIVERED, 1)
        assert segment_files(path) == [] and ob.sizes()["messages"] == 0
        assert ob.put(12, msgs("r12", 2)) == 60  # the next put starts a new segment at the next seq
        assert segment_files(path) == ["messages.00000000000000000060"]
    with Outbox.open(path) as ob:
        ob.check()
        assert ob.count == 62 and ob.covered_offset == 12 and ob.counts()["pending"] == 2
        assert [m for _, m in ob.read(0, 100)] == msgs("r12", 2)
        assert ob.status([5])[0].tolist() == [DELIVERED]


def test_outbox_bytes_stay_bounded_by_the_backlog_after_many_deliveries(tmp_path):
    """10,000 messages put and delivered with a lag of about 300: the message bytes never exceed the
    backlog's plus one segment, and the whole outbox ends at a small fraction of what was put."""
    path = str(tmp_path / "ob")
    seg_bytes = 8_000
    put_bytes = 0
    with Outbox.open(path, segment_bytes=seg_bytes) as ob:
        delivered = 0
        for off in range(500):
            batch = [Message(f"award/g:m:s:x/p{off}-{i}", b'{"type":"award","n":%d}' % (off * 20 + i) + b" " * 200,
                             off) for i in range(20)]
            ob.put(off, batch)
            put_bytes += sum(len(m.body) + len(m.message_id) for m in batch)
            upto = max(0, ob.count - 300)
            if upto > delivered:
                ob.set_status(np.arange(delivered, upto), DELIVERED, 1)
                delivered = upto
            backlog = ob.count - delivered
            sizes = ob.sizes()
            assert sizes["messages"] <= backlog * 300 + seg_bytes + 300, (off, sizes, backlog)
        ob.set_status(np.arange(delivered, ob.count), DELIVERED, 1)
        total = ob.outbox_bytes()
        ob.check()
    # what is left: the done file, one frame (about 80 bytes) per retired segment, none per message
    assert put_bytes > 2_000_000 and total < put_bytes / 100, total
    with Outbox.open(path) as ob:
        assert ob.counts() == {"pending": 0, "delivered": 10_000, "failed": 0, "attempts": 10_000}


class KilledAt(BaseException):
    pass


@pytest.mark.parametrize("step", ["done.write", "done.fsync", "unlink"])
def test_death_at_each_step_of_retiring_keeps_every_state_and_message(tmp_path, step):
    path = str(tmp_path / "ob")
    armed = [False]

    def hook(op, _path):
        if armed[0] and op == step:
            raise KilledAt()

    ob = Outbox.open(path, fault_hook=hook, segment_bytes=100)
    ob.put(0, msgs("a", 4))
    ob.put(1, msgs("b", 3))
    armed[0] = True
    with pytest.raises(KilledAt):
        ob.set_status(np.arange(4), [DELIVERED, FAILED, DELIVERED, DELIVERED], [1, 5, 2, 1])
    abandon(ob)
    with Outbox.open(path) as again:
        again.check()
        assert again.status(np.arange(7))[0].tolist() == [DELIVERED, FAILED, DELIVERED, DELIVERED] + [PENDING] * 3
        assert again.status(np.arange(4))[1].tolist() == [1, 5, 2, 1]
        assert [m for _, m in again.read(4, 10)] == msgs("b", 3)
        assert segment_files(path) == ["messages.00000000000000000004"]  # retired now, or at the crash
        assert again.first_seq(0) == 0 and again.first_seq(1) == 4


def test_a_torn_done_frame_is_cut_and_its_segment_stays(tmp_path, caplog):
    path = str(tmp_path / "ob")
    with Outbox.open(path, segment_bytes=100) as ob:
        ob.put(0, msgs("a", 4))
        ob.put(1, msgs("b", 3))
        done_before = ob.sizes()["done"]
        armed = [True]

        def hook(op, _path):
            if armed[0] and op == "unlink":
                raise KilledAt()

        ob._hook = hook
        with pytest.raises(KilledAt):
            ob.set_status(np.arange(4), DELIVERED, 1)
        abandon(ob)
    done = os.path.join(path, "done")
    with open(done, "r+b") as f:
        f.truncate(os.path.getsize(done) - 3)
    with Outbox.open(path) as again:  # the frame cut; the segment's own state file says all final: retired again
        assert "unfinished frame" in caplog.text and os.path.getsize(done) > done_before
        assert again.status(np.arange(7))[0].tolist() == [DELIVERED] * 4 + [PENDING] * 3
        assert [m for _, m in again.read(0, 10)] == msgs("b", 3)
        again.check()
        assert segment_files(path) == ["messages.00000000000000000004"]
    with Outbox.open(path) as again:
        assert again.status(np.arange(7))[0].tolist() == [DELIVERED] * 4 + [PENDING] * 3


def test_an_outbox_of_the_first_layout_is_moved_to_segments(tmp_path):
    from engine.log.outbox import LEGACY_STATE_DTYPE, MAGIC, encode_put

    path = tmp_path / "ob"
    path.mkdir()
    blob_a = encode_put(3, msgs("a", 3)).blob
    blob_b = encode_put(9, msgs("b", 2)).blob
    (path / "messages").write_bytes(MAGIC + blob_a + blob_b)
    old = np.zeros(4, LEGACY_STATE_DTYPE)
    old["status"] = [DELIVERED, FAILED, DELIVERED, PENDING]
    old["attempts"] = [1, 6, 2, 3]
    (path / "state").write_bytes(old.tobytes())
    with Outbox.open(str(path)) as ob:
        ob.check()
        assert not (path / "messages").exists() and not (path / "state").exists()
        assert ob.status(np.arange(5))[0].tolist() == [DELIVERED, FAILED, DELIVERED, PENDING, PENDING]
        assert ob.status(np.arange(5))[1].tolist() == [1, 6, 2, 3, 0]
        assert ob.first_seq(9) == 3 and ob.covered_offset == 9
        assert [m for _, m in ob.read(0, 10)] == msgs("a", 3) + msgs("b", 2)
        ob.set_status([3, 4], DELIVERED, 1)
        assert segment_files(str(path)) == []  # all final: retired
    with Outbox.open(str(path)) as ob:
        assert ob.counts() == {"pending": 0, "delivered": 4, "failed": 1, "attempts": 1 + 6 + 2 + 1 + 1}


def test_death_while_starting_a_segment_leaves_the_put_absent(tmp_path):
    path = str(tmp_path / "ob")
    armed = [False]

    def hook(op, _path):
        if armed[0] and op == "fsync":
            raise KilledAt()

    ob = Outbox.open(path, fault_hook=hook, segment_bytes=50)
    ob.put(0, msgs("a", 2))
    armed[0] = True
    with pytest.raises(KilledAt):
        ob.put(1, msgs("b", 2))  # a new segment: its file is there, the put never returned
    abandon(ob)
    with Outbox.open(path, segment_bytes=50) as again:
        again.check()
        assert again.count in (2, 4) and again.covered_offset in (0, 1)
        assert again.put(1, msgs("b", 2)) == 2
        assert [m for _, m in again.read(0, 10)] == msgs("a", 2) + msgs("b", 2)
