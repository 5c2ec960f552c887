"""Child process: a board over shard actors on a 3-node ray.cluster_utils.Cluster;
remove a node mid-ingest; report what survived as JSON on stdout.

Runs outside pytest's session Ray (a Cluster needs its own GCS).
"""

from __future__ import annotations

import asyncio
import shutil
import json
import os
import random
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


async def main(data_dir: str) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from engine.cluster import ClusterEngine
    from engine.core.errors import Overloaded
    from engine.core.model import BoardSpec, Policy, ScoreEvent

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                               "health_check_failure_threshold": 3},
        },
    )
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    out: dict = {}
    try:
        # SPREAD is best effort: a fresh worker node may not be in the scheduler's view yet and
        # every shard actor lands on the head (seen once in CI). Open again until a worker hosts one.
        for attempt in range(5):
            eng = await ClusterEngine.open(data_dir=data_dir, n_shards=3)
            placed = await asyncio.gather(*(s.node_id.remote() for s in eng.shards))
            if any(w.node_id in placed for w in workers):
                break
            await eng.close()
            shutil.rmtree(data_dir)  # nothing was written: the next open starts empty, as this one did
            await asyncio.sleep(1.0)
        out["opens"] = attempt + 1
        board = "g:m:s:multi"
        await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=3))
        rnd = random.Random(5)
        events = [ScoreEvent(board, f"m{i}", f"p{rnd.randrange(500)}", rnd.randrange(1000), rnd.randrange(100), 0)
                  for i in range(3000)]
        stats = await asyncio.gather(*(s.stats.remote() for s in eng.shards))
        nodes = await asyncio.gather(*(s.node_id.remote() for s in eng.shards))
        # Remove a worker node that hosts a shard actor.
        victim = next(w for w in workers if w.node_id in nodes)
        out["victim_hosted"] = nodes.count(victim.node_id)
        acked, failed = [], 0
        for i in range(0, len(events), 150):
            if i == 1050:
                cluster.remove_node(victim, allow_graceful=False)
                out["removed_node"] = True
            if i == 1500:  # keep ingesting while Ray notices the loss and moves the actor
                for _ in range(120):
                    if not any(n["NodeID"] == victim.node_id and n["Alive"] for n in ray.nodes()):
                        break
                    await asyncio.sleep(0.25)
            for attempt in range(40):
                try:
                    results = await eng.submit(events[i:i + 150])
                    acked.extend(r.event_id for r in results)
                    break
                except Overloaded:
                    failed += 1
                    await asyncio.sleep(0.5)
        out["acked"] = acked
        out["failed_attempts"] = failed
        out["top"] = [[e.player_id, e.value, e.achieved_at] for e in (await eng.top(board, 0, 1000)).entries]
        out["checksum"] = (await eng.checksum(board)).checksum
        out["pids_before"] = [st["pid"] for st in stats]
        out["pids_after"] = await eng.shard_pids()
        await eng.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
