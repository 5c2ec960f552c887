"""Journal stores on disk: one directory per partition (docs/storage.md, "Journals").

The I/O half of :mod:`engine.core.journal`: ``rows``, ``ids``, ``meta`` and ``moffs`` are append-only
files (pwrite at the end, pread anywhere, rewritten in place only by a scrub:
:meth:`engine.core.journal.Journal.scrub` zeroes forgotten ids and metadata and
clears their rows' OWNED bits through a shared ``mmap``, then fsyncs); each
run is a file of sorted 64-bit hashes then their rows, read through an
``mmap`` (whose pages a journal drops after each batch's lookups:
:meth:`engine.core.journal.Run.drop_pages`); ``instance`` names this incarnation of the directory, so a
snapshot never reopens files another journal wrote.
"""

from __future__ import annotations

import functools
import mmap
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from engine.core.journal import FENCE, JournalLost, Run, gather_ranges, scatter_ranges, zero_ranges

__all__ = ["FileBlob", "FileStore", "FilePlace"]


#: At most this many ranges are edited with a pwrite each (an erasure's few events), more through a mapping.
FEW_RANGES = 64


class FileBlob:
    """An append-only byte file on disk (pwrite at the end, pread anywhere)."""

    def __init__(self, path: Path, size: int | None = None) -> None:
        """``size`` None: start empty; else keep the first ``size`` bytes
        (raises JournalLost when the file is shorter)."""
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        have = os.fstat(self.fd).st_size
        if size is not None and have < size:
            os.close(self.fd)
            raise JournalLost(f"{path} holds {have} bytes, the snapshot expects {size}")
        self.size = 0 if size is None else size
        if have != self.size:
            os.ftruncate(self.fd, self.size)

    def append(self, b: bytes) -> None:
        view = memoryview(b)
        while view:
            k = os.pwrite(self.fd, view, self.size)
            self.size += k
            view = view[k:]

    def read(self, off: int, n: int) -> bytes:
        return os.pread(self.fd, n, off)

    def gather(self, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Many ranges at once, one after another, read through a mapping of the file."""
        return self._mapped(lambda buf: gather_ranges(buf, _i64(starts), _i64(lens)))

    def scatter(self, starts: np.ndarray, lens: np.ndarray, src: np.ndarray) -> None:
        """Overwrite many ranges in place (a few: one pwrite each; many: through a shared mapping, msync'd);
        :meth:`sync` makes it durable."""
        src = np.ascontiguousarray(src, np.uint8)
        if len(starts) <= FEW_RANGES:
            at = 0
            for start, n in zip(_i64(starts).tolist(), _i64(lens).tolist()):
                os.pwrite(self.fd, src[at:at + n].tobytes(), start)
                at += n
            return
        self._mapped(lambda buf: scatter_ranges(buf, _i64(starts), _i64(lens), src), write=True)

    def zero(self, starts: np.ndarray, lens: np.ndarray) -> int:
        """Overwrite many ranges with zero bytes in place; returns how many bytes."""
        if len(starts) <= FEW_RANGES:
            total = 0
            for start, n in zip(_i64(starts).tolist(), _i64(lens).tolist()):
                if n:
                    os.pwrite(self.fd, bytes(n), start)
                    total += n
            return total
        return int(self._mapped(lambda buf: zero_ranges(buf, _i64(starts), _i64(lens)), write=True))

    def _mapped(self, fn: Callable[[np.ndarray], Any], write: bool = False) -> Any:
        """``fn`` of the file's bytes as a uint8 array (a mapping of its
        ``size`` bytes, unmapped when ``fn`` returns: what it returns must
        not be a view of them)."""
        if self.size == 0:
            return fn(np.zeros(0, np.uint8))
        m = mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ | (mmap.PROT_WRITE if write else 0))
        try:
            out = fn(np.frombuffer(m, np.uint8))
            if write:
                m.flush()
            return out
        finally:
            try:
                m.close()
            except BufferError:  # fn raised and its traceback still holds the array: unmapped when collected
                pass

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        """Idempotent: a second close must never close a descriptor reused since."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def fsync_paths(paths: list) -> int:
    """fsync each file by path, skipping one that no longer exists; how many were fsync'd."""
    done = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            done += 1
        finally:
            os.close(fd)
    return done


def _pwrite_all(fd: int, b: bytes, off: int) -> None:
    view = memoryview(b)
    while view:
        k = os.pwrite(fd, view, off)
        off += k
        view = view[k:]


class FileStore:
    """Journal files in a directory: ``rows``, ``ids``, ``run-<seq>`` and
    ``instance`` (a random id naming this incarnation of the directory)."""

    def __init__(self, directory: str | os.PathLike, state: dict | None = None) -> None:
        """``state`` None: a fresh journal (the directory is emptied); else the
        files as a snapshot left them (truncated to its sizes)."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        inst = self.dir / "instance"
        if state is None:
            for f in self.dir.glob("run-*"):
                f.unlink()
            self.instance = uuid.uuid4().hex
            inst.write_text(self.instance)
            self.rows = FileBlob(self.dir / "rows")
            self.ids = FileBlob(self.dir / "ids")
            self.meta = FileBlob(self.dir / "meta")
            self.moffs = FileBlob(self.dir / "moffs")
            return
        try:
            self.instance = inst.read_text()
        except OSError:
            raise JournalLost(f"{inst} is missing") from None
        if self.instance != state["instance"]:
            raise JournalLost(f"{self.dir} belongs to another journal")
        self.rows = FileBlob(self.dir / "rows", state["rows_size"])
        self.ids = FileBlob(self.dir / "ids", state["ids_size"])
        # a snapshot from before metadata names no sizes: the files start empty (Journal.meta_from)
        self.meta = FileBlob(self.dir / "meta", state.get("meta_size"))
        self.moffs = FileBlob(self.dir / "moffs", state.get("moffs_size"))

    def _run_path(self, seq: int) -> Path:
        return self.dir / f"run-{seq:08d}"

    def write_run(self, seq: int, hashes: np.ndarray, rows: np.ndarray) -> Run:
        return self.write_run_blocks(seq, len(hashes), [(hashes, rows)])

    def write_run_blocks(self, seq: int, n: int, blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> Run:
        """A run of ``n`` entries from sorted blocks (each a multiple of FENCE
        long but the last), written as they come: the hashes from byte 0,
        the rows from byte 8n. Memory: one block, and the fence."""
        path = self._run_path(seq)
        fences, at = [], 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, 16 * n)
            for h, r in blocks:
                _pwrite_all(fd, h.astype("<u8", copy=False).tobytes(), 8 * at)
                _pwrite_all(fd, r.astype("<i8", copy=False).tobytes(), 8 * (n + at))
                fences.append(np.array(h[::FENCE], np.uint64))
                at += len(h)
        finally:
            os.close(fd)
        if at != n:
            raise ValueError(f"run {seq}: {at} entries written, {n} announced")
        fence = np.concatenate(fences) if fences else np.zeros(0, np.uint64)
        return self.load_run(seq, n, fence)

    def load_run(self, seq: int, n: int, fence: np.ndarray | None = None) -> Run:
        path = self._run_path(seq)
        if not path.exists() or path.stat().st_size != 16 * n:
            raise JournalLost(f"{path} is missing or short")
        if n == 0:
            return Run(seq, np.zeros(0, "<u8"), np.zeros(0, "<i8"))
        fd = os.open(path, os.O_RDONLY)
        try:
            mapping = mmap.mmap(fd, 16 * n, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        # plain ndarray views of the mapping (np.memmap's subclass hooks cost
        # tens of microseconds per fancy index, per batch and run); the
        # mapping goes with the last of them
        h = np.frombuffer(mapping, "<u8", n, 0)
        r = np.frombuffer(mapping, "<i8", n, 8 * n)
        return Run(seq, h, r, fence, mapping)

    def delete_run(self, seq: int) -> None:
        try:
            self._run_path(seq).unlink()
        except FileNotFoundError:
            pass

    def sync(self, runs: list[Run]) -> None:
        """fsync the byte files, the files of ``runs`` and the directory (a
        scrub: the run files it created and deleted)."""
        self._fsync(runs, directory=True)

    def _fsync(self, runs: list[Run], directory: bool = False) -> None:
        for blob in (self.rows, self.ids, self.meta, self.moffs):
            blob.sync()
        paths = [self._run_path(seq) for seq in sorted({r.seq for r in runs})] + ([self.dir] if directory else [])
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def to_state(self, runs: list[Run], sync: bool = True) -> dict:
        """The files' identity and sizes; ``sync``: fsync'd first (else see :meth:`sync_later`)."""
        if sync:
            self._fsync(runs)
        return {"instance": self.instance, "rows_size": self.rows.size, "ids_size": self.ids.size,
                "meta_size": self.meta.size, "moffs_size": self.moffs.size}

    def sync_later(self, runs: list[Run]) -> Callable[[], object]:
        """What ``to_state(runs)`` would fsync, as a callable for another thread: it opens each file by
        path (never a descriptor this store may close meanwhile) and skips one that is gone (a run merged
        away, a dropped journal's directory)."""
        paths = [b.path for b in (self.rows, self.ids, self.meta, self.moffs)]
        paths += [self._run_path(seq) for seq in sorted({r.seq for r in runs})]
        return functools.partial(fsync_paths, paths)

    def close(self) -> None:
        for blob in (self.rows, self.ids, self.meta, self.moffs):
            blob.close()


class FilePlace:
    """A partition's journal directory (:class:`engine.core.journal.StorePlace`)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = directory

    def fresh(self) -> FileStore:
        return FileStore(self.directory)

    def reopen(self, state: dict) -> FileStore:
        return FileStore(self.directory, state)
