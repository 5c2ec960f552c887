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
        assert everything(ob) == expected
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
    os.close(ob._fd)  # the process is gone: no close(), no truncate
    os.close(ob._state_fd)
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
    assert hook.counts == {"create": 1, "write": 1, "fsync": 1, "state.write": 2, "state.fsync": 2}


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
