"""A board checksum that any replay of the same log reproduces (docs/api.md §10).

Each row hashes to a 128-bit xxh3 digest of a canonical encoding of
(player, value, achieved_at, status, row version, and the row's metadata
when it has some); the board checksum is
the sum of the digests mod 2**128. A sum is independent of insertion
order and of Python's hash seed, and it is additive: the checksum of a
board split over k partitions is the sum of theirs, so k shards and one
shard can be compared directly.
"""

from __future__ import annotations

import xxhash

MASK128 = (1 << 128) - 1
_xxh128 = xxhash.xxh3_128_intdigest


def row_digest(player_id: str, value: int, achieved_at: int, status: str, row_version: int,
               metadata: bytes | None = None, subscores: tuple[int, ...] | None = None) -> int:
    """A row's digest; its metadata (docs/api.md §13) counts only when it
    has some, so a row without metadata hashes as it always did; its
    subscores (§14) only on a board that has them (after a marker no
    metadata can begin with), so no other board's checksum changes."""
    data = f"{player_id}\x1f{value}\x1f{achieved_at}\x1f{status}\x1f{row_version}".encode("utf-8", "surrogatepass")
    if metadata:
        data += b"\x1f" + metadata
    if subscores:
        data += b"\x1e" + ",".join(map(str, subscores)).encode()
    return _xxh128(data)


def combine(sums) -> int:
    """Combine per-partition sums into the board's checksum value."""
    return sum(sums) & MASK128


def render(total: int) -> str:
    """The checksum as 32 lowercase hex digits."""
    return f"{total & MASK128:032x}"
