"""What every node of one log shares (docs/api.md §19 "Every node of one log answers alike").

With ``--log postgresql://…`` the keys (§2, the generated ``keys.json``), the token signing secret
(§12), the webhook secret (§16) and the erasure key (§17) live in the log's database, in
``<prefix>_settings (name text primary key, value bytea)``, one row each, named after the file they
replace in a file-log data directory (:data:`KEYS`, :data:`TOKEN_SECRET`, :data:`WEBHOOK_SECRET`,
:data:`ERASURE_KEY`). So a token minted on one node verifies on every node, a webhook is signed alike
by whichever node delivers it, an erased player's hashes match on every node, and a new node on an
empty data directory answers the same keys.

Each row is made once: :func:`settle` reads it; if absent it proposes a value and writes it with
``INSERT … ON CONFLICT DO NOTHING``, then reads back what is there. Of nodes starting at once, the
first insert wins and every node returns that one value. The proposal is the node's own file of
that name if it has one (a node that ran on this log before keeps its keys and tokens valid), else
a fresh random value. The database is the source of truth: a data directory's files are read only
to seed an empty row. ``keys.json`` is also written into the data directory (mode 0600) whenever it
differs from the database's, so ``flowrank serve`` prints where the keys are, as with the file log.

Without a database log none of this runs: the callers keep their files under ``--data-dir``
(:mod:`engine.log.secret`, ``gateway.tokens``, :mod:`engine.runtime.webhooks`, ``gateway.auth``).
psycopg is imported only here, and only when called.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable

from engine.core.errors import StorageUnavailable

KEYS = "keys.json"
TOKEN_SECRET = "token_secret"
WEBHOOK_SECRET = "webhook_secret"
ERASURE_KEY = "erasure.key"
ERASURE_KEY_SIZE = 32
TOKEN_SECRET_MIN = 32


def settle(log_url: str, name: str, propose: Callable[[], bytes], *, prefix: str = "flowrank") -> bytes:
    """The value of setting ``name`` in the log's database. If no node stored one yet, ``propose()``'s
    value is inserted (``ON CONFLICT DO NOTHING``) and what the table then holds is returned: the same
    bytes on every node, whoever inserted first. ``propose`` is called only when the row is absent.
    Creates the log's tables if needed. :class:`StorageUnavailable` if the database cannot be used.
    Two round trips when the row exists, four the first time."""
    import psycopg  # noqa: PLC0415 - only for a database log
    from psycopg import sql  # noqa: PLC0415

    from engine.log.pg_log import Names, connect, create_schema  # noqa: PLC0415

    names = Names(prefix)
    select = sql.SQL("SELECT value FROM {} WHERE name = %s").format(names.settings)
    try:
        with connect(log_url, autocommit=True) as conn:
            create_schema(conn, names)
            row = conn.execute(select, (name,)).fetchone()
            if row is None:
                value = propose()
                conn.execute(sql.SQL("INSERT INTO {} (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING")
                             .format(names.settings), (name, value))
                row = conn.execute(select, (name,)).fetchone()  # ours, or the one a racing node committed first
    except psycopg.Error as exc:
        raise StorageUnavailable(f"shared settings: the log's database refused {name!r}: {exc}".strip()) from exc
    if row is None:  # deleted between our insert and our read: an operator is resetting it; start again
        raise StorageUnavailable(f"shared settings: {name!r} vanished while being created; start again")
    return bytes(row[0])


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def mirror(path: Path, value: bytes) -> None:
    """Make ``path`` hold ``value`` (mode 0600), whole: a private temp file renamed over it; nothing is
    written when it holds ``value`` already."""
    if _read(path) == value:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.write(fd, value)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def keys_file(log_url: str, data_dir: str | os.PathLike, fresh: Callable[[], bytes],
              check: Callable[[Path], object]) -> Path:
    """``<data_dir>/keys.json`` holding the log's keys document. The first node proposes its own
    keys.json (``check(path)`` raises if it is not a valid keys file, as at a file-log start) or
    ``fresh()`` (one random key per role); every node then writes the database's document there."""
    path = Path(data_dir) / KEYS

    def propose() -> bytes:
        local = _read(path)
        if local is None:
            return fresh()
        check(path)
        return local

    mirror(path, settle(log_url, KEYS, propose))
    return path


def token_secret(log_url: str, data_dir: str | os.PathLike | None) -> bytes:
    """The token signing secret (docs/api.md §12) of the log: seeded from ``<data_dir>/token_secret``
    (hex) if this node has one, else 32 random bytes."""

    def propose() -> bytes:
        local = None if data_dir is None else _read(Path(data_dir) / TOKEN_SECRET)
        if local is None:
            return secrets.token_bytes(32)
        try:
            return bytes.fromhex(local.decode("ascii").strip())
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"{Path(data_dir or '.') / TOKEN_SECRET}: not a hex secret "
                             "(delete it: the log's database then makes the shared one)") from None

    value = settle(log_url, TOKEN_SECRET, propose)
    if len(value) < TOKEN_SECRET_MIN:
        raise ValueError(f"the log's {TOKEN_SECRET} setting is shorter than {TOKEN_SECRET_MIN} bytes")
    return value


def webhook_secret(log_url: str, data_dir: str | os.PathLike | None) -> bytes:
    """The webhook signing key (docs/api.md §16) of the log: seeded from ``<data_dir>/webhook_secret``
    (less one trailing newline) if this node has one, else 32 random bytes, hex-encoded."""

    def propose() -> bytes:
        raw = None if data_dir is None else _read(Path(data_dir) / WEBHOOK_SECRET)
        raw = raw[:-2] if raw and raw.endswith(b"\r\n") else raw[:-1] if raw and raw.endswith(b"\n") else raw
        return raw or secrets.token_hex(32).encode("ascii")

    value = settle(log_url, WEBHOOK_SECRET, propose)
    if not value:
        raise ValueError(f"the log's {WEBHOOK_SECRET} setting is empty")
    return value


def erasure_key(log_url: str, data_dir: str | os.PathLike | None) -> bytes:
    """The erasure key (docs/api.md §17) of the log: seeded from ``<data_dir>/erasure.key`` if this node
    has a whole one, else 32 random bytes."""

    def propose() -> bytes:
        local = None if data_dir is None else _read(Path(data_dir) / ERASURE_KEY)
        return local if local is not None and len(local) == ERASURE_KEY_SIZE else os.urandom(ERASURE_KEY_SIZE)

    value = settle(log_url, ERASURE_KEY, propose)
    if len(value) != ERASURE_KEY_SIZE:
        raise ValueError(f"the log's {ERASURE_KEY} setting is not {ERASURE_KEY_SIZE} bytes")
    return value


__all__ = ["ERASURE_KEY", "KEYS", "TOKEN_SECRET", "WEBHOOK_SECRET", "erasure_key", "keys_file", "mirror", "settle",
           "token_secret", "webhook_secret"]
