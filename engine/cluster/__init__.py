"""The Ray shell: shard actors, the log server actor and the cluster client.

This package is the only part of FlowRank that imports Ray. Shard logic is
:class:`engine.runtime.shard.ShardCore`, routing is :class:`engine.router.router.Router`;
here they are only placed on actors and wired together.
"""

from engine.cluster.engine import ClusterEngine, init_ray

__all__ = ["ClusterEngine", "init_ray"]
