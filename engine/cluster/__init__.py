"""The Ray shell: shard actors, the log server actor and the cluster client.

This package is the only part of FlowRank that imports Ray. Shard logic is
:class:`engine.runtime.shard.ShardCore`, routing is :class:`engine.router.router.Router`;
here they are only placed on actors and wired together.

Its names load on first use: :mod:`engine.cluster.ray_start` is imported before
the rest, to start Ray while the gateway imports (``flowrank serve``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.cluster.engine import ClusterEngine, init_ray

__all__ = ["ClusterEngine", "init_ray"]


def __getattr__(name: str):
    if name in __all__:
        from engine.cluster import engine  # noqa: PLC0415

        return getattr(engine, name)
    raise AttributeError(f"module 'engine.cluster' has no attribute {name!r}")
