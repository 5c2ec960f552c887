"""``flowrank`` command line: ``serve`` (docs/api.md §1), ``warm`` (fill the compile
cache ahead of time: :mod:`engine.runtime.warm`), ``demo`` (engine.runtime.demo), and
the operator's commands over the HTTP API (``boards``, ``submit``, ``top``,
``player``, ``export``: :mod:`gateway.admin_cli`).

A refusal at start (bad flag, keys or friends file, data directory in use,
damaged log, unreachable Ray, port in use) is one ``flowrank: error: …`` line
and an exit code per kind (:mod:`gateway.startup_errors`); ``--debug`` adds
the traceback.

Graceful shutdown: on SIGTERM/SIGINT uvicorn stops accepting, live streams
are ended, in-flight requests drain, then ``await engine.close()`` and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
import threading
from typing import NoReturn, Sequence

from gateway import admin_cli, log_cli, logformat, startup_errors
from gateway.admin_cli import non_negative_int, positive_int
from gateway.cors import parse_origin
from gateway.settings import Settings

#: Seconds an idle keep-alive connection stays open. uvicorn's default of 5 s
#: races any client whose pool reuses a connection idle for about 5 s (a game
#: server posting every 5 s): the request goes out as the server closes, and
#: the client sees the connection reset (docs/http.md, "The connection and the loop").
#: Longer than the idle timeouts of common client pools and load balancers.
KEEP_ALIVE_S = 75.0


def _log_url(text: str) -> str:
    """``--log``: a PostgreSQL URL (docs/api.md §19)."""
    from engine.log.places import is_database  # noqa: PLC0415 - the log layer only

    if not is_database(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a PostgreSQL URL (postgresql://user@host:port/db); "
                                         "without --log the log stays in --data-dir")
    return text


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return v


def _origin(text: str) -> str:
    try:
        return parse_origin(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _webhook_url(text: str) -> str:
    from engine.runtime.webhooks import Target  # noqa: PLC0415

    try:
        Target(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}; pass the receiver's URL, e.g. https://game.example.com/flowrank") from None
    return text


def _secret_file(text: str) -> str:
    """A readable file whose bytes, less one trailing newline, are not empty (the webhook signing key)."""
    from engine.runtime.webhooks import load_or_create_secret  # noqa: PLC0415

    try:
        load_or_create_secret(None, text)
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{text}: no such file") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text}: cannot read it ({e.strerror or e})") from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: the file is empty; put the signing secret in it") from None
    return text


class _Parser(argparse.ArgumentParser):
    """A bad command line is one ``flowrank: error:`` line (exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(startup_errors.EXIT_USAGE, f"flowrank: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flowrank", description="FlowRank real-time leaderboards.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the HTTP gateway and the engine")
    d = Settings()
    s.add_argument("--data-dir", default=d.data_dir, help="event log and snapshots (default ./flowrank-data)")
    s.add_argument("--host", default=d.host)
    s.add_argument("--port", type=_port, default=d.port)
    s.add_argument("--shards", type=positive_int, default=None, help="default partitions for new boards")
    s.add_argument("--keys", dest="keys_file", default=None, help="keys JSON file (docs/api.md §2)")
    s.add_argument("--friends-file", default=None)
    s.add_argument("--friends-url", default=None)
    s.add_argument("--delta-retention", type=positive_int, default=d.delta_retention)
    s.add_argument("--dedup-retention", type=positive_int, default=d.dedup_retention)
    s.add_argument("--ray-address", default=None, help="'auto' or host:port; default: embedded local Ray")
    s.add_argument("--ray-dashboard", action="store_true",
                   help="start Ray's dashboard with the embedded Ray (default: a lean head without the dashboard, "
                        "its API server, the log monitor and the autoscaler monitor; `ray list` needs this flag)")
    s.add_argument("--cors-origin", dest="cors_origins", action="append", type=_origin, default=None,
                   metavar="ORIGIN", help="allow this browser origin ('*': any) on /v1 routes; repeatable")
    # extras (not in docs/api.md §1)
    s.add_argument("--engine", choices=("ray", "local"), default="ray",
                   help="ray: shard actors on Ray (default); local: every shard in this process, no Ray")
    s.add_argument("--workers", type=positive_int, default=1,
                   help="gateway processes on the port, in front of one engine host (default 1: the gateway "
                        "holds the engine itself); docs/http.md 'Several gateways'")
    s.add_argument("--engine-host", default=None, metavar="NAME",
                   help="be a gateway of the running engine host NAME (started by 'serve --workers N'; "
                        "with --ray-address on another machine) instead of opening an engine")
    s.add_argument("--shard-actors", type=positive_int, default=None, help="shard actors (default: CPUs Ray sees)")
    s.add_argument("--snapshot-every-events", type=positive_int, default=d.snapshot_every_events,
                   help="snapshot after this many events (default 1,000,000)")
    s.add_argument("--snapshot-every-seconds", type=float, default=d.snapshot_every_seconds,
                   help="or after this many seconds with new events (default 300)")
    s.add_argument("--prune-log", action="store_true",
                   help="delete log segments wholly before every snapshot (default: keep them for audit)")
    s.add_argument("--appends-in-flight", type=positive_int, default=d.appends_in_flight, metavar="N",
                   help="log appends the sequencer keeps in flight, acknowledged in log order (default 2; "
                        "1: one at a time); docs/performance.md 'Issue 29 item 4'")
    s.add_argument("--rank-mirror-rows", type=non_negative_int, default=d.rank_mirror_rows, metavar="N",
                   help="a board with at most N rows answers exact rank from a mirror of its rows beside the "
                        f"router, about 90 bytes a row (default {d.rank_mirror_rows:,}; 0: always ask the shard "
                        "actors); docs/http.md 'Reads'")
    s.add_argument("--live-window-ms", type=int, default=d.live_window_ms, help="live coalescing window")
    s.add_argument("--read-rate", type=float, default=d.read_rate_per_s, help="default read requests/s per key")
    s.add_argument("--write-rate", type=float, default=d.write_rate_per_s, help="default write requests/s per key")
    s.add_argument("--graceful-timeout", type=float, default=10.0, help="seconds to drain on SIGTERM")
    s.add_argument("--keep-alive", type=_positive_seconds, default=KEEP_ALIVE_S,
                   help=f"seconds an idle keep-alive connection stays open (default {KEEP_ALIVE_S:g}; uvicorn's 5 "
                        "races clients that reuse a connection after about 5 s idle)")
    s.add_argument("--log-format", choices=logformat.FORMATS, default="text",
                   help="json: one JSON object per log line on stderr (ts, level, logger, message, exception)")
    s.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="numba compile cache (default: $FLOWRANK_CACHE_DIR, else <data-dir>/.numba-cache); "
                        "every kernel is loaded or compiled before /readyz answers 200")
    s.add_argument("--webhook-url", type=_webhook_url, default=None, metavar="URL",
                   help="POST every award and board state change there as JSON (docs/api.md §16 'Webhooks'; "
                        "docs/operations.md 'Receiving webhooks')")
    s.add_argument("--webhook-secret-file", type=_secret_file, default=None, metavar="FILE",
                   help="sign webhooks with the bytes of FILE, less one trailing newline (default: "
                        "<data-dir>/webhook_secret, created on first start, mode 0600)")
    s.add_argument("--webhook-give-up-s", type=_positive_seconds, default=d.webhook_give_up_s, metavar="SECONDS",
                   help=f"retry a webhook until this long after it was created, then mark it failed "
                        f"(default {d.webhook_give_up_s:,.0f})")
    s.add_argument("--erasure-deadline-s", type=_positive_seconds, default=d.erasure_deadline_s, metavar="SECONDS",
                   help=f"an erased player's ids leave every file under the data directory within this long of "
                        f"the request (docs/api.md §17; default {d.erasure_deadline_s:,.0f})")
    s.add_argument("--log", dest="log_url", type=_log_url, default=None, metavar="postgresql://…",
                   help="keep the event log and snapshots in this PostgreSQL database (docs/api.md §19; libpq's "
                        "URL: several hosts with target_session_attrs=read-write find a promoted standby); "
                        "default: files under --data-dir")
    s.add_argument("--node", default=None, metavar="NAME",
                   help="this node's name among the nodes of one --log (default: <hostname>:<port>)")
    s.add_argument("--advertise-url", default=None, metavar="URL",
                   help="this node's base URL, named to clients in X-FlowRank-Leader (default http://<host>:<port>)")
    s.add_argument("--lease-s", type=_positive_seconds, default=d.lease_s, metavar="SECONDS",
                   help=f"with --log: another node may take over this long after the active node's last lease "
                        f"renewal (it renews every second; default {d.lease_s:g})")
    s.add_argument("--standby", action="store_true",
                   help="with --log: start as a hot standby: follow the log, answer reads at the version applied, "
                        "refuse writes (503 NOT_LEADER), take over once the active node's lease expires")
    s.add_argument("--debug", action="store_true", help="print the traceback of a refusal at start")
    w = sub.add_parser("warm", help="compile every kernel into the compile cache (an image build), then exit")
    w.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="the cache to fill (default: $FLOWRANK_CACHE_DIR, else <data-dir>/.numba-cache)")
    w.add_argument("--data-dir", default=d.data_dir, help="whose default cache to fill (default ./flowrank-data)")
    w.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="processes compiling at once on a cold cache (default: the CPU count)")
    sub.add_parser("demo", help="run the engine demo (engine.runtime.demo)")
    log_cli.register(sub, _log_url)
    admin_cli.register(sub)
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    d = Settings()
    return Settings(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        shards=args.shards,
        keys_file=args.keys_file,
        friends_file=args.friends_file,
        friends_url=args.friends_url,
        delta_retention=args.delta_retention,
        dedup_retention=args.dedup_retention,
        ray_address=args.ray_address,
        engine_host=args.engine_host,
        ray_dashboard=args.ray_dashboard,
        cors_origins=tuple(args.cors_origins or ()),
        cache_dir=args.cache_dir,
        engine=args.engine,
        n_shard_actors=args.shard_actors,
        snapshot_every_events=args.snapshot_every_events,
        snapshot_every_seconds=args.snapshot_every_seconds,
        prune_log=args.prune_log,
        appends_in_flight=args.appends_in_flight,
        rank_mirror_rows=args.rank_mirror_rows,
        live_window_ms=args.live_window_ms,
        read_rate_per_s=args.read_rate,
        read_burst=max(d.read_burst, 2 * args.read_rate),
        write_rate_per_s=args.write_rate,
        write_burst=max(d.write_burst, 2 * args.write_rate),
        webhook_url=args.webhook_url,
        webhook_secret_file=args.webhook_secret_file,
        webhook_give_up_s=args.webhook_give_up_s,
        erasure_deadline_s=args.erasure_deadline_s,
        log_url=args.log_url,
        node=args.node,
        advertise_url=args.advertise_url,
        lease_s=args.lease_s,
        standby=args.standby,
    )


async def serve(settings: Settings, graceful_timeout: float = 10.0, log_format: str = "text",
                keep_alive_s: float = KEEP_ALIVE_S) -> int:
    from gateway.auth import load_keystore  # noqa: PLC0415
    from gateway.tokens import load_secret  # noqa: PLC0415

    if log_format == "json" and settings.engine == "ray":
        import ray  # noqa: F401, PLC0415  # its import puts a handler on the "ray" logger; ray.init keeps
        logformat.adopt()  # whatever handlers it finds: route its records to the JSON handler first
    with startup_errors.starting(settings):  # every refusal: one line, its exit code
        startup_errors.preflight(settings)
        keys, keys_path = load_keystore(settings.keys, settings.keys_file, settings.data_dir, settings.log_url)
        token_secret = load_secret(settings.data_dir, settings.log_url)  # §12 <data-dir>/token_secret; §19 --log's
        # before the engine: fail fast; a gateway of an engine host shares its port with its sibling workers
        sock = startup_errors.bind(settings.host, settings.port, reuse_port=settings.engine_host is not None)
        if settings.engine == "ray" and settings.engine_host is None:
            # Ray starts on a thread of its own while this one imports the gateway and loads its kernels
            # (the engine's open waits for it): ~5 s of ray.init is mostly waiting on its daemons (issue 29)
            from engine.cluster import ray_start  # noqa: PLC0415

            ray_start.begin(settings.ray_address, settings.ray_dashboard)
    import uvicorn  # noqa: PLC0415

    from engine.core import gc_tuning  # noqa: PLC0415

    from gateway.app import create_app  # noqa: PLC0415
    from gateway.runtime import build_engine  # noqa: PLC0415
    from gateway.warm import Warmup  # noqa: PLC0415

    gc_tuning.fix_mmap_threshold()  # before the engine allocates: freed big blocks leave the process
    with startup_errors.starting(settings):
        # this process's kernels compile (or load) while Ray starts and the engine recovers (issue 29)
        warmup = Warmup()
        warmup.add_this_process(local_engine=settings.engine == "local" and settings.engine_host is None)
        try:
            engine = await build_engine(settings)
        except BaseException:
            sock.close()
            raise
    gc_tuning.tune()  # recovered state is long-lived: stop re-scanning it (engine/core/gc_tuning.py)
    warmup.add_engine(engine)  # the shard actors warm too, then serve logs how long it all took
    try:
        app = create_app(settings, engine, keys=keys, token_secret=token_secret, warmup=warmup)
        hub = app.state.gateway.hub

        class Server(uvicorn.Server):
            def handle_exit(self, sig, frame):  # end SSE streams so connections can drain
                hub.begin_shutdown()
                super().handle_exit(sig, frame)

            @contextlib.contextmanager
            def capture_signals(self):
                """uvicorn's, minus re-raising the captured signal once serving stops:
                that would kill this process (default SIGTERM action) before
                ``engine.close()`` drains and snapshots, and exit -15 instead of 0."""
                if threading.current_thread() is not threading.main_thread():
                    yield
                    return
                saved = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
                try:
                    yield
                finally:
                    for sig, handler in saved.items():
                        signal.signal(sig, handler)

        # json: logging is already configured (gateway.logformat); uvicorn must not install its own handlers
        extra = {} if log_format == "text" else {"log_config": None}
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                                timeout_graceful_shutdown=graceful_timeout, access_log=False,
                                timeout_keep_alive=keep_alive_s, **extra)
        server = Server(config)
        if settings.engine_host is None:  # connections made after the line below queue until uvicorn accepts
            # them, never refused (a worker of an engine host listens only once warm: see below)
            sock.listen(2048)
        print(f"flowrank: listening on http://{settings.host}:{sock.getsockname()[1]}", flush=True)
        print(f"flowrank: data in {os.path.abspath(settings.data_dir) if settings.data_dir else '(memory)'}",
              flush=True)
        if keys_path is not None:
            print(f"flowrank: keys in {os.path.abspath(keys_path)}", flush=True)
        if settings.engine_host is not None:
            # a worker of `serve --workers N` shares the port: it listens (takes connections) only once
            # warm, so no request lands on a cold sibling while the others answer /readyz 200
            await warmup.wait()
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        warmup.cancel()
        await engine.close()
    return 0


def _run(main_coro) -> int:
    """The service on uvloop (libuv's event loop; the standard loop if uvloop is
    missing). With httptools installed, uvicorn parses HTTP with it instead of
    h11: together about half the per-request cost of a hot read."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return asyncio.run(main_coro)
    return uvloop.run(main_coro)


def use_compile_cache(cache_dir: str | None, data_dir: str | None) -> str | None:
    """Point numba at the compile cache (engine.runtime.warm) in this process and, through the
    environment, in every process it starts (gateway workers, an embedded Ray's workers)."""
    from engine.runtime import warm  # noqa: PLC0415

    root = warm.resolve_cache_root(cache_dir, data_dir)
    if root is not None:
        os.environ[warm.ENV_CACHE_ROOT] = root
    return warm.use_cache_dir(warm.cache_dir_for(root))


def warm_command(cache_dir: str | None, data_dir: str | None, jobs: int | None = None) -> int:
    """``flowrank warm``: compile every kernel into the compile cache, then exit 0. A cold
    cache is compiled by ``jobs`` processes at once (engine.runtime.compile_share)."""
    from engine.runtime import warm  # noqa: PLC0415

    path = use_compile_cache(cache_dir, data_dir)
    from gateway.warm import start_compilers, warm_gateway  # noqa: PLC0415

    claims = warm.start_claims(path)
    helpers = start_compilers(claims, max(1, jobs or os.cpu_count() or 1) - 1)
    try:
        report = warm_gateway(local_engine=True, claims=claims)
    finally:
        for h in helpers:
            h.wait()
    left = [k for k in warm.unwarmed() if k not in warm.TEST_ONLY]
    if left:
        print(f"flowrank warm: error: kernels left cold: {', '.join(left)}", file=sys.stderr)
        return startup_errors.EXIT_UNEXPECTED
    warm.mark_complete(path)
    print(f"flowrank warm: {report.line()}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "admin", None) is not None:
        return admin_cli.run(args)
    if args.command == "demo":
        try:
            demo = importlib.import_module("engine.runtime.demo")
        except ImportError:
            print("flowrank demo: engine.runtime.demo is not available in this build", file=sys.stderr)
            return 2
        return int(demo.main() or 0)
    if args.command == "warm":
        return warm_command(args.cache_dir, args.data_dir, args.jobs)
    if args.command == "log":
        return log_cli.run(args)
    settings = settings_from_args(args)
    logformat.configure(args.log_format)
    use_compile_cache(settings.cache_dir, settings.data_dir)  # before any kernel module is imported
    if args.workers > 1 and settings.engine != "ray":
        return startup_errors.report(startup_errors.StartupError(
            startup_errors.EXIT_USAGE, "--workers needs the Ray engine (--engine ray): with --engine local the "
                                       "engine lives in one gateway process"), debug=False)
    try:
        if args.workers > 1:
            from gateway.workers import supervise  # noqa: PLC0415

            argv = list(sys.argv[1:] if argv is None else argv)
            return _run(supervise(settings, args.workers, argv, args.graceful_timeout))
        return _run(serve(settings, args.graceful_timeout, args.log_format, args.keep_alive))
    except startup_errors.StartupError as err:
        return startup_errors.report(err, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
