"""XXH3-128 of many short byte strings in one numba pass.

The dedup table keys event ids by xxh3-128 (seeded per board, see
:mod:`engine.core.dedup`); those words are on disk in snapshots, so the hash can
never change. Calling ``xxhash.xxh3_128_digest`` once per id from Python
costs an encode, a call and two small objects per id, and touches every
id's ``str`` (cold in cache on the write path). Here the ids of a batch
arrive as one UTF-8 arena (:func:`engine.core.players.encode_ids`) and one kernel
hashes them all.

This is XXH3's 128-bit variant as specified by xxHash 0.8 for inputs of
0 to 240 bytes (the "short" and "mid-size" paths). Longer inputs (an id of
more than 240 bytes) are flagged, and the caller hashes those few with the
``xxhash`` package, which is also the reference the tests compare against on
every length 0..240 and random seeds (tests/engine/test_xxh3.py).
"""

from __future__ import annotations

import numba
import numpy as np

#: The longest input the kernel hashes; longer ones are left to ``xxhash``.
MAX_SHORT = 240

_SECRET = np.frombuffer(bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"), np.uint8)

_M32 = np.uint64(0xFFFFFFFF)
_P32_2 = np.uint64(0x85EBCA77)
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_P64_4 = np.uint64(0x85EBCA77C2B2AE63)
_MX1 = np.uint64(0x165667919E3779F9)
_MX2 = np.uint64(0x9FB21C651E98DF25)


@numba.njit(cache=True, forceinline=True)
def _r32(b, i):
    """The little-endian uint32 at ``b[i]``, as uint64."""
    return (np.uint64(b[i]) | (np.uint64(b[i + 1]) << np.uint64(8)) | (np.uint64(b[i + 2]) << np.uint64(16))
            | (np.uint64(b[i + 3]) << np.uint64(24)))


@numba.njit(cache=True, forceinline=True)
def _r64(b, i):
    """The little-endian uint64 at ``b[i]``."""
    return _r32(b, i) | (_r32(b, i + 4) << np.uint64(32))


@numba.njit(cache=True, forceinline=True)
def _mul128(a, b):
    """The 128-bit product of two uint64 as (low, high)."""
    al, ah, bl, bh = a & _M32, a >> np.uint64(32), b & _M32, b >> np.uint64(32)
    ll, hl, lh, hh = al * bl, ah * bl, al * bh, ah * bh
    cross = (ll >> np.uint64(32)) + (hl & _M32) + lh
    return (cross << np.uint64(32)) | (ll & _M32), (hl >> np.uint64(32)) + (cross >> np.uint64(32)) + hh


@numba.njit(cache=True, forceinline=True)
def _fold(a, b):
    lo, hi = _mul128(a, b)
    return lo ^ hi


@numba.njit(cache=True, forceinline=True)
def _avalanche64(h):
    h ^= h >> np.uint64(33)
    h *= _P64_2
    h ^= h >> np.uint64(29)
    h *= _P64_3
    return h ^ (h >> np.uint64(32))


@numba.njit(cache=True, forceinline=True)
def _avalanche(h):
    h ^= h >> np.uint64(37)
    h *= _MX1
    return h ^ (h >> np.uint64(32))


@numba.njit(cache=True, forceinline=True)
def _swap(x, n):
    """The low ``n`` bytes of ``x`` in reverse order."""
    out = np.uint64(0)
    for _ in range(n):
        out = (out << np.uint64(8)) | (x & np.uint64(0xFF))
        x >>= np.uint64(8)
    return out


@numba.njit(cache=True, forceinline=True)
def _mix16(b, i, s, si, seed):
    return _fold(_r64(b, i) ^ (_r64(s, si) + seed), _r64(b, i + 8) ^ (_r64(s, si + 8) - seed))


@numba.njit(cache=True, forceinline=True)
def _mix32(lo, hi, b, i1, i2, s, si, seed):
    lo += _mix16(b, i1, s, si, seed)
    lo ^= _r64(b, i2) + _r64(b, i2 + 8)
    hi += _mix16(b, i2, s, si + 16, seed)
    hi ^= _r64(b, i1) + _r64(b, i1 + 8)
    return lo, hi


@numba.njit(cache=True)
def _hash128(b, i, n, seed, s):
    """XXH3-128 of ``b[i:i + n]`` (n <= 240) as (low64, high64)."""
    un = np.uint64(n)
    if n == 0:
        return (_avalanche64(seed ^ (_r64(s, 64) ^ _r64(s, 72))),
                _avalanche64(seed ^ (_r64(s, 80) ^ _r64(s, 88))))
    if n <= 3:
        c1, c2, c3 = np.uint64(b[i]), np.uint64(b[i + (n >> 1)]), np.uint64(b[i + n - 1])
        cl = (c1 << np.uint64(16)) | (c2 << np.uint64(24)) | c3 | (un << np.uint64(8))
        sw = _swap(cl, 4)
        ch = ((sw << np.uint64(13)) | (sw >> np.uint64(19))) & _M32
        fl = ((_r32(s, 0) ^ _r32(s, 4)) + seed)
        fh = ((_r32(s, 8) ^ _r32(s, 12)) - seed)
        return _avalanche64(cl ^ fl), _avalanche64(ch ^ fh)
    if n <= 8:
        seed ^= _swap(seed & _M32, 4) << np.uint64(32)
        x = _r32(b, i) + (_r32(b, i + n - 4) << np.uint64(32))
        keyed = x ^ ((_r64(s, 16) ^ _r64(s, 24)) + seed)
        lo, hi = _mul128(keyed, _P64_1 + (un << np.uint64(2)))
        hi += lo << np.uint64(1)
        lo ^= hi >> np.uint64(3)
        lo ^= lo >> np.uint64(35)
        lo *= _MX2
        lo ^= lo >> np.uint64(28)
        return lo, _avalanche(hi)
    if n <= 16:
        fl = (_r64(s, 32) ^ _r64(s, 40)) - seed
        fh = (_r64(s, 48) ^ _r64(s, 56)) + seed
        xl, xh = _r64(b, i), _r64(b, i + n - 8)
        lo, hi = _mul128(xl ^ xh ^ fl, _P64_1)
        lo += (un - np.uint64(1)) << np.uint64(54)
        xh ^= fh
        hi += xh + (xh & _M32) * (_P32_2 - np.uint64(1))
        lo ^= _swap(hi, 8)
        rl, rh = _mul128(lo, _P64_2)
        rh += hi * _P64_2
        return _avalanche(rl), _avalanche(rh)
    lo, hi = un * _P64_1, np.uint64(0)
    if n <= 128:
        k = (n - 1) // 32
        while k >= 0:
            lo, hi = _mix32(lo, hi, b, i + 16 * k, i + n - 16 * (k + 1), s, 32 * k, seed)
            k -= 1
    else:
        for k in range(4):
            lo, hi = _mix32(lo, hi, b, i + 32 * k, i + 32 * k + 16, s, 32 * k, seed)
        lo, hi = _avalanche(lo), _avalanche(hi)
        for k in range(4, n // 32):
            lo, hi = _mix32(lo, hi, b, i + 32 * k, i + 32 * k + 16, s, 3 + 32 * (k - 4), seed)
        lo, hi = _mix32(lo, hi, b, i + n - 16, i + n - 32, s, 136 - 17 - 16, np.uint64(0) - seed)
    rl = lo + hi
    rh = lo * _P64_1 + hi * _P64_4 + (un - seed) * _P64_2
    return _avalanche(rl), np.uint64(0) - _avalanche(rh)


@numba.njit(cache=True)
def _many(buf, offs, seed, secret, lo, hi):
    long = 0
    for x in range(len(offs) - 1):
        n = offs[x + 1] - offs[x]
        if n > MAX_SHORT:
            long += 1
            continue
        lo[x], hi[x] = _hash128(buf, offs[x], n, seed, secret)
    return long


def xxh3_128_many(buf: np.ndarray, offs: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """XXH3-128 (``seed``) of every item ``buf[offs[x]:offs[x + 1]]``: the
    low and high 64 bits, and how many items were longer than
    :data:`MAX_SHORT` (their entries are left unset: hash those with
    ``xxhash``)."""
    k = len(offs) - 1
    lo, hi = np.empty(k, np.uint64), np.empty(k, np.uint64)
    long = int(_many(buf, offs, np.uint64(seed), _SECRET, lo, hi)) if k else 0
    return lo, hi, long
