"""``flowrank serve --workers N``: N gateway processes in front of one engine.

One process (this supervisor) starts Ray (or joins ``--ray-address``), opens
the engine in the engine host actor (:mod:`engine.cluster.host_actor`), then
starts N gateway workers. Each worker is ``flowrank serve --engine-host NAME``
with the supervisor's other options: a Ray driver holding a
:class:`engine.runtime.remote.RemoteEngine`, listening on the same port with
``SO_REUSEPORT`` so the kernel spreads connections over the workers
(docs/http.md, "Several gateways").

* The port is bound here first (not listening: it takes no connections), so
  a port in use is refused before anything starts, and ``--port 0`` names one
  port for every worker.
* A worker that exits on its own is started again after a second, unless it
  failed within :data:`EARLY_EXIT_S` of its start: then the service stops
  with that worker's exit code (a refusal at start would repeat forever).
* SIGTERM or SIGINT: every worker gets SIGTERM and drains (uvicorn's graceful
  shutdown, ``--graceful-timeout``); then the engine host drains its queue,
  snapshots and stops; exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Sequence

from gateway import startup_errors
from gateway.runtime import webhook_config
from gateway.settings import Settings

EARLY_EXIT_S = 5.0
RESTART_DELAY_S = 1.0


def worker_argv(argv: Sequence[str], host_name: str, ray_address: str, port: int) -> list[str]:
    """A worker's command line: the supervisor's own, without ``--workers``, attached
    to the host ``host_name`` through ``ray_address`` on ``port`` (later options win)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--workers":
            skip = True
            continue
        if a.startswith("--workers="):
            continue
        out.append(a)
    return [sys.executable, "-m", "gateway", *out, "--engine-host", host_name, "--ray-address", ray_address,
            "--port", str(port)]


def engine_kwargs(settings: Settings, cache_dir: str | None = None) -> dict:
    """What ClusterEngine.open gets inside the host actor (the data directory made absolute:
    the actor's working directory is Ray's, not this process's); ``cache_dir``: the numba
    compile cache (engine.runtime.warm)."""
    return dict(
        cache_dir=cache_dir,
        data_dir=os.path.abspath(settings.data_dir or "./flowrank-data"),
        default_shards=settings.shards,
        n_shards=settings.n_shard_actors,
        dedup_retention=settings.dedup_retention,
        delta_retention=settings.delta_retention,
        snapshot_every_events=settings.snapshot_every_events,
        snapshot_every_seconds=settings.snapshot_every_seconds,
        prune_log=settings.prune_log,
        appends_in_flight=settings.appends_in_flight,
        webhooks=webhook_config(settings),
        erasure_deadline_s=settings.erasure_deadline_s,
        rank_mirror_rows=settings.rank_mirror_rows,
    )


async def supervise(settings: Settings, workers: int, argv: Sequence[str], graceful_timeout: float) -> int:
    import ray  # noqa: PLC0415

    from engine.cluster.engine import init_ray  # noqa: PLC0415
    from engine.cluster.host_actor import DEFAULT_NAME, find_host, start_host  # noqa: PLC0415
    from gateway.auth import load_keystore  # noqa: PLC0415
    from gateway.tokens import load_secret  # noqa: PLC0415

    with startup_errors.starting(settings):
        startup_errors.preflight(settings)
        _, keys_path = load_keystore(settings.keys, settings.keys_file, settings.data_dir, settings.log_url)  # once, here
        load_secret(settings.data_dir, settings.log_url)  # created once, here: every worker signs with the same secret
        sock = startup_errors.bind(settings.host, settings.port, reuse_port=True)
        port = sock.getsockname()[1]
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            started_ray = init_ray(settings.ray_address, dashboard=settings.ray_dashboard)
            attach = settings.engine_host is not None
            name = settings.engine_host or DEFAULT_NAME
            if attach:
                actor = find_host(name)
            else:
                try:
                    warming = time.monotonic()
                    actor = await start_host(engine_kwargs(settings, os.environ.get("NUMBA_CACHE_DIR")), name)
                    print(f"flowrank: engine host open and warm in {time.monotonic() - warming:.1f} s "
                          f"(compile cache {os.environ.get('NUMBA_CACHE_DIR') or 'numba default'})", flush=True)
                except ray.exceptions.RayTaskError as exc:  # a refusal inside the actor: classify the cause
                    raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
        except BaseException:
            sock.close()
            raise
        finally:
            for s, h in saved.items():
                if h is not None:
                    signal.signal(s, h)
    address = ray.get_runtime_context().gcs_address
    data = os.path.abspath(settings.data_dir) if settings.data_dir else "(memory)"
    print(f"flowrank: engine host {name!r} ready (data in {data}); starting {workers} gateway workers "
          f"on http://{settings.host}:{port}", flush=True)
    if keys_path is not None:
        print(f"flowrank: keys in {os.path.abspath(keys_path)}", flush=True)
    cmd = worker_argv(argv, name, address, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    code = 0
    procs: dict[int, tuple[asyncio.subprocess.Process, float]] = {}
    try:
        for i in range(workers):
            procs[i] = (await asyncio.create_subprocess_exec(*cmd), time.monotonic())
        while not stop.is_set():
            waits = {asyncio.ensure_future(p.wait()): i for i, (p, _) in procs.items()}
            stopping = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait([*waits, stopping], return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                if w not in done:
                    w.cancel()
            if stop.is_set():
                break
            stopping.cancel()
            for w in done:
                i = waits[w]
                p, born = procs[i]
                rc = p.returncode
                if time.monotonic() - born < EARLY_EXIT_S and rc != 0:
                    print(f"flowrank: gateway worker {p.pid} failed at start (exit {rc}); stopping", flush=True)
                    code = rc if rc and rc > 0 else startup_errors.EXIT_UNEXPECTED
                    stop.set()
                    break
                print(f"flowrank: gateway worker {p.pid} exited ({rc}); starting another", flush=True)
                await asyncio.sleep(RESTART_DELAY_S)
                procs[i] = (await asyncio.create_subprocess_exec(*cmd), time.monotonic())
    finally:
        for p, _ in procs.values():
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        for p, _ in procs.values():
            try:
                await asyncio.wait_for(p.wait(), graceful_timeout + 5)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        sock.close()
        if not attach:
            try:
                await actor.close.remote()  # drain, snapshot, stop the shard and log actors
            finally:
                ray.kill(actor)
        if started_ray:
            ray.shutdown()
    return code
