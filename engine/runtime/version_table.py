"""``VersionTable``: every board's current version in a small shared file.

The engine host writes a board's version there before it acknowledges the
writes that made it; the gateway workers on the same machine map the file and
read it (engine.runtime.replica): a top page is then served from a cached view
at the version every acknowledged write has reached, with no call at all, as
in a lone gateway. A gateway on another machine cannot open the file (or
finds another token in it) and asks the shards instead.

Layout: a 16-byte token, then ``slots`` little-endian int64 versions. An
aligned 8-byte store is atomic on the platforms FlowRank runs on, so a reader
sees the old version or the new one, never a mix. O(1) per read and write.
"""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path

import numpy as np

TOKEN_BYTES = 16
DEFAULT_SLOTS = 1 << 16  # boards with a slot; later ones are read from the shards (512 KiB of versions)


class VersionTable:
    def __init__(self, path: Path, token: bytes, mm: mmap.mmap, writable: bool):
        self.path, self.token, self._mm = path, token, mm
        self.versions = np.frombuffer(mm, dtype="<i8", offset=TOKEN_BYTES)  # read-only when the map is
        self.slots: dict[str, int] = {}

    @classmethod
    def create(cls, path: str | os.PathLike, slots: int = DEFAULT_SLOTS) -> "VersionTable":
        """A fresh table at ``path`` (replacing any older one) with a new token."""
        path = Path(path)
        token = secrets.token_bytes(TOKEN_BYTES)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(token)
            f.truncate(TOKEN_BYTES + 8 * slots)
        os.replace(tmp, path)
        with open(path, "r+b") as f:
            mm = mmap.mmap(f.fileno(), 0)
        return cls(path, token, mm, writable=True)

    @classmethod
    def open(cls, path: str | os.PathLike, token: bytes) -> "VersionTable | None":
        """The host's table if this machine has it (same token), else None."""
        try:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        except OSError:
            return None
        if mm[:TOKEN_BYTES] != token:
            mm.close()
            return None
        return cls(Path(path), token, mm, writable=False)

    def slot(self, board_id: str) -> int | None:
        """The host's slot for ``board_id`` (assigned on first use); None once the table is full."""
        s = self.slots.get(board_id)
        if s is None and len(self.slots) < len(self.versions):
            s = self.slots[board_id] = len(self.slots)
        return s

    def publish(self, board_id: str, version: int) -> None:
        s = self.slot(board_id)
        if s is not None:
            self.versions[s] = version

    def read(self, slot: int) -> int:
        return int(self.versions[slot])

    def close(self, unlink: bool = False) -> None:
        self.versions = None  # type: ignore[assignment]  # the buffer must go before the map closes
        try:
            self._mm.close()
        except BufferError:  # a view still holds it: the map goes with the process
            pass
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass
