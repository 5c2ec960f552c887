"""The data directory's secret (docs/api.md §17): 32 random bytes in ``<data-dir>/erasure.key``.

It keys the hashes an erasure keeps (of the erased player's id, and of their events' ids for the
dedup table), so that without it those hashes link nothing to the ids. Created once (temp file,
fsync, rename, directory fsync); kept with the data directory, or, with ``--log postgresql://…``, in the
log's database, shared by every node (docs/api.md §19) (a backup without it loses the
redelivery check of erased players' events, nothing else).
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.log import shared_settings
from engine.log.places import is_database
from engine.log.segment_log import fsync_directory

NAME = "erasure.key"
SIZE = 32


def load_secret(data_dir: Path, log_url: str | None = None) -> bytes:
    """The directory's secret, made on first use; with a database log (``--log postgresql://…``) the
    log's, shared by every node (:func:`engine.log.shared_settings.erasure_key`)."""
    if is_database(log_url):
        return shared_settings.erasure_key(str(log_url), data_dir)
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
