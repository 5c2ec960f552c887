"""Where archived boards live (docs/storage.md, "Archives"): the I/O half of
:mod:`engine.core.archive`.

``FileArchiveStore`` keeps one file per archived board under the data
directory (``archives/<sha1 of the board id>.arch``). A file is written to a
temporary name in the same directory, fsync'd, renamed onto its final name,
and the directory fsync'd: after a crash the final name holds either nothing
or a whole archive (a leftover ``.tmp`` is removed at open). Reading maps the
file read-only, so an archive costs page cache, not process memory, and only
the pages a read touches. ``MemoryArchiveStore`` keeps the same bytes in a
dict (tests, the in-memory service).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
from pathlib import Path
from typing import Callable, Protocol

from engine.core.archive import ArchiveView, digest_ok
from engine.core.errors import StorageUnavailable
from engine.log.segment_log import fsync_directory

log = logging.getLogger("flowrank.archives")

__all__ = ["ArchiveStore", "FileArchiveStore", "MemoryArchiveStore"]


class ArchiveStore(Protocol):
    def save(self, board_id: str, chunks: list[bytes]) -> None:
        """Make the archive of ``board_id`` durable (replacing none or an older copy)."""

    def open(self, board_id: str) -> ArchiveView | None:
        """The finished archive of ``board_id``, or None when there is none."""


class MemoryArchiveStore:
    """Archives as bytes in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def save(self, board_id: str, chunks: list[bytes]) -> None:
        self.files[board_id] = b"".join(chunks)

    def open(self, board_id: str) -> ArchiveView | None:
        data = self.files.get(board_id)
        return None if data is None else ArchiveView(data)


class FileArchiveStore:
    """One archive file per board in a directory; ``fault_hook(stage, path)``
    (tests) runs before each step of a save: "archive.write", "archive.fsync",
    "archive.rename", "archive.dirsync"."""

    def __init__(self, directory: str | os.PathLike, fault_hook: Callable[[str, str], None] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._hook = fault_hook
        for tmp in self.dir.glob("*.tmp"):  # a save that did not finish: never an archive
            tmp.unlink()

    def path(self, board_id: str) -> Path:
        digest = hashlib.sha1(board_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.dir / f"{digest}.arch"

    def _call(self, stage: str, path: Path) -> None:
        if self._hook is not None:
            self._hook(stage, str(path))

    def save(self, board_id: str, chunks: list[bytes]) -> None:
        final = self.path(board_id)
        tmp = final.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                self._call("archive.write", tmp)
                for c in chunks:
                    f.write(c)
                f.flush()
                self._call("archive.fsync", tmp)
                os.fsync(f.fileno())
            self._call("archive.rename", final)
            os.replace(tmp, final)
            self._call("archive.dirsync", self.dir)
            fsync_directory(str(self.dir))
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageUnavailable(f"Could not write the archive of board {board_id!r} ({exc}).",
                                     retry_after=1) from exc

    def open(self, board_id: str) -> ArchiveView | None:
        """The archive mapped read-only, after checking its trailer digest
        (read with pread: checking maps nothing). None when there is no file;
        a damaged file raises StorageUnavailable (it is never silently rebuilt:
        the shards may have dropped the rows it holds)."""
        path = self.path(board_id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if not digest_ok(lambda at, n: os.pread(fd, n, at), size):
                raise StorageUnavailable(f"The archive of board {board_id!r} ({path}) is damaged: its digest "
                                         "does not match; restore it from a backup.")
            mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        return ArchiveView(mapped)
