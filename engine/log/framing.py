"""On-disk record framing for the segmented event log.

A segment file is a 16-byte header followed by records::

    segment header: magic b"FRLG" | version u16 LE | record_format u16 LE | first_offset u64 LE
    record:         length u32 LE | crc32(payload) u32 LE | payload (``length`` bytes of msgpack)

``version`` is the framing (this module); ``record_format`` is the number
of the payload vocabulary the segment's records were written in, opaque here
(the engine writes :data:`engine.core.formats.LOG_FORMAT`; 0 in segments written
before it was numbered). Offsets are not stored per record: a record's offset is the segment's
``first_offset`` plus its position in the segment. ``length`` is never 0
(msgpack encodes every value in at least one byte), which makes a run of zero
bytes (a typical torn, pre-allocated or hole-filled tail) an invalid frame.

Everything here is pure (bytes in, values out); files live in
:mod:`engine.log.segment_log`.
"""

from __future__ import annotations

import gc
import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import msgpack

FRAME_HEADER = struct.Struct("<II")
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 8
SEGMENT_HEADER = struct.Struct("<4sHHQ")
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size  # 16
SEGMENT_MAGIC = b"FRLG"
SEGMENT_VERSION = 1
#: Upper bound for one record's payload; larger lengths are treated as garbage.
MAX_RECORD_BYTES = 1 << 28

_unpack_header = FRAME_HEADER.unpack_from
_pack_header = FRAME_HEADER.pack
_crc32 = zlib.crc32


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while decoding many containers at once.

    msgpack allocates one tracked list/dict per container; with the GC on,
    decoding 1M rows triggers repeated full collections (about 8x slower).
    Decoded msgpack values contain no reference cycles, so pausing is safe.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def pack_payload(record: object) -> bytes:
    """Serialise one record with msgpack (``bin`` for bytes, ``str`` for str).

    Raises ``TypeError`` for values msgpack cannot encode. Tuples come back as
    lists; dict keys may be any msgpack scalar.
    """
    return msgpack.packb(record, use_bin_type=True)


def pack_in_pieces(obj, depth: int = 5) -> bytes:
    """The bytes of :func:`pack_payload` (equal), packed a piece at a time down to ``depth`` levels of
    maps and lists: each piece is one short C call that holds the GIL, so a thread packing a big
    snapshot lets the request thread in between them instead of stalling it for the whole pack."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=True)
    out: list[bytes] = []

    def walk(x, d: int) -> None:
        if d and type(x) is dict:
            out.append(packer.pack_map_header(len(x)))
            for k, v in x.items():
                out.append(packer.pack(k))
                walk(v, d - 1)
        elif d and type(x) is list:
            out.append(packer.pack_array_header(len(x)))
            for v in x:
                walk(v, d - 1)
        else:
            out.append(packer.pack(x))

    walk(obj, depth)
    return b"".join(out)


def unpack_payload(buf) -> object:
    """Inverse of :func:`pack_payload`; raises ``ValueError``-like msgpack errors."""
    return msgpack.unpackb(buf, raw=False, strict_map_key=False)


def encode_record(record: object) -> bytes:
    """One framed record: header + payload. ``O(len(payload))``."""
    payload = pack_payload(record)
    if len(payload) > MAX_RECORD_BYTES:
        raise ValueError(f"record of {len(payload)} bytes exceeds {MAX_RECORD_BYTES}")
    return _pack_header(len(payload), _crc32(payload)) + payload


def encode_batch(records: Sequence[object]) -> tuple[bytes, list[int]]:
    """Frame a batch. Returns ``(blob, starts)`` where ``starts[i]`` is the byte
    position of record ``i`` inside ``blob``. ``O(total bytes)``.

    Raises ``TypeError``/``ValueError`` before anything is written if any
    record cannot be encoded, so a batch is all-or-nothing.
    """
    pack = msgpack.Packer(use_bin_type=True).pack
    return encode_payloads([pack(record) for record in records])


def encode_payloads(payloads: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """:func:`encode_batch` of records already packed (:func:`pack_payload`):
    each payload is framed as it is, never unpacked and packed again."""
    parts: list[bytes] = []
    starts: list[int] = []
    pos = 0
    for payload in payloads:
        n = len(payload)
        if n > MAX_RECORD_BYTES:
            raise ValueError(f"record of {n} bytes exceeds {MAX_RECORD_BYTES}")
        starts.append(pos)
        parts.append(_pack_header(n, _crc32(payload)))
        parts.append(payload)
        pos += FRAME_HEADER_SIZE + n
    return b"".join(parts), starts


class SegmentHeader(NamedTuple):
    version: int  # framing version (SEGMENT_VERSION)
    record_format: int  # payload format of the segment's records (opaque to the log)
    first_offset: int


def encode_segment_header(first_offset: int, record_format: int = 0) -> bytes:
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, record_format, first_offset)


def decode_segment_header(buf: bytes) -> SegmentHeader | None:
    """The header's fields, or None if the magic is wrong. The caller checks
    ``version`` (a newer framing is not corruption: it is refused as such)."""
    magic, version, record_format, first = SEGMENT_HEADER.unpack_from(buf, 0)
    if magic != SEGMENT_MAGIC:
        return None
    return SegmentHeader(version, record_format, first)


@dataclass(slots=True)
class ParseResult:
    """Outcome of :func:`parse_frames`.

    ``values`` holds decoded records (empty when ``keep=False``); ``starts``
    the byte position of each parsed frame; ``end`` the position just after
    the last good frame; ``problem`` is None when parsing stopped at ``limit``
    or exactly at the end of the buffer, else why the frame at ``end`` is
    bad: ``"short header"``, ``"short payload"``, ``"bad length"``,
    ``"crc mismatch"`` or ``"undecodable"``.
    """

    values: list
    starts: list[int]
    end: int
    problem: str | None

    @property
    def incomplete(self) -> bool:
        """True if the bad frame may just be cut by the end of the buffer."""
        return self.problem in ("short header", "short payload")


def parse_frames(buf, pos: int, end: int, limit: int, *, keep: bool = True, decode: bool = True) -> ParseResult:
    """Parse up to ``limit`` consecutive frames from ``buf[pos:end]``.

    Each frame's CRC is checked; with ``decode`` its payload must also be a
    single complete msgpack value. Stops at the first bad frame (see
    :class:`ParseResult`). ``O(bytes parsed)``.
    """
    with gc_paused():
        return _parse_frames(buf, pos, end, limit, keep, decode)


def _parse_frames(buf, pos: int, end: int, limit: int, keep: bool, decode: bool) -> ParseResult:
    view = memoryview(buf)
    values: list = []
    starts: list[int] = []
    problem = None
    n = 0
    unpackb = msgpack.unpackb
    while n < limit:
        remaining = end - pos
        if remaining < FRAME_HEADER_SIZE:
            if remaining > 0:
                problem = "short header"
            break
        length, crc = _unpack_header(buf, pos)
        if length == 0 or length > MAX_RECORD_BYTES:
            problem = "bad length"
            break
        start = pos + FRAME_HEADER_SIZE
        stop = start + length
        if stop > end:
            problem = "short payload"
            break
        payload = view[start:stop]
        if _crc32(payload) != crc:
            problem = "crc mismatch"
            break
        if decode:
            try:
                value = unpackb(payload, raw=False, strict_map_key=False)
            except Exception:
                problem = "undecodable"
                break
            if keep:
                values.append(value)
        starts.append(pos)
        pos = stop
        n += 1
    return ParseResult(values, starts, pos, problem)


def find_valid_frame(buf, start: int, end: int) -> int | None:
    """Return the first byte position ``>= start`` where a complete frame with
    a matching CRC and a decodable payload begins inside ``buf[:end]``, or
    None. Used to tell a torn tail (nothing valid follows) from corruption.
    ``O((end - start) * typical frame check)``; the check rejects most
    positions on the length field alone.
    """
    view = memoryview(buf)
    last = end - FRAME_HEADER_SIZE
    unpackb = msgpack.unpackb
    pos = start
    while pos < last:
        length, crc = _unpack_header(buf, pos)
        if 0 < length <= end - pos - FRAME_HEADER_SIZE:
            payload = view[pos + FRAME_HEADER_SIZE : pos + FRAME_HEADER_SIZE + length]
            if _crc32(payload) == crc:
                try:
                    unpackb(payload, raw=False, strict_map_key=False)
                except Exception:
                    pass
                else:
                    return pos
        pos += 1
    return None
