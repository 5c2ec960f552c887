"""Where a node's log and snapshots live: files under ``--data-dir`` (the embedded default), or the
database of ``--log postgresql://…`` (docs/api.md §19, engine.log.pg_log). The one place that picks,
for the local service, the cluster engine and the log actor alike. psycopg is imported only for a
database log."""

from __future__ import annotations

from pathlib import Path

from engine.core.formats import LOG_FORMAT
from engine.log.segment_log import SegmentedFileLog
from engine.log.snapshots import FileSnapshotStore


def is_database(log_url: str | None) -> bool:
    """Whether ``log_url`` names a PostgreSQL log (``postgresql://`` or ``postgres://``)."""
    return bool(log_url) and str(log_url).split(":", 1)[0] in ("postgresql", "postgres")


def open_writer(root: Path, log_url: str | None, *, epoch: int | None = None, **file_options):
    """The log this process appends to: ``SegmentedFileLog`` under ``root/log``, or a ``PostgresLog``
    writing under ``epoch`` (None: take the log over now)."""
    if is_database(log_url):
        from engine.log.pg_log import PostgresLog  # noqa: PLC0415 - psycopg only for a database log

        keep = {k: v for k, v in file_options.items() if k in ("segment_bytes", "fault_hook", "record_format")}
        return PostgresLog.open(str(log_url), epoch=epoch, **keep)
    return SegmentedFileLog.open(root / "log", **({"record_format": LOG_FORMAT} | file_options))


def open_reader(root: Path, log_url: str | None):
    """A read-only view of the log another process of this node writes (the log actor's)."""
    if is_database(log_url):
        from engine.log.pg_log import PostgresLog  # noqa: PLC0415

        return PostgresLog.open(str(log_url), writer=False)
    from engine.log.follower import LogFollower  # noqa: PLC0415

    return LogFollower(root / "log", record_format=LOG_FORMAT)


def open_snapshots(root: Path, log_url: str | None, **options):
    """The snapshot store: files under ``root/snapshots``, or the log's database (every node reads
    what the active saved)."""
    if is_database(log_url):
        from engine.log.pg_log import PostgresSnapshotStore  # noqa: PLC0415

        return PostgresSnapshotStore(str(log_url), **options)
    return FileSnapshotStore(root / "snapshots", **options)
