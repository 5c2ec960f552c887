"""Spill files of an export: one partition's ranked rows at a pinned version (docs/storage.md).

The file I/O half of :mod:`engine.core.export`. A shard writes one file per
partition of the board, in rank order, when an export pins its version; the
router reads it back a block at a time (or, when it cannot open the file, as
on another node, asks the shard for the same frames). Nothing is fsync'd:
a spill file is scratch, removed when its export ends, and every spill
directory is emptied when its shard starts.

Layout (little-endian)::

    magic  b"FRSPILL1"
    u64    rows in the file
    u64    token length L, then the token (ASCII), padded to a multiple of 8
    frames: u64 length N, then N bytes of one encoded engine.core.export.Block
"""

from __future__ import annotations

import os
import shutil
import struct
from typing import Iterable

from engine.core.export import Block

MAGIC = b"FRSPILL1"
SUFFIX = ".spill"
_U64 = struct.Struct("<Q")


def spill_path(root: str, token: str, part: int) -> str:
    return os.path.join(root, f"{token}-{part}{SUFFIX}")


def _header(token: str, rows: int) -> bytes:
    raw = token.encode("ascii")
    return MAGIC + _U64.pack(rows) + _U64.pack(len(raw)) + raw + b"\0" * (-len(raw) % 8)


def write_spill(path: str, token: str, rows: int, blocks: Iterable[Block]) -> None:
    """Write ``rows`` rows given as ``blocks`` (in rank order) to a new file.
    Raises FileExistsError rather than overwrite one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
            fd = -1
            fh.write(_header(token, rows))
            written = 0
            for b in blocks:
                raw = b.encode()
                fh.write(_U64.pack(len(raw)))
                fh.write(raw)
                written += b.rows
            if written != rows:
                raise ValueError(f"{path}: {written} rows written, {rows} announced")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


class SpillReader:
    """Reads a spill file's blocks in order (one ``pread`` of the frame
    header and one of the frame per block: memory is one block)."""

    def __init__(self, fd: int, rows: int, first: int) -> None:
        self.fd, self.rows, self.at = fd, rows, first

    @classmethod
    def open(cls, path: str, token: str, unlink: bool = True) -> "SpillReader | None":
        """The file at ``path`` if this process can open it and it is the
        spill of ``token`` (None otherwise: on another node, say). ``unlink``:
        remove its name at once, so the data goes when the reader closes,
        whatever happens to this process."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        want = _header(token, 0)
        head = os.pread(fd, len(want), 0)
        if len(head) != len(want) or head[:8] != MAGIC or head[16:] != want[16:]:
            os.close(fd)
            return None
        if unlink:
            try:
                os.unlink(path)
            except OSError:
                pass
        return cls(fd, _U64.unpack(head[8:16])[0], len(want))

    def next_frame(self) -> bytes:
        """The next block's bytes (b"" at the end)."""
        raw, self.at = read_frame_fd(self.fd, self.at)
        return raw

    def next(self) -> Block | None:
        raw = self.next_frame()
        return Block.decode(raw) if raw else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_frame_fd(fd: int, at: int) -> tuple[bytes, int]:
    head = os.pread(fd, 8, at)
    if len(head) < 8:
        return b"", at
    (n,) = _U64.unpack(head)
    raw = os.pread(fd, n, at + 8)
    if len(raw) != n:
        raise OSError(f"spill file truncated at offset {at}")
    return raw, at + 8 + n


def read_frame(path: str, token: str, at: int | None) -> tuple[bytes, int]:
    """The frame of the spill file at byte ``at`` (None: the first) and the
    offset of the next one; b"" at the end. Raises FileNotFoundError when the
    file is gone (its shard restarted, say)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if at is None:
            at = len(_header(token, 0))
        return read_frame_fd(fd, at)
    finally:
        os.close(fd)


def remove_spills(root: str, token: str | None = None) -> int:
    """Remove the spill files of ``token`` under ``root`` (None: every one,
    as at a shard's start). Returns how many went."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    gone = 0
    for name in names:
        if name.endswith(SUFFIX) and (token is None or name.startswith(token + "-")):
            try:
                os.unlink(os.path.join(root, name))
                gone += 1
            except OSError:
                pass
    return gone


def reset_dir(root: str) -> None:
    """Create ``root`` empty of spill files (stale ones from a crash go)."""
    os.makedirs(root, exist_ok=True)
    remove_spills(root)


def remove_dir(root: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
