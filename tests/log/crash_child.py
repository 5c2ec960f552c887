"""Child process for tests/log/test_crash.py (run as a script, then SIGKILLed).

Usage: crash_child.py log DIR BLOCK_AT_FSYNC|0 THREADS
       crash_child.py pglog URL PREFIX BLOCK_AT_COMMIT|0 THREADS
       crash_child.py snap DIR POINT

``log``: THREADS threads append batches of unique records forever; after
each ``append_batch`` returns, the thread prints ``ACK <first> <id>...``.
If BLOCK_AT_FSYNC > 0, the writer blocks before that fsync (data already
written, not yet fsync'd) after printing ``BLOCKED``.

``pglog``: the same appends into ``engine.log.pg_log.PostgresLog`` at URL
(tables PREFIX_*), two transactions in flight; BLOCK_AT_COMMIT > 0 blocks
that group before its COMMIT (its rows sent, the head row updated and
locked) after printing ``BLOCKED``.

``snap``: saves snapshot offset 10 ("old"), prints ``SAVED 10``, then saves
offset 20 ("new") blocking at hook POINT after printing ``BLOCKED``.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from engine.log import FileSnapshotStore, SegmentedFileLog  # noqa: E402

out_lock = threading.Lock()


def say(line: str) -> None:
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def blocking_hook(block_at: int):
    """A fault hook that blocks forever at the ``block_at``-th "fsync" (the file log's fsync, the
    PostgreSQL log's COMMIT), after printing BLOCKED."""
    fsyncs = [0]
    lock = threading.Lock()

    def hook(op, path):
        if op == "fsync":
            with lock:
                fsyncs[0] += 1
                n = fsyncs[0]
            if n == block_at:
                say("BLOCKED")
                time.sleep(3600)

    return hook


def run_log(directory: str, block_at: int, threads: int) -> None:
    append_forever(SegmentedFileLog.open(directory, segment_bytes=4096, fault_hook=blocking_hook(block_at)), threads)


def run_pglog(url: str, prefix: str, block_at: int, threads: int) -> None:
    from engine.log.pg_log import PostgresLog

    append_forever(PostgresLog.open(url, prefix=prefix, segment_bytes=4096, fault_hook=blocking_hook(block_at)),
                   threads)


def append_forever(log, threads: int) -> None:
    def appender(t):
        b = 0
        while True:
            ids = [f"t{t}-b{b}-r{i}" for i in range(1 + (b % 5))]
            offsets = log.append_batch([["s", "board", ident, "p", b, 0, 0, 0] for ident in ids])
            say("ACK " + str(offsets[0]) + " " + " ".join(ids))
            b += 1

    for t in range(threads):
        threading.Thread(target=appender, args=(t,), daemon=True).start()
    time.sleep(3600)


def run_snap(directory: str, point: str) -> None:
    def hook(op, path):
        if op == point and armed[0]:
            say("BLOCKED")
            time.sleep(3600)

    armed = [False]
    store = FileSnapshotStore(directory, fault_hook=hook)
    store.save("shard-1", 10, {"state": "old", "rows": list(range(1000))})
    say("SAVED 10")
    armed[0] = True
    store.save("shard-1", 20, {"state": "new", "rows": list(range(2000))})
    say("SAVED 20")
    time.sleep(3600)


if __name__ == "__main__":
    if sys.argv[1] == "log":
        run_log(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "pglog":
        run_pglog(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        run_snap(sys.argv[2], sys.argv[3])
