"""How ``flowrank serve`` builds its engine: the one place that picks the
EngineClient implementation.

``--engine-host NAME`` (a worker of ``flowrank serve --workers N``): a
:class:`engine.runtime.remote.RemoteEngine` to that engine host actor.
Default: :class:`engine.cluster.ClusterEngine` — shard actors on Ray, an
embedded local Ray instance when no ``--ray-address`` is given, joining the
cluster otherwise. ``--engine local`` keeps every shard in this process
(:class:`engine.runtime.local.LocalService`), with no Ray at all. Imports are lazy
so the gateway module imports without starting anything.
"""

from __future__ import annotations

import os
import signal
import socket

from engine.router.api import EngineClient

from gateway.settings import Settings


async def build_engine(settings: Settings) -> EngineClient:
    """Open the engine for ``settings``; the caller must ``await engine.close()``.

    Restores the process's SIGTERM/SIGINT handlers afterwards (``ray.init``
    installs its own, which would defeat uvicorn's graceful shutdown).
    """
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if settings.engine_host is not None:  # a gateway worker: the engine runs in the host actor
            from engine.cluster.engine import init_ray  # noqa: PLC0415
            from engine.cluster.host_actor import find_host, remote_engine  # noqa: PLC0415

            init_ray(settings.ray_address)
            engine = await remote_engine(find_host(settings.engine_host))
        elif settings.engine == "local":
            from engine.runtime.local import LocalService  # noqa: PLC0415

            engine = await LocalService.open(
                data_dir=settings.data_dir,
                default_shards=settings.shards or os.cpu_count() or 1,
                n_shards=settings.n_shard_actors or os.cpu_count() or 1,
                dedup_retention=settings.dedup_retention,
                delta_retention=settings.delta_retention,
                snapshot_every_events=settings.snapshot_every_events,
                snapshot_every_seconds=settings.snapshot_every_seconds,
                prune_log=settings.prune_log,
                appends_in_flight=settings.appends_in_flight,
                webhooks=webhook_config(settings),
                erasure_deadline_s=settings.erasure_deadline_s,
                rank_mirror_rows=settings.rank_mirror_rows,
                log_url=settings.log_url,
                identity=node_identity(settings),
                standby=settings.standby,
            )
        else:
            from engine.cluster import ClusterEngine  # noqa: PLC0415

            engine = await ClusterEngine.open(
                data_dir=settings.data_dir or "./flowrank-data",
                default_shards=settings.shards,
                n_shards=settings.n_shard_actors,
                dedup_retention=settings.dedup_retention,
                delta_retention=settings.delta_retention,
                ray_address=settings.ray_address,
                snapshot_every_events=settings.snapshot_every_events,
                snapshot_every_seconds=settings.snapshot_every_seconds,
                prune_log=settings.prune_log,
                appends_in_flight=settings.appends_in_flight,
                ray_dashboard=settings.ray_dashboard,
                cache_dir=os.environ.get("NUMBA_CACHE_DIR"),  # the shard actors' compile cache (engine.runtime.warm)
                webhooks=webhook_config(settings),
                erasure_deadline_s=settings.erasure_deadline_s,
                rank_mirror_rows=settings.rank_mirror_rows,
                log_url=settings.log_url,
                identity=node_identity(settings),
                standby=settings.standby,
            )
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    return engine


def webhook_config(settings: Settings):
    """The engine's webhook settings (docs/api.md §16): None without ``--webhook-url``."""
    if settings.webhook_url is None:
        return None
    from engine.runtime.outbox_feed import WebhookConfig  # noqa: PLC0415

    return WebhookConfig(settings.webhook_url, settings.webhook_secret_file, settings.webhook_give_up_s,
                         settings.log_url)


def node_identity(settings: Settings):
    """This node's name, advertised URL and lease on a shared log (docs/api.md §19)."""
    from engine.runtime.leadership import NodeIdentity  # noqa: PLC0415

    url = settings.advertise_url or f"http://{settings.host}:{settings.port}"
    return NodeIdentity(node=settings.node or f"{socket.gethostname()}:{settings.port}", advertise_url=url,
                        lease_s=settings.lease_s)
