"""Child process for tests/service/test_crash.py (run as a script, then SIGKILLed).

Usage: crash_child.py DATA_DIR POINT SEED

Opens a file-backed LocalService (3 shards), creates three boards (every
policy, 1 and 3 partitions), then runs 3 concurrent submitters sending
batches from ``random.Random(SEED)`` (heavy ties, redeliveries, id
conflicts). After each ``submit`` returns it prints one line
``ACK <event_id>:<player_id>:<outcome> ...`` (flushed). It snapshots every
few batches. At POINT it prints ``AT <POINT>`` and blocks forever so the
parent can SIGKILL it there:

* ``after_write_before_fsync``: log fault hook, before an fsync of the log;
* ``after_fsync_before_apply``: router seam, batch durable, no shard applied it;
* ``mid_snapshot``: snapshot file write of shard-1 (the router's new snapshot is already saved);
* ``mid_rename``: between the snapshot temp file's fsync and its rename;
* ``after_rename``: after the rename, before the directory fsync;
* ``two_in_flight``: log fault hook, an fsync of the log while two cycles' appends are
  in flight (issue 29 item 4; the submitters pause 0-3 ms between batches so cycles overlap);
* ``random``: never blocks (the parent kills it after a random delay).
"""

import asyncio
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from engine.core.model import BoardSpec, Policy, ScoreEvent  # noqa: E402
from engine.runtime.local import LocalService  # noqa: E402

BOARDS = [
    BoardSpec("c:best", Policy.BEST_SCORE, shards=3),
    BoardSpec("c:cum", Policy.CUMULATIVE, shards=1),
    BoardSpec("c:fast", Policy.FASTEST_TIME, shards=3, max_plausible_time_ms=50),
]
ARM_AFTER_BATCHES = 12  # plus 0-39 more, from the seed


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def block(point: str) -> None:
    say(f"AT {point}")
    while True:
        time.sleep(3600)


async def main(data_dir: str, point: str, seed: int) -> None:
    rng = random.Random(seed)
    armed = [False]
    arm_after = ARM_AFTER_BATCHES + rng.randrange(40)

    def fault_hook(op, path):
        if not armed[0]:
            return
        if point == "after_write_before_fsync" and op == "fsync" and path.endswith(".log"):
            block(point)
        if point == "two_in_flight" and op == "fsync" and path.endswith(".log"):
            if len(svc.router.sequencer._appending) >= 2:
                block(point)
            time.sleep(0.003)  # a slower disk: the next cycle is decided and sent meanwhile
        if point == "mid_snapshot" and op == "snapshot.write" and "shard-1" in path:
            block(point)
        if point == "mid_rename" and op == "snapshot.rename" and "shard-1" in path:
            block(point)
        if point == "after_rename" and op == "snapshot.dirsync":
            block(point)

    svc = await LocalService.open(data_dir=data_dir, n_shards=3, fault_hook=fault_hook,
                                  snapshot_every_events=10**9, snapshot_every_seconds=10**9)

    def after_append(first, records):
        if armed[0] and point == "after_fsync_before_apply":
            block(point)

    svc.router.hooks["after_append"] = after_append
    for spec in BOARDS:
        await svc.create_board(spec)
    sent: list[ScoreEvent] = []
    counter = [0]
    batches = [0]
    snapshots = [0]  # armed only after two complete snapshots: recovery has an older one to mix with

    def event() -> ScoreEvent:
        roll = rng.random()
        if sent and roll < 0.15:
            return rng.choice(sent)
        if sent and roll < 0.2:
            old = rng.choice(sent)
            return ScoreEvent(old.board_id, old.event_id, old.player_id, old.value + 1, old.achieved_at, old.submitted_at)
        counter[0] += 1
        spec = rng.choice(BOARDS)
        t = rng.randrange(5)
        ev = ScoreEvent(spec.board_id, f"e{counter[0]}", f"p{rng.randrange(15)}", rng.randrange(-2, 60), t,
                        t + rng.randrange(2))
        sent.append(ev)
        return ev

    pauses = random.Random(seed + 1)  # its own stream: the events stay the seed's

    async def submitter():
        while True:
            await asyncio.sleep(pauses.uniform(0, 0.003))  # out of step: cycles overlap (two appends in flight)
            events = [event() for _ in range(rng.randrange(1, 25))]
            results = await svc.submit(events)
            say("ACK " + " ".join(f"{e.event_id}:{e.player_id}:{r.outcome.value}" for e, r in zip(events, results)))
            batches[0] += 1
            if batches[0] >= arm_after and snapshots[0] >= 2:
                armed[0] = True
            await asyncio.sleep(0)

    async def snapshotter():  # a snapshot every ~20 ms once some batches are in
        while True:
            await asyncio.sleep(0.02)
            if batches[0] >= 4:
                await svc.snapshot()
                snapshots[0] += 1

    await asyncio.gather(submitter(), submitter(), submitter(), snapshotter())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
