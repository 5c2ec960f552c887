"""The log actor (``LogServer``) and the msgpack helpers of every actor call.

A module of its own, importing only the log layer: Ray imports an actor class's
module in the actor's process, and the log server runs no kernel, so its process
does not import numba or the engine's core (issue 29 item 1: about 1 CPU-second
less in a start, on the 2 cores the shard actors and the gateway share then).
The shard actor and the log server's client side: :mod:`engine.cluster.actors`.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import msgpack
import ray

from engine.core import gc_tuning
from engine.core.formats import LOG_FORMAT
from engine.log import SegmentedFileLog
from engine.log.dead_letters import DeadLetterScan
from engine.log.places import open_reader, open_snapshots

REPLAY_CHUNK = 20_000
#: ``rewrite`` runs in its own thread ("maintenance" group), so appends and reads
#: go on during an erasure's rewrite. Appends run in threads of their own ("append"
#: group): the sequencer keeps two in flight, and the log's writer commits the ones
#: that wait together (one fsync); each names its offset (``at``), so the log keeps
#: them in order although a threaded group may start them out of order (RAY_NOTES).
#: Reads and snapshots stay one at a time in the default group.
LOG_SERVER_OPTIONS = dict(num_cpus=0, max_restarts=0, enable_task_events=False,
                          concurrency_groups={"maintenance": 1, "append": 4})


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class LogServer:
    """The log actor. ``follow``: the engine writes the log in its own process
    (``SegmentedFileLog.open(..., mark=True)``, issue 29 item 4) and this actor
    follows it (:class:`engine.log.follower.LogFollower`) for the shard actors'
    recovery reads and dead letters, and keeps the snapshots; else it is the
    log's writer too (``append``, ``rewrite``, ``erase_log``, retention)."""

    def __init__(self, data_dir: str, dead_letter_head: bytes, segment_bytes: int = 64 * 2**20, follow: bool = False,
                 log_url: str | None = None):
        gc_tuning.fix_mmap_threshold()  # freed frame buffers leave the process (engine/core/gc_tuning.py)
        root = Path(data_dir)
        root.mkdir(parents=True, exist_ok=True)
        # follow: the files the engine's process writes, or the database of --log (engine.log.places)
        self.log = (open_reader(root, log_url) if follow else
                    SegmentedFileLog.open(root / "log", segment_bytes=segment_bytes, record_format=LOG_FORMAT))
        self.store = open_snapshots(root, log_url)
        self.dead_letter_head = dead_letter_head  # engine.core.records.DEAD_LETTER_HEAD, from the engine
        self.dead = DeadLetterScan(self.log, self.dead_letter_head)
        self._follows = follow
        self._dead_generation = self.log.generation if follow else None

    @ray.method(concurrency_group="append")
    def append(self, payloads: list[bytes], at: int | None = None) -> int:
        """Durably append records packed once by the sequencer (fsync'd on
        return, framed as they are) at offset ``at`` (engine.log.port); the first record's offset."""
        return self.log.append_payloads(payloads, at)[0]

    def read_chunk(self, offset: int, max_records: int = REPLAY_CHUNK) -> bytes:
        out = []
        for item in self.log.read_from(offset, chunk_records=max_records):
            out.append(item)
            if len(out) >= max_records:
                break
        return pack(out)

    def end_offset(self) -> int:
        return self.log.end_offset()

    def dead_letters(self, offset: int) -> bytes:
        """The dead-letter records from ``offset`` on (engine.log.dead_letters.DeadLetterScan), scanned
        here, next to the log: once, then only what was appended since a shard last asked (from the
        start again after the writer rewrote the log: its records may have changed)."""
        if self._follows:
            self.log.refresh()
            if self.log.generation != self._dead_generation:
                self.dead, self._dead_generation = DeadLetterScan(self.log, self.dead_letter_head), self.log.generation
        return pack(self.dead.since(offset))

    def save_snapshot(self, name: str, offset: int, payload: bytes) -> str:
        return self.store.save(name, offset, payload)

    def load_snapshot(self, name: str):
        got = self.store.load_latest(name)
        return None if got is None else [got[0], got[1]]

    def delete_segments_before(self, offset: int) -> list:
        return self.log.delete_segments_before(offset)

    @ray.method(concurrency_group="maintenance")
    def rewrite(self, before: int, fn_pickled: bytes) -> list:
        """``SegmentedFileLog.rewrite`` with ``fn`` pickled by the caller
        (``ray.cloudpickle.dumps``); the stats as a list. The dead-letter scan
        starts again: its records may have changed."""
        stats = self.log.rewrite(before, pickle.loads(fn_pickled))
        self.dead = DeadLetterScan(self.log, self.dead_letter_head)
        return list(stats)

    @ray.method(concurrency_group="maintenance")
    def erase_log(self, plain: bytes) -> list:
        """An erasure's log rewrite (engine.runtime.erasure.erase_log) here, next to the log: ``plain``
        packs the [offset, X record] pairs."""
        from engine.core import records as R  # noqa: PLC0415 - an erasure only: not on every start
        from engine.runtime.erasure import erase_log  # noqa: PLC0415

        stats = erase_log(self.log, [(o, R.ErasureRecord._make(r)) for o, r in unpack(plain)])
        self.dead = DeadLetterScan(self.log, self.dead_letter_head)
        return list(stats)

    def delete_snapshots_through(self, offset: int) -> list:
        return self.store.delete_through(offset)

    def stats(self) -> dict:
        return self.log.stats() | {"end_offset": self.log.end_offset()}

    def close(self) -> None:
        self.log.close()


RemoteLogServer = ray.remote(**LOG_SERVER_OPTIONS)(LogServer)
