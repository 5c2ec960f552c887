"""``FileSnapshotStore``: checksummed, atomically written snapshot files.

File name: ``{name}.{offset:020d}.snap`` (sorts by offset). Envelope::

    magic b"FRSN" | version u16 | reserved u16 | offset u64 | payload_len u64 |
    xxh3_128(header-without-digest + payload) 16 bytes | msgpack payload

``version`` is the envelope's (framing); a newer one raises
:class:`engine.core.errors.UnsupportedFormat` from :meth:`FileSnapshotStore.load_latest`
instead of being skipped as damage. What the payload means is versioned by
its owner (``"format"`` in the router and shard state dicts, engine.core.formats).

Writing is atomic: a temp file ``.{name}.{offset:020d}.snap.tmp.<pid>`` in
the same directory is written, flushed and fsync'd, then ``os.replace``'d
onto the final name, then the directory is fsync'd. A crash leaves either
the previous set of snapshots or the new one (plus possibly a stale temp
file, ignored and removed on the next construction). One writer process
per directory.
"""

from __future__ import annotations

import logging
import os
import re
import struct

import msgpack
import xxhash

from engine.core.errors import StorageUnavailable, UnsupportedFormat
from engine.log.framing import gc_paused, pack_payload, unpack_payload
from engine.log.memory import check_snapshot_name
from engine.log.port import FaultHook
from engine.log.segment_log import fsync_directory

logger = logging.getLogger("flowrank.log")

SNAP_HEADER = struct.Struct("<4sHHQQ")
SNAP_HEADER_SIZE = SNAP_HEADER.size  # 24
DIGEST_SIZE = 16
SNAP_MAGIC = b"FRSN"
SNAP_VERSION = 1
_SNAP_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]*)\.(\d{20})\.snap$")
_TMP_NAME = re.compile(r"^\.[A-Za-z0-9][A-Za-z0-9_-]*\.\d{20}\.snap\.tmp\.\d+$")


class SnapshotInvalid(Exception):
    """Internal: a snapshot file that does not verify (reason in message)."""


def encode_snapshot(offset: int, payload: object) -> bytes:
    """Envelope + payload bytes. ``O(payload size)``."""
    body = pack_payload(payload)
    header = SNAP_HEADER.pack(SNAP_MAGIC, SNAP_VERSION, 0, offset, len(body))
    digest = xxhash.xxh3_128(header)
    digest.update(body)
    return header + digest.digest() + body


def decode_snapshot(data: bytes) -> tuple[int, object]:
    """Verify and decode an envelope; raises :class:`SnapshotInvalid` (damage)
    or, for an intact envelope of a newer version, :class:`UnsupportedFormat`."""
    offset, body = decode_snapshot_body(data)
    try:
        with gc_paused():
            payload = unpack_payload(body)
    except (ValueError, msgpack.UnpackException) as exc:
        raise SnapshotInvalid(f"undecodable payload: {exc}") from exc
    return offset, payload


def decode_snapshot_body(data: bytes) -> tuple[int, memoryview]:
    """Verify an envelope: its offset and its payload's msgpack bytes, not decoded (a copy of the
    snapshot elsewhere, engine.log.pg_import). Raises as :func:`decode_snapshot`."""
    if len(data) < SNAP_HEADER_SIZE + DIGEST_SIZE:
        raise SnapshotInvalid(f"truncated header ({len(data)} bytes)")
    magic, version, _res, offset, length = SNAP_HEADER.unpack_from(data, 0)
    if magic != SNAP_MAGIC or version < 1:
        raise SnapshotInvalid("bad magic/version")
    start = SNAP_HEADER_SIZE + DIGEST_SIZE
    if len(data) != start + length:
        raise SnapshotInvalid(f"payload is {len(data) - start} bytes, header says {length}")
    view = memoryview(data)
    digest = xxhash.xxh3_128(view[:SNAP_HEADER_SIZE])
    digest.update(view[start:])
    if digest.digest() != data[SNAP_HEADER_SIZE:start]:
        raise SnapshotInvalid(f"checksum mismatch (envelope version {version})")
    if version > SNAP_VERSION:  # intact, not damage: a newer FlowRank wrote it (never skipped for an older one)
        raise UnsupportedFormat(f"snapshot envelope version {version}, newer than version {SNAP_VERSION} that "
                                "this FlowRank version reads; it was written by a newer FlowRank: run that "
                                "version (or newer) on this data directory")
    return offset, view[start:]


class FileSnapshotStore:
    """File-backed :class:`engine.log.SnapshotStore` in ``directory``.

    ``fault_hook(op, path)`` is called before ``"snapshot.write"``,
    ``"snapshot.fsync"``, ``"snapshot.rename"`` and ``"snapshot.dirsync"``
    (test seam: raise ``OSError`` to fail the step, block to freeze there).
    """

    def __init__(self, directory: str, keep: int = 3, *, fault_hook: FaultHook | None = None,
                 fsync: bool = True):
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self._dir = os.path.abspath(directory)
        self._keep = keep
        self._hook = fault_hook
        self._fsync = fsync
        os.makedirs(self._dir, exist_ok=True)
        for entry in os.listdir(self._dir):
            if _TMP_NAME.match(entry):  # left by a crash mid-save
                try:
                    os.unlink(os.path.join(self._dir, entry))
                except OSError:
                    pass

    @property
    def directory(self) -> str:
        return self._dir

    def path_for(self, name: str, offset: int) -> str:
        return os.path.join(self._dir, f"{check_snapshot_name(name)}.{offset:020d}.snap")

    def _call(self, op: str, path: str) -> None:
        if self._hook is not None:
            self._hook(op, path)

    def save(self, name: str, offset: int, payload: object) -> str:
        """Atomic save then prune to ``keep`` newest. ``O(payload size)``
        plus two fsyncs (file, directory)."""
        check_snapshot_name(name)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"snapshot offset must be an int >= 0, got {offset!r}")
        data = encode_snapshot(offset, payload)  # TypeError before touching disk
        final = self.path_for(name, offset)
        tmp = os.path.join(self._dir, f".{name}.{offset:020d}.snap.tmp.{os.getpid()}")
        stage = "write"
        try:
            with open(tmp, "wb") as f:
                self._call("snapshot.write", tmp)
                f.write(data)
                f.flush()
                if self._fsync:
                    stage = "fsync"
                    self._call("snapshot.fsync", tmp)
                    os.fsync(f.fileno())
            stage = "rename"
            self._call("snapshot.rename", final)
            os.replace(tmp, final)
            if self._fsync:
                stage = "directory fsync"
                self._call("snapshot.dirsync", self._dir)
                fsync_directory(self._dir)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StorageUnavailable(f"snapshot {stage} failed for {final}: {exc}") from exc
        self._prune(name)
        return final

    def _prune(self, name: str) -> None:
        old = self.list(name)[: -self._keep]
        for _offset, path in old:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("could not delete old snapshot %s: %s", path, exc)
        if old and self._fsync:
            try:
                fsync_directory(self._dir)
            except OSError as exc:
                logger.warning("could not fsync snapshot directory %s: %s", self._dir, exc)

    def delete_through(self, offset: int) -> list[str]:
        """Delete every snapshot (of any name) at or before ``offset`` and fsync the directory: an erasure
        (docs/api.md §17) removes the states taken before its record. Returns the paths deleted."""
        gone = []
        for entry in os.listdir(self._dir):
            m = _SNAP_NAME.match(entry)
            if m and int(m.group(2)) <= offset:
                path = os.path.join(self._dir, entry)
                self._call("snapshot.delete", path)
                os.unlink(path)
                gone.append(path)
        if gone and self._fsync:
            fsync_directory(self._dir)
        return gone

    def list(self, name: str) -> list[tuple[int, str]]:
        """``(offset, path)`` of ``name``'s snapshot files, oldest first.
        ``O(directory entries)``."""
        check_snapshot_name(name)
        found = []
        for entry in os.listdir(self._dir):
            m = _SNAP_NAME.match(entry)
            if m and m.group(1) == name:
                found.append((int(m.group(2)), os.path.join(self._dir, entry)))
        found.sort()
        return found

    def load_latest(self, name: str) -> tuple[int, object] | None:
        """Newest verifying snapshot, skipping (with a warning) bad ones.
        ``O(size of the snapshots read)``."""
        for offset, path in reversed(self.list(name)):
            try:
                with open(path, "rb") as f:
                    data = f.read()
                stored_offset, payload = decode_snapshot(data)
                if stored_offset != offset:
                    raise SnapshotInvalid(f"envelope offset {stored_offset} != file name offset {offset}")
            except (OSError, SnapshotInvalid) as exc:
                logger.warning("skipping bad snapshot %s: %s", path, exc)
                continue
            except UnsupportedFormat as exc:
                raise UnsupportedFormat(f"{path}: {exc}") from None
            return offset, payload
        return None
