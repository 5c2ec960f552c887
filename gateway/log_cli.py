"""``flowrank log import --data-dir DIR --log postgresql://…``: move a data directory's event log and
snapshots into an empty PostgreSQL log (:mod:`engine.log.pg_import`; docs/operations.md, "Running on
PostgreSQL"). Exit 0 when imported, 1 when refused or failed (nothing imported), 2 for a bad command line."""

from __future__ import annotations

import argparse
import sys

EXIT_REFUSED = 1


def register(sub, log_url_type) -> None:
    """The ``log`` command group on ``sub`` (the ``flowrank`` subparsers)."""
    log = sub.add_parser("log", help="the event log: import a data directory's log into PostgreSQL")
    lsub = log.add_subparsers(dest="log_command", required=True)
    imp = lsub.add_parser("import", help="copy --data-dir's event log and snapshots into an empty PostgreSQL log "
                                         "(one transaction; stop the server on that data directory first)")
    imp.add_argument("--data-dir", required=True, metavar="DIR", help="the data directory whose log/ and "
                     "snapshots/ are copied (left as they are)")
    imp.add_argument("--log", dest="log_url", required=True, type=log_url_type, metavar="postgresql://…",
                     help="the PostgreSQL log to fill (libpq URL, as for flowrank serve --log); it must be empty")
    imp.add_argument("--no-snapshots", action="store_true",
                     help="copy the log only (the first start then replays it from its start offset)")


def run(args: argparse.Namespace) -> int:
    from engine.core.errors import LogCorruption, StorageUnavailable, UnsupportedFormat  # noqa: PLC0415
    from engine.log.pg_import import ImportRefused, import_data_dir  # noqa: PLC0415 - psycopg only here

    try:
        report = import_data_dir(args.data_dir, args.log_url, snapshots=not args.no_snapshots)
    except (ImportRefused, StorageUnavailable, LogCorruption, UnsupportedFormat) as exc:
        print(f"flowrank log import: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"flowrank log import: {report.line()}", flush=True)
    for path in report.skipped_snapshots:
        print(f"flowrank log import: warning: snapshot {path} does not verify: not copied", file=sys.stderr)
    print(f"flowrank log import: start it with flowrank serve --data-dir {args.data_dir} --log … (the data "
          "directory keeps the keys, secrets, journals and archives; its log/ and snapshots/ are no longer read)",
          flush=True)
    return 0
