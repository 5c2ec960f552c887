"""Garbage-collector settings for FlowRank's long-lived server processes.

A board holds millions of small, long-lived objects (rows, rank keys,
history tuples) that contain no reference cycles worth hunting. CPython's
default thresholds re-scan them over and over while events stream in: the
engine benchmark measured the collector as the largest single cost of
applying events (+29 % events/s and ~3x top-100 reads with this setting,
docs/performance.md). Servers call :func:`tune` once their state is loaded;
library users and tests keep the defaults.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)


def tune() -> None:
    """Move everything alive now to the permanent generation and collect
    young objects far less often; big blocks freed go back to the system
    (:func:`fix_mmap_threshold`)."""
    fix_mmap_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


MMAP_THRESHOLD = 1 << 20  # bytes: blocks this big or bigger are mapped, and unmapped when freed
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Serve every allocation of ``size`` bytes or more with its own mapping,
    given back to the system when freed (glibc ``mallopt(M_MMAP_THRESHOLD)``).

    glibc's default threshold is dynamic: the first time a mapped block is
    freed, the threshold rises to that block's size (up to 32 MiB), so later
    blocks up to that size come from the heap and, once freed, stay in the
    process as holes. A board's tables are such blocks (the dedup table
    reshaping at its retention, run merges, batch temporaries): the engine
    benchmark measured a one-time RssAnon step of ~20-28 MiB right after a
    board's dedup window filled, the whole of its "RSS growth with events"
    (docs/performance.md). A fixed threshold ends the adjustment. Called at
    the start of every server process and by :func:`tune`; returns whether it
    was set (False off glibc)."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, int(size)))


def release_memory() -> bool:
    """Collect, then hand the C allocator's free pages back to the system
    (glibc ``malloc_trim``): after a large one-off release, such as the
    shards dropping an archived board, freed blocks otherwise stay in the
    process's heap. Returns whether a trim ran (False off glibc)."""
    gc.collect()
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def _glibc():
    """glibc, when this process runs on it (``mallopt`` and ``malloc_trim`` are
    glibc's); None elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - AttributeError off glibc
        return libc
    except (OSError, AttributeError):
        return None
