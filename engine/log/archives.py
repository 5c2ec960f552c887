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

An archive is rewritten only to erase players (docs/api.md §17): ``erase``
builds the archive without them (:func:`engine.core.archive.without_players`)
and ``replace`` writes it the way a save does, so after a crash the file is
the old archive or the new one, whole. A view of the old file stays readable
after the rename (its mapping keeps the old inode) until it is dropped.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
from pathlib import Path
from typing import Callable, Protocol, Sequence

from engine.core.archive import ArchiveRewrite, ArchiveView, digest_ok, without_players
from engine.core.errors import StorageUnavailable
from engine.log.segment_log import fsync_directory

log = logging.getLogger("flowrank.archives")

__all__ = ["ArchiveStore", "FileArchiveStore", "MemoryArchiveStore"]


class ArchiveStore(Protocol):
    def save(self, board_id: str, chunks: list[bytes]) -> None:
        """Make the archive of ``board_id`` durable (replacing none or an older copy)."""

    def open(self, board_id: str) -> ArchiveView | None:
        """The finished archive of ``board_id``, or None when there is none."""

    def replace(self, board_id: str, data: bytes) -> ArchiveView:
        """Put ``data`` (a whole archive) in place of the archive of ``board_id``,
        atomically, and return the view of the new one."""

    def erase(self, board_id: str, player_ids: Sequence[str]) -> tuple[ArchiveView, ArchiveRewrite] | None:
        """Rewrite the archive of ``board_id`` without ``player_ids``: the view
        of the new archive and what was removed; None when there is no
        archive or none of the players is in it (nothing is written)."""


def _erase(store: ArchiveStore, board_id: str, player_ids: Sequence[str]) -> tuple[ArchiveView, ArchiveRewrite] | None:
    """Both stores' ``erase``: read the archive, rewrite it without the players, replace it. O(archive bytes)."""
    old = store.open(board_id)
    if old is None:
        return None
    rewrite = without_players(old.buf, player_ids)
    del old  # the old file's mapping (a view already handed out keeps its own)
    if rewrite is None:
        return None
    return store.replace(board_id, rewrite.data), rewrite


class MemoryArchiveStore:
    """Archives as bytes in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def save(self, board_id: str, chunks: list[bytes]) -> None:
        self.files[board_id] = b"".join(chunks)

    def open(self, board_id: str) -> ArchiveView | None:
        data = self.files.get(board_id)
        return None if data is None else ArchiveView(data)

    def replace(self, board_id: str, data: bytes) -> ArchiveView:
        self.files[board_id] = data
        return ArchiveView(data)

    def erase(self, board_id: str, player_ids: Sequence[str]) -> tuple[ArchiveView, ArchiveRewrite] | None:
        return _erase(self, board_id, player_ids)


class FileArchiveStore:
    """One archive file per board in a directory; ``fault_hook(stage, path)``
    (tests) runs before each step of a save: "archive.write", "archive.fsync",
    "archive.rename", "archive.dirsync"."""

    def __init__(self, directory: str | os.PathLike, fault_hook: Callable[[str, str], None] | None = None,
                 clean: bool = True) -> None:
        """``clean``: delete leftover temp files (the service's own store, at start; not a second store over
        the same directory in a helper process, where another save may be in progress)."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._hook = fault_hook
        for tmp in self.dir.glob("*.tmp") if clean else ():  # a save that did not finish: never an archive
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

    def replace(self, board_id: str, data: bytes) -> ArchiveView:
        """Write ``data`` over the archive of ``board_id`` as :meth:`save` writes
        (temp file, fsync, rename, directory fsync: a crash before the rename
        leaves the old file whole, after it the new one) and open it. The
        fault hook sees the same stages. O(bytes)."""
        self.save(board_id, [data])
        view = self.open(board_id)
        if view is None:  # renamed a moment ago: only someone else's hand removes it
            raise StorageUnavailable(f"The archive of board {board_id!r} vanished after it was replaced.", retry_after=1)
        return view

    def erase(self, board_id: str, player_ids: Sequence[str]) -> tuple[ArchiveView, ArchiveRewrite] | None:
        """The archive without ``player_ids`` (see :class:`ArchiveStore`), read
        from the old file's mapping, written by :meth:`replace`."""
        return _erase(self, board_id, player_ids)


def erase_file(directory: str, board_id: str, player_ids: Sequence[str]) -> bool:
    """:meth:`FileArchiveStore.erase` in another process (the router's helper process, for a big archive: the
    rewrite's CPU and GIL stay out of the process that answers requests); whether it rewrote the file. The
    caller opens the new file."""
    got = _erase(FileArchiveStore(directory, clean=False), board_id, player_ids)
    return got is not None
