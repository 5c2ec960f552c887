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
    young objects far less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def release_memory() -> bool:
    """Collect, then hand the C allocator's free pages back to the system
    (glibc ``malloc_trim``): after a large one-off release, such as the
    shards dropping an archived board, freed blocks otherwise stay in the
    process's heap. Returns whether a trim ran (False off glibc)."""
    gc.collect()
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False
