"""The data directory's secret (docs/api.md §17): 32 random bytes in ``<data-dir>/erasure.key``.

It keys the hashes an erasure keeps (of the erased player's id, and of their events' ids for the
dedup table), so that without it those hashes link nothing to the ids. Created once (temp file,
fsync, rename, directory fsync); kept with the data directory (a backup without it loses the
redelivery check of erased players' events, nothing else).
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.log.segment_log import fsync_directory

NAME = "erasure.key"
SIZE = 32


def load_secret(data_dir: Path) -> bytes:
    """The directory's secret, made on first use."""
    path = Path(data_dir) / NAME
    try:
        got = path.read_bytes()
        if len(got) == SIZE:
            return got
    except FileNotFoundError:
        pass
    secret = os.urandom(SIZE)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(str(data_dir))
    return secret
