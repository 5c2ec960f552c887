"""Refusals at ``flowrank serve`` start, as one line an operator can act on.

Every way start-up can be refused ends the process with one line on stderr,
``flowrank: error: <what, naming the file or flag>; <what to do>``, and an
exit code per kind (the table below, also in the README). No traceback unless
``--debug`` is given. Anything not foreseen here is still one line (exit 1),
with a hint to rerun with ``--debug``.

The checks that can run before the engine starts (flags, keys file, friends
provider, the Ray address, the listen address) run first, so a mistake costs
no Ray start and no recovery. Refusals that only the engine can see (the data
directory locked by another process, a damaged event log) are mapped from its
exceptions by :func:`classify`.
"""

from __future__ import annotations

import contextlib
import errno
import re
import socket
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from engine.core.errors import LogCorruption, NotLeader, Overloaded, StorageUnavailable

from gateway.auth import KeyFileError
from gateway.settings import Settings

# Exit codes of `flowrank serve`, one per kind of refusal (README, "Start-up errors").
EXIT_UNEXPECTED = 1      # a failure this table does not foresee (rerun with --debug)
EXIT_USAGE = 2           # a bad command line: unknown option, a value out of range
EXIT_KEYS = 3            # --keys (or the generated keys.json): unreadable, bad JSON, unknown role, ...
EXIT_FRIENDS = 4         # --friends-file missing or not a JSON object; --friends-url not http(s)
EXIT_DATA_DIR_IN_USE = 5 # another FlowRank process holds <data-dir>/LOCK
EXIT_DATA_DIR = 6        # --data-dir cannot be created, opened or written
EXIT_LOG_CORRUPT = 7     # the event log is damaged before its tail (file and byte offset named)
EXIT_RAY = 8             # --ray-address: nothing answers there, or Ray refused the connection
EXIT_LISTEN = 9          # --host/--port: cannot listen there (address in use, unknown host, ...)
EXIT_LOG = 10            # --log: the database is unreachable, or another live node holds the log's lease

EXIT_CODES = {
    EXIT_UNEXPECTED: "unexpected start failure (rerun with --debug for the traceback)",
    EXIT_USAGE: "bad command line (an unknown option, a value out of range)",
    EXIT_KEYS: "keys file unreadable or invalid",
    EXIT_FRIENDS: "friends file or friends URL invalid",
    EXIT_DATA_DIR_IN_USE: "data directory in use by another FlowRank process",
    EXIT_DATA_DIR: "data directory cannot be created, opened or written",
    EXIT_LOG_CORRUPT: "event log damaged before its tail",
    EXIT_RAY: "Ray cluster unreachable at --ray-address",
    EXIT_LISTEN: "cannot listen on --host/--port",
    EXIT_LOG: "--log database unreachable, or another node holds its lease",
}

#: How long the ``--ray-address`` probe waits for a TCP connection (ray.init alone would retry for minutes).
RAY_PROBE_TIMEOUT_S = 5.0


class StartupError(Exception):
    """A refusal to start: one sentence for the operator and the exit code of its kind."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def report(err: BaseException, debug: bool = False, stream=None) -> int:
    """Print ``err`` as the one ``flowrank: error:`` line (after its traceback with ``debug``).

    Returns the exit code.
    """
    stream = sys.stderr if stream is None else stream
    if not isinstance(err, StartupError):
        err = classify(err, None)
    if debug:
        traceback.print_exception(err.__cause__ or err, file=stream)
    line = " ".join(err.message.split())  # one line, whatever the underlying message held
    print(f"flowrank: error: {line}", file=stream, flush=True)
    return err.exit_code


# ---------------------------------------------------------------- checks before the engine


def preflight(settings: Settings) -> None:
    """Checks that need no engine: friends provider and the Ray address (the keys
    file is read by :func:`gateway.auth.load_keystore`, mapped by :func:`classify`)."""
    check_friends(settings)
    if settings.standby and not settings.log_url:
        raise StartupError(EXIT_USAGE, "--standby follows a shared log: give it --log postgresql://… too")
    if settings.prune_log and settings.log_url:
        raise StartupError(EXIT_USAGE, "--prune-log with --log is not supported yet: a node that starts on an empty "
                                       "data directory replays its shards from the log's first record (their "
                                       "snapshots name journal files of the node that took them)")
    if settings.engine == "ray" and settings.ray_address:
        probe_ray_address(settings.ray_address)


def check_friends(settings: Settings) -> None:
    from gateway.friends import StaticFriends  # noqa: PLC0415

    if settings.friends_file:
        path = settings.friends_file
        try:
            StaticFriends.from_file(path)
        except FileNotFoundError:
            raise StartupError(EXIT_FRIENDS, f"--friends-file {path}: no such file; "
                                             "pass the path of a JSON object of player id -> friend ids") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(EXIT_FRIENDS, f"--friends-file {path}: cannot read it ({_reason(exc)}); "
                                             "check the path and its permissions") from exc
        except ValueError as exc:  # bad JSON, or JSON that is not an object
            raise StartupError(EXIT_FRIENDS, f"--friends-file {path}: {_reason(exc)}; it must hold a JSON "
                                             'object of player id -> list of friend ids, e.g. {"p-ava": ["p-ben"]}'
                               ) from exc
    if settings.friends_url and not re.match(r"^https?://[^/\s]+", settings.friends_url):
        raise StartupError(EXIT_FRIENDS, f"--friends-url {settings.friends_url!r}: not an http(s) URL; "
                                         "pass the base URL of the friends service, e.g. http://friends.internal")


def probe_ray_address(address: str, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Fail fast when nothing listens at ``host:port`` (``auto`` is left to Ray)."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StartupError(EXIT_USAGE, f"--ray-address {address!r}: expected 'auto' or host:port "
                                       "(the Ray head's GCS address, e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise StartupError(EXIT_RAY, f"--ray-address {address}: no Ray cluster answers there ({_reason(exc)}); "
                                     "start Ray on that machine (ray start --head) or fix the address, "
                                     "or omit --ray-address to run an embedded Ray") from exc


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """The listening address bound (not yet listening) before the engine starts,
    as uvicorn would bind it; handed to ``uvicorn.Server.serve(sockets=[...])``.

    The protocol is named (``IPPROTO_TCP``), as ``getaddrinfo`` names it for
    uvicorn: asyncio sets ``TCP_NODELAY`` on an accepted connection only when
    its socket says TCP. Without it, a keep-alive connection's response (head,
    then body: two writes) waits for the client's delayed ACK, 40 ms a request
    on Linux. ``TCP_NODELAY`` on the listener too: accepted sockets inherit it.

    ``reuse_port``: ``SO_REUSEPORT``, so the gateway workers of ``--workers N``
    each listen on the same port and the kernel spreads connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            hint = "another process listens there; stop it or pass another --port"
        elif isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            hint = "that address is not on this machine; pass one of its addresses, or 0.0.0.0 for all"
        elif exc.errno == errno.EACCES:
            hint = "ports below 1024 need privileges; pass a --port of 1024 or more"
        else:
            hint = "check --host and --port"
        raise StartupError(EXIT_LISTEN, f"cannot listen on {host}:{port} (--host/--port): "
                                        f"{_reason(exc)}; {hint}") from exc
    return sock


# ---------------------------------------------------------------- mapping what the start raised


@contextlib.contextmanager
def starting(settings: Settings) -> Iterator[None]:
    """Turn any exception raised while starting into a :class:`StartupError`."""
    try:
        yield
    except StartupError:
        raise
    except Exception as exc:  # noqa: BLE001 - every refusal becomes one line
        raise classify(exc, settings) from exc


def classify(exc: BaseException, settings: Settings | None) -> StartupError:
    """The :class:`StartupError` for an exception raised while starting."""
    data_dir = (settings.data_dir if settings else None) or "./flowrank-data"
    text = _reason(exc)
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, KeyFileError):
        flag = "--keys: " if settings and settings.keys_file else ""
        hint = ("check the path and its permissions" if "cannot read it" in text else
                "fix the file (its format and the four roles: docs/api.md §2)")
        return StartupError(EXIT_KEYS, f"{flag}{text}; {hint}")
    if isinstance(exc, NotLeader):
        return StartupError(EXIT_LOG, f"--log: {text}")
    if isinstance(exc, StorageUnavailable) and "database" in text:
        return StartupError(EXIT_LOG, f"--log: {text}; check the URL and that PostgreSQL runs there")
    if isinstance(exc, Overloaded) and "LOCK" in text:
        return StartupError(EXIT_DATA_DIR_IN_USE, f"--data-dir {data_dir} is in use: {text} Stop the other "
                                                  "`flowrank serve` on it, or pass another --data-dir")
    corruption = _log_corruption(exc)
    if corruption is not None:
        return StartupError(EXIT_LOG_CORRUPT, f"--data-dir {data_dir}: the event log is damaged: {corruption}; "
                                              "nothing was skipped or changed. Restore log/ and snapshots/ "
                                              "from a backup, or see docs/storage.md (torn tail vs corruption)")
    if isinstance(exc, OSError) and _inside(getattr(exc, "filename", None), data_dir):
        if Path(data_dir).exists() and not Path(data_dir).is_dir():
            text = "exists and is not a directory"
        return StartupError(EXIT_DATA_DIR, f"--data-dir {data_dir}: {text}; pass a directory this user "
                                           "can create and write")
    if isinstance(exc, ConnectionError) and settings is not None and settings.engine == "ray":
        where = settings.ray_address or "the embedded Ray"
        return StartupError(EXIT_RAY, f"--ray-address {where}: cannot connect to Ray ({text}); check that Ray "
                                      "runs there and that RAY_AUTH_MODE matches the cluster's")
    return StartupError(EXIT_UNEXPECTED, f"could not start: {type(exc).__name__}: {text} "
                                         "(rerun with --debug for the traceback)")


def _log_corruption(exc: BaseException) -> str | None:
    """The message of a LogCorruption, also when it comes back from a Ray actor."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, LogCorruption):
            return _reason(cur)
        cur = getattr(cur, "cause", None) or cur.__cause__ or cur.__context__
    m = re.search(r"LogCorruption: (log segment [^\n]*)", str(exc))  # an actor's creation failure, as text
    return m.group(1).strip() if m else None


def _inside(filename: object, directory: str) -> bool:
    """Whether an OSError's file is the data directory or lies under it."""
    if not isinstance(filename, (str, Path)):
        return False
    path, root = Path(filename).absolute(), Path(directory).absolute()
    return path == root or root in path.parents


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
