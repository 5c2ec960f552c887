"""The engine host as a Ray actor: one engine, any number of gateways.

``flowrank serve --workers N`` starts one :class:`EngineHostActor` (named, so
gateways started later, on this host or others with ``--ray-address``, find
it) and N gateway processes that each reach it through a
:class:`engine.runtime.remote.RemoteEngine` over :class:`RayChannel`. The actor
opens a :class:`engine.cluster.ClusterEngine` inside itself: the router runs
here and owns the shard and log actors, exactly as it does inside a lone
gateway. Each method forwards to :class:`engine.runtime.host.EngineHost` in a
line. An async actor: calls run concurrently on its loop, as the gateway's
requests did; nothing relies on the order of calls (RAY_NOTES: async actors
do not keep it), the router sequences writes itself.
"""

from __future__ import annotations

import logging
import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from engine.core.errors import Overloaded

#: Gateways find the host by this name in this namespace (``--engine-host NAME``).
NAMESPACE = "flowrank"
DEFAULT_NAME = "flowrank-engine"
#: No restarts: a restarted host would be a second router over the same log
#: while the first one's shard actors live on; the supervisor restarts the whole
#: service instead. No task events (engine.cluster.actors: the GCS would grow).
HOST_OPTIONS = dict(num_cpus=0, max_restarts=0, max_concurrency=10_000, enable_task_events=False)


class EngineHostActor:
    async def open(self, engine_kwargs: dict, warm_kernels: bool = True) -> int:
        """Open the engine (recovery included) and warm every kernel of this process
        and of the shard actors (engine.runtime.warm: the gateways start once it is ready);
        this process's pid. ``warm_kernels=False``: no warm round (each kernel then loads or
        compiles on its first call), for tests that start many engines and test no warming."""
        import asyncio  # noqa: PLC0415

        from engine.runtime import warm  # noqa: PLC0415

        from engine.core import gc_tuning
        from engine.cluster.engine import ClusterEngine  # noqa: PLC0415
        from engine.runtime.host import EngineHost  # noqa: PLC0415

        cache_dir = warm.use_cache_dir(engine_kwargs.get("cache_dir"))  # before recovery runs a kernel
        gc_tuning.fix_mmap_threshold()
        # a cold cache: this process and the shard actors share its compile (engine.runtime.compile_share)
        claims = warm.start_claims(cache_dir) if warm_kernels else None
        here = asyncio.ensure_future(asyncio.to_thread(warm.serving_warm, claims)) if warm_kernels else None
        self.engine = await ClusterEngine.open(**engine_kwargs)  # (the warm round above runs while it recovers)
        try:
            if here is not None:
                await asyncio.gather(here, self.engine.warm(claims))
                warm.mark_complete(cache_dir)
        except Exception:  # never a reason not to serve: the kernels then compile on first use, as before
            logging.getLogger("flowrank.host").exception("warming the engine host or its shard actors failed")
        # the boards' versions for the gateways on this machine, next to the log (engine.runtime.version_table)
        self.host = EngineHost(self.engine, version_path=os.path.join(engine_kwargs["data_dir"], "versions"))
        gc_tuning.tune()
        return os.getpid()

    async def call(self, payload: bytes) -> bytes:
        return await self.host.call(payload)

    async def feed(self, gateway: str, after: int, timeout_s: float) -> bytes:
        return await self.host.feed(gateway, after, timeout_s)

    async def close(self) -> None:
        """Drain, snapshot and stop the engine (the shard and log actors too)."""
        await self.host.close()
        await self.engine.close()

    def pid(self) -> int:
        return os.getpid()

    def shard_actors(self) -> list:
        """The engine's shard actor handles, in order: a gateway's read replica calls them directly."""
        return list(self.engine.shards)


RemoteEngineHost = ray.remote(EngineHostActor)


async def start_host(engine_kwargs: dict, name: str = DEFAULT_NAME, warm_kernels: bool = True):
    """Create the named host actor on this node and open its engine; the actor handle.
    ``warm_kernels``: see :meth:`EngineHostActor.open`."""
    here = ray.get_runtime_context().get_node_id()
    actor = RemoteEngineHost.options(
        name=name, namespace=NAMESPACE,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),  # the data directory is here
        **HOST_OPTIONS,
    ).remote()
    await actor.open.remote(engine_kwargs, warm_kernels)
    return actor


def find_host(name: str = DEFAULT_NAME):
    """The running host actor called ``name``; ValueError when there is none."""
    return ray.get_actor(name, namespace=NAMESPACE)


async def remote_engine(actor):
    """A gateway's :class:`engine.runtime.remote.RemoteEngine` to the host ``actor``,
    with a read replica over the host's shard actors."""
    from engine.cluster.engine import RayShards  # noqa: PLC0415
    from engine.runtime.remote import RemoteEngine  # noqa: PLC0415

    shards = await actor.shard_actors.remote()
    return await RemoteEngine(RayChannel(actor), replica_transport=RayShards(shards)).connect()


class RayChannel:
    """:class:`engine.runtime.remote.Channel` over the host actor."""

    def __init__(self, actor):
        self.actor = actor

    async def call(self, payload: bytes) -> bytes:
        try:
            return await self.actor.call.remote(payload)
        except ray.exceptions.RayError as exc:
            raise Overloaded(f"The engine host is unreachable ({type(exc).__name__}); retry shortly.",
                             retry_after=1) from exc

    async def feed(self, gateway: str, after: int, timeout_s: float) -> bytes:
        return await self.actor.feed.remote(gateway, after, timeout_s)
