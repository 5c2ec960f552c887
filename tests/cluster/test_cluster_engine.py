"""The Ray layer: seed scenarios, shard equivalence and a killed shard actor."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import tempfile

import pytest

from engine.cluster import ClusterEngine
from engine.core.errors import Overloaded, PlayerNotFound
from engine.log import SegmentedFileLog
from engine.core import records as R
from engine.core.model import BoardSpec, BoardState, Invalidation, Policy, ScoreEvent
from engine.runtime.local import LocalService
from tests import seed_scenarios as seeds
from tests.client_driver import ClientDriver
from tests.service.helpers import track_appends
from tests.engine import oracle

pytestmark = pytest.mark.cluster
DATA = seeds.load()


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.mark.parametrize("test_id", seeds.scenario_ids())
def test_seed_scenarios_on_ray(ray_session, loop, tmp_path, test_id):
    scenario = next(s for s in DATA["scenarios"] if s["test"] == test_id)
    eng = loop.run_until_complete(ClusterEngine.open(data_dir=str(tmp_path), n_shards=2))
    try:
        driver = ClientDriver(loop, eng, scenario.get("friends", {}), board_shards=2)
        seeds.load_initial(driver, DATA)
        assert seeds.run_scenario(driver, scenario) == len(scenario["steps"])
    finally:
        loop.run_until_complete(eng.close())


def _replayed_from_the_log(loop, tmp_path, boards) -> dict:
    """Each board's checksum after a restart from the whole log alone (its snapshots removed):
    what a replay through the one apply path makes of it."""
    import shutil

    shutil.rmtree(tmp_path / "snapshots", ignore_errors=True)

    async def replay():
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
        try:
            return {b: await svc.checksum(b) for b in boards}
        finally:
            await svc.close()

    return loop.run_until_complete(replay())


def _workload(seed: int, board: str):
    rnd = random.Random(seed)
    events = [ScoreEvent(board, f"e{i}", f"p{rnd.randrange(60)}", rnd.randrange(-5, 20), rnd.randrange(8), rnd.randrange(8),
                         b'{"i":%d}' % i if i % 3 else b"")  # metadata (docs/api.md §13) on two events in three
              for i in range(600)]
    events += [rnd.choice(events) for _ in range(30)]
    rnd.shuffle(events)
    invalid = rnd.sample([e.event_id for e in events], 5)
    return events, invalid


async def _snapshot_of(client, board: str, events, invalid):
    for i in range(0, len(events), 97):
        await client.submit(events[i:i + 97])
    for eid in invalid:
        try:
            await client.invalidate(Invalidation(board, eid))
        except Exception:
            pass
    players = sorted({e.player_id for e in events})
    views = []
    for pid in players:
        try:
            v = await client.player(board, pid)
            views.append((pid, v.rank, v.value, v.status.value, v.metadata))
        except PlayerNotFound:  # every event of theirs was rejected (e.g. invalid timing)
            views.append((pid, None))
    ranked = [v[0] for v in views if len(v) > 1 and v[1]]
    around = [(e.rank, e.player_id, e.metadata)
              for e in (await client.around(board, ranked[len(ranked) // 2], 3)).entries]
    return {
        "top": [(e.rank, e.player_id, e.value, e.metadata) for e in (await client.top(board, 0, 1000)).entries],
        "views": views, "around": around,
        "subset": [(e.rank, e.player_id, e.metadata)
                   for e in (await client.ranked_subset(board, players[::3])).entries],
        "checksum": (await client.checksum(board)).checksum,
        "version": (await client.board(board)).version,
    }


@pytest.mark.parametrize("policy", list(Policy))
def test_ray_shards_equal_local_single_shard(ray_session, loop, tmp_path, policy):
    board = "g:m:s:eq"
    events, invalid = _workload(hash(policy.value) % 1000, board)

    async def run_ray():
        eng = await ClusterEngine.open(data_dir=str(tmp_path / "ray"), n_shards=3)
        try:
            await eng.create_board(BoardSpec(board, policy, shards=4, max_plausible_time_ms=7))
            return await _snapshot_of(eng, board, events, invalid)
        finally:
            await eng.close()

    async def run_local():
        svc = await LocalService.open(data_dir=None, n_shards=1)
        try:
            await svc.create_board(BoardSpec(board, policy, shards=1, max_plausible_time_ms=7))
            return await _snapshot_of(svc, board, events, invalid)
        finally:
            await svc.close()

    ray, local = loop.run_until_complete(run_ray()), loop.run_until_complete(run_local())
    assert ray == local
    assert any(t[3] for t in local["top"])  # rows with metadata came back


def test_killed_shard_actor_loses_no_acknowledged_event(ray_session, loop, tmp_path):
    board = "g:m:s:kill"
    rnd = random.Random(11)
    events = [ScoreEvent(board, f"k{i}", f"p{rnd.randrange(300)}", rnd.randrange(1000), rnd.randrange(100), 0)
              for i in range(6000)]

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        acked, failed = [], 0
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=2))
            pids = await eng.shard_pids()
            for i in range(0, len(events), 200):
                if i == 2000:
                    os.kill(pids[0], signal.SIGKILL)  # mid-ingest crash of one shard process
                try:
                    results = await eng.submit(events[i:i + 200])
                    acked.extend(r.event_id for r in results)
                except Overloaded:
                    failed += 1
            assert (await eng.shard_pids())[0] != pids[0], "the shard actor restarted in a new process"
            before = await eng.checksum(board)
            top = [(e.player_id, e.value) for e in (await eng.top(board, 0, 1000)).entries]
        finally:
            await eng.close()
        return acked, failed, before, top

    acked, failed, before, top = loop.run_until_complete(go())
    assert len(acked) >= len(events) - 200 * failed
    # Every acknowledged event is in the log exactly once; the ranking equals
    # the oracle over the durable events; a fresh replay gives the same checksum.
    with SegmentedFileLog.open(tmp_path / "log") as event_log:
        scores = [ev for _, rec in event_log.read_from(0) for ev, _ in R.logged_events(rec)]
    ids = [e.event_id for e in scores]
    assert all(ids.count(a) == 1 for a in set(acked)) and set(acked) <= set(ids)
    rows = oracle.final_rows(Policy.BEST_SCORE, scores)
    assert [p for p, _ in top] == oracle.ranking(Policy.BEST_SCORE, rows)

    assert _replayed_from_the_log(loop, tmp_path, [board]) == {board: before}


async def _reads(client, board: str, players) -> dict:
    views = {}
    for pid in players:
        try:
            views[pid] = await client.player(board, pid, ties=True)
        except PlayerNotFound:
            views[pid] = None
    ranked = [p for p, v in views.items() if v is not None and v.rank]
    return {
        "info": (await client.board(board)).size, "views": views,
        "top": await client.top(board, 0, 1000, ties=True),
        "around": await client.around(board, ranked[len(ranked) // 2], 3, ties=True),
        "subset": await client.ranked_subset(board, players[::3]),
        "checksum": await client.checksum(board),
        "export": [(c.version, e) async for c in client.export(board, page_rows=50) for e in c.entries()],
        "history": {pid: await client.history(board, pid) for pid in players},
    }


def test_archived_board_reads_the_same_through_ray_shard_actors(ray_session, loop, tmp_path):
    """docs/api.md §13, archive: the Ray shard actors drop the board's rows; every
    read answers from the archive as before, also after a restart, each
    player's history included (the journals sent through Ray in chunks)."""
    board = "g:m:s:arch"
    events, invalid = _workload(21, board)
    players = sorted({e.player_id for e in events})

    async def first():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=3)
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=4))
            await _snapshot_of(eng, board, events, invalid)
            before = await _reads(eng, board, players)
            eng.router.cfg.history_chunk_rows = 64  # several chunks per partition through the actors
            for s in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
                await eng.set_state(board, s)
            rows = [(await s.stats.remote())["rows"] for s in eng.shards]
            assert all(board not in r for r in rows), rows
            return before, await _reads(eng, board, players)
        finally:
            await eng.close()

    async def again():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=3)
        try:
            return await _reads(eng, board, players)
        finally:
            await eng.close()

    before, after = loop.run_until_complete(first())
    assert sum(len(h) for h in before["history"].values()) >= len(events)  # read from the archive through Ray
    assert any(h.invalidated for hs in before["history"].values() for h in hs)
    assert after == before
    assert loop.run_until_complete(again()) == before

def test_shard_rows_are_current_after_refresh_stats(ray_session, loop, tmp_path):
    """/metrics awaits refresh_stats() before a scrape: rows written (and acknowledged) just before are
    counted, without waiting for the 2 s background refresh."""
    board = "g:m:s:rows"

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=2))
            for round_ in range(1, 6):
                await eng.submit([ScoreEvent(board, f"r{round_}-{i}", f"p{round_}-{i}", i, 1, 1) for i in range(40)])
                await eng.refresh_stats()
                stats = eng.stats()
                assert sum(stats["shard_rows"].values()) == 40 * round_, (round_, stats["shard_rows"])
                assert stats["histograms"]["fsync_seconds"].count >= round_
        finally:
            await eng.close()



def test_scheduled_close_through_ray_shards_survives_a_restart(ray_session, loop, tmp_path):
    """The Ray engine runs the same router: a close that falls due freezes the
    board at one log position (before: applied, after: held), and a restart
    after the finalize time finalizes it at start. Fake wall clock."""
    from engine.core.model import Outcome

    board = "g:solo:S1:ray"
    now = {"ms": 1_000_000}

    def clock() -> int:
        return now["ms"]

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2, wall_clock=clock)
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=2, closes_at=2_000_000,
                                             finalize_after_s=60))
            before = await eng.submit([ScoreEvent(board, "e1", "p1", 5, 1, 1)])
            now["ms"] = 2_000_000
            await eng.router.close_due()
            after = await eng.submit([ScoreEvent(board, "e2", "p2", 7, 1, 1)])
            assert [before[0].outcome, after[0].outcome] == [Outcome.APPLIED_FIRST_SCORE, Outcome.HELD_FOR_CORRECTION]
            info = await eng.next_season(board, "S2", None)
            assert (info.board_id, info.shards, info.finalize_after_s) == ("g:solo:S2:ray", 2, 60)
        finally:
            await eng.close()
        now["ms"] = 2_000_000 + 60_000
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2, wall_clock=clock)
        try:
            info = await eng.board(board)
            assert (info.state, info.size, info.closes_at) == (BoardState.FINALIZED, 1, 2_000_000)
        finally:
            await eng.close()
        with SegmentedFileLog.open(tmp_path / "log") as log:
            states = [rec[2] for _, rec in log.read_from(0) if rec[0] == R.STATE]
        assert states == ["FROZEN", "FINALIZED"]

    loop.run_until_complete(go())


def test_embedded_ray_caps_the_task_events_the_gcs_keeps(monkeypatch):
    """The soak's gcs_server grew ~240 MiB to Ray's default cap of task events;
    an embedded Ray keeps the last 1,000, a joined cluster its own settings."""
    import ray

    from engine.cluster import engine as cc

    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(kw))
    assert cc.init_ray() is True
    assert cc.init_ray("ray://somewhere:10001") is True
    assert seen[0]["_system_config"] == {"task_events_max_num_task_in_gcs": 1_000}
    assert seen[1]["_system_config"] is None


def test_shard_and_log_actor_calls_record_no_task_events():
    """Each write batch and read is an actor call: with task events on, each
    leaves a record in the GCS (the soak's gcs_server grew with them)."""
    from engine.cluster.actors import RemoteShard
    from engine.cluster.log_actor import RemoteLogServer

    for cls in (RemoteShard, RemoteLogServer):
        assert cls._default_options["enable_task_events"] is False


def _poisoned_shards(event_id: str):
    """The shard actor class with a bug: applying ``event_id`` raises inside the
    actor's process. Defined here so that Ray ships it by value to the workers."""
    import ray

    from engine.cluster.actors import SHARD_OPTIONS, ShardActor

    class PoisonedShard(ShardActor):
        def __init__(self, *args):
            from engine.core.partition import Partition

            real = Partition.apply_columns

            def apply_columns(part, cols, verdicts=None, *a, **kw):
                if any(e == event_id and (verdicts is None or verdicts[i] == 0) for i, e in enumerate(cols.event_ids)):
                    raise RuntimeError("boom in a shard actor")
                return real(part, cols, verdicts, *a, **kw)

            Partition.apply_columns = apply_columns
            super().__init__(*args)

    return ray.remote(**SHARD_OPTIONS)(PoisonedShard)


def test_a_shard_actor_dead_letter_is_logged_and_a_fixed_replay_skips_it(ray_session, loop, tmp_path, monkeypatch):
    """A shard actor dead-letters an event (a bug in its process); the router
    logs the dead letter; after the fix, a whole replay (snapshots deleted)
    through new shard actors reaches the same state and logs nothing more."""
    from engine.cluster import engine as cluster_client

    board = "g:m:s:poison"
    events, _ = _workload(5, board)
    poison = ScoreEvent(board, "poison", "p7", 99, 1, 1)
    monkeypatch.setattr(cluster_client, "RemoteShard", _poisoned_shards("poison"))

    async def live():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await eng.create_board(BoardSpec(board, Policy.CUMULATIVE, shards=2))
            await eng.submit(events[:300])
            results = await eng.submit(events[300:340] + [poison] + events[340:])
            assert results[40].outcome.value == "DEAD_LETTERED"
            await eng.refresh_stats()
            dead = eng.stats()["dead_letters"]
            return dead, await _reads(eng, board, sorted({e.player_id for e in events}))
        finally:
            await eng.close()

    dead, before = loop.run_until_complete(live())
    assert [d[2] for d in dead] == ["poison"] and "boom in a shard actor" in dead[0][3]

    def logged():
        with SegmentedFileLog.open(tmp_path / "log") as event_log:
            return [R.dead_letter_of(rec) for _, rec in event_log.read_where(0, R.DEAD_LETTER_HEAD)]

    assert logged() == [R.DeadLetter(board, dead[0][0], dead[0][4], "poison", dead[0][3])]
    monkeypatch.undo()  # the fix

    async def fixed():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            reads = await _reads(eng, board, sorted({e.player_id for e in events}))
            assert (await eng.submit([poison]))[0].outcome.value == "DUPLICATE_IGNORED"
            await eng.refresh_stats()
            return eng.stats()["dead_letters"], reads
        finally:
            await eng.close()

    import shutil

    shutil.rmtree(tmp_path / "snapshots", ignore_errors=True)
    assert loop.run_until_complete(fixed()) == (dead, before)
    assert len(logged()) == 1


def test_series_and_fan_out_through_ray_shards_survive_a_restart(ray_session, loop, tmp_path):
    """docs/api.md §15 on Ray shard actors: a fan-out batch (one G record, its parts on both actors) with a
    series among its boards answers per (event, board); a restart replays the same boards."""
    import numpy as np

    from engine.core.columns import ScoreBatch
    from engine.core.model import Outcome
    from engine.core.windows import Recurrence

    now = {"ms": 1_796_558_400_000}  # 2026-12-06T12:00:00Z
    boards = ["g:solo:S1:a", "g:solo:S1:b", "g:solo:daily:c"]
    instance = "g:solo:daily.20261206:c"

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2, wall_clock=lambda: now["ms"])
        try:
            await eng.create_board(BoardSpec(boards[0], Policy.CUMULATIVE, shards=3))
            await eng.create_board(BoardSpec(boards[1], Policy.BEST_SCORE, shards=1))
            await eng.create_board(BoardSpec(boards[2], Policy.BEST_SCORE, shards=2, recurrence=Recurrence("day")))
            rows = [ScoreEvent(b, f"e{i}", f"p{i}", i + 1, now["ms"], now["ms"]) for i in range(20) for b in boards]
            batch = ScoreBatch.from_events(rows)
            res = await eng.submit_columns(ScoreBatch(batch.event_ids, batch.boards, batch.positions,
                                                      np.repeat(np.arange(20), 3)))
            assert res.board_ids == [b for _ in range(20) for b in (boards[0], boards[1], instance)]
            assert {R.outcome_of(c) for c in res.codes.tolist()} == {Outcome.APPLIED, Outcome.APPLIED_FIRST_SCORE}
            live = [(await eng.board(b)).size for b in (boards[0], boards[1], instance)]
            top = await eng.top(boards[2], 0, 5)
        finally:
            await eng.close()
        assert live == [20, 20, 20] and top.board_id == instance
        with SegmentedFileLog.open(tmp_path / "log") as log:
            assert [rec[0] for _, rec in log.read_from(0)][-1] == R.GROUP
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2, wall_clock=lambda: now["ms"])
        try:
            assert [(await eng.board(b)).size for b in (boards[0], boards[1], instance)] == live
            assert (await eng.top(boards[2], 0, 5)).entries == top.entries
        finally:
            await eng.close()

    loop.run_until_complete(go())


def test_an_erasure_through_ray_shards_reaches_every_file_and_survives_a_restart(ray_session, loop, tmp_path):
    """docs/api.md §17 on Ray: the X record applied by every shard actor, the log rewritten by the log actor
    (erase_log), older snapshots deleted through it; nothing under the data directory holds the player or
    their events' ids once complete (the shard actors' journals live in the node's temp directory: scanned
    too), and a restart reads the same checksums."""
    boards = ["g:solo:S1:a", "g:solo:S1:b"]
    victim = "victim-Rq7w"

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        eng.erasure_job.delay_s = eng.erasure_job.snapshot_wait_s = 0.0
        try:
            await eng.create_board(BoardSpec(boards[0], Policy.CUMULATIVE, shards=3))
            await eng.create_board(BoardSpec(boards[1], Policy.BEST_SCORE, shards=1))
            await eng.submit([ScoreEvent(b, f"e{i}-{b[-1]}", f"p{i % 7}", i + 1, 1000 + i, 1000 + i)
                              for i in range(40) for b in boards])
            mine = [ScoreEvent(b, f"vic-ev-{b[-1]}-{k}", victim, 50 + k, 2000 + k, 2000 + k) for b in boards
                    for k in range(3)]
            await eng.submit(mine)
            await eng.snapshot()
            got = await eng.erase_player(victim)
            assert sorted(got.boards) == boards
            for _ in range(600):
                if (await eng.erasure(got.erasure_id)).status == "complete":
                    break
                await asyncio.sleep(0.05)
            assert (await eng.erasure(got.erasure_id)).status == "complete"
            live = [await eng.checksum(b) for b in boards]
            for b in boards:
                with pytest.raises(PlayerNotFound):
                    await eng.player(b, victim)
            journals = os.path.join(tempfile.gettempdir(), "flowrank-journal", eng.namespace)
            assert os.path.isdir(journals)
        finally:
            await eng.close()
        needles = [victim.encode()] + [e.event_id.encode() for e in mine]
        for root in [tmp_path] + ([journals] if journals else []):
            for dirpath, _, names in os.walk(root):
                for name in names:
                    data = open(os.path.join(dirpath, name), "rb").read()
                    assert not any(n in data for n in needles), os.path.join(dirpath, name)
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            assert [await eng.checksum(b) for b in boards] == live
            assert (await eng.submit([mine[0]]))[0].outcome.value == "DUPLICATE_IGNORED"
        finally:
            await eng.close()

    loop.run_until_complete(go())


def test_a_background_snapshot_serves_meanwhile_is_a_consistent_cut_and_a_kill_during_its_save_keeps_the_last(
        ray_session, loop, tmp_path):
    """Issue 29 item 2: a shard actor saves its snapshot on its snapshot thread. While the saves are
    held (a test seam), reads and batches are answered and the snapshot is not counted as taken; once
    saved, shard actors killed with -9 recover from its cut plus the log tail to the live state; a
    kill -9 during a later save leaves that snapshot the one a restart uses, and the failed one is not
    counted."""
    board = "g:m:s:bg"
    rnd = random.Random(29)
    events = [ScoreEvent(board, f"b{i}", f"p{rnd.randrange(400)}", rnd.randrange(10_000), rnd.randrange(100), 0)
              for i in range(1500)]

    async def saving(eng) -> int:
        return sum(st["snapshots_saving"] for st in await asyncio.gather(*(s.stats.remote() for s in eng.shards)))

    async def hold(eng, on: bool) -> None:
        await asyncio.gather(*(s.hold_saves.remote(on) for s in eng.shards))

    async def answered(fn):  # a shard actor restarting answers Overloaded meanwhile
        while True:
            try:
                return await fn()
            except Overloaded:
                await asyncio.sleep(0.2)

    async def killed(eng, which: list[int]) -> None:
        pids = await eng.shard_pids()
        for i in which:
            os.kill(pids[i], signal.SIGKILL)
        while any(p == pids[i] for i, p in enumerate(await eng.shard_pids()) if i in which):
            await asyncio.sleep(0.1)

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=4))
            for i in range(0, 1000, 50):
                await eng.submit(events[i:i + 50])
            await hold(eng, True)
            task = asyncio.ensure_future(eng.snapshot())
            while await saving(eng) < 2:  # both cuts made; both saves waiting
                await asyncio.sleep(0.02)
            covered = eng.router.log_offset
            for i in range(1000, 1200, 50):  # batches and reads answered during the saves
                await eng.submit(events[i:i + 50])
            assert (await eng.board(board)).size > 0 and (await eng.top(board, 0, 10)).entries
            assert not task.done() and eng.snapshot_offset < covered  # not counted before it is durable
            await hold(eng, False)
            await task
            assert eng.snapshot_offset == covered and await saving(eng) == 0
            live = await eng.checksum(board)
            end = await eng.log_server.end_offset.remote()

            await killed(eng, [0, 1])  # restart from the background snapshot's cut + the log tail
            assert await answered(lambda: eng.checksum(board)) == live
            replayed = [(await s.stats.remote())["replayed"] for s in eng.shards]
            assert 0 < sum(replayed) and all(r <= end - covered for r in replayed), replayed

            await hold(eng, True)
            task = asyncio.ensure_future(eng.snapshot())
            while await saving(eng) < 2:
                await asyncio.sleep(0.02)
            await killed(eng, [0])  # kill -9 in the middle of shard 0's save
            await hold(eng, False)  # shard 1's save goes on; shard 0's died with its process
            with pytest.raises(RuntimeError, match="unknown to this shard process"):
                await task
            assert eng.snapshot_offset == covered  # the failed snapshot is not counted
            await answered(lambda: eng.submit(events[1200:1300]))
            live = await answered(lambda: eng.checksum(board))
            await killed(eng, [0])  # and shard 0 still recovers (from the first background snapshot)
            assert await answered(lambda: eng.checksum(board)) == live
            await answered(lambda: eng.submit(events[1300:]))
            return await answered(lambda: eng.checksum(board))
        finally:
            await hold(eng, False)  # close() takes a last snapshot
            await eng.close()

    final = loop.run_until_complete(go())

    assert _replayed_from_the_log(loop, tmp_path, [board]) == {board: final}


def test_appends_in_flight_through_the_log_actor_stay_in_log_order(ray_session, loop, tmp_path):
    """Issue 29 item 4 on Ray: the log actor runs appends in threads (its "append"
    group, which may start them out of order); each names its offset, so two in
    flight land in order, every acknowledged event is logged once and a replay
    of the log equals the live ranking, at 1 and 3 partitions."""
    boards = {"g:m:s:pipe1": 1, "g:m:s:pipe3": 3}

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        seen = track_appends(eng)  # [in flight now, most at once]
        acked: list[str] = []
        try:
            for board, shards in boards.items():
                await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=shards))

            async def writer(w: int) -> None:
                rnd = random.Random(w)
                for k in range(15):
                    await asyncio.sleep(rnd.uniform(0, 0.01))  # writers out of step: cycles overlap
                    events = [ScoreEvent(board, f"w{w}-{k}-{board[-1]}-{i}", f"p{rnd.randrange(40)}", rnd.randrange(500), k, 0)
                              for board in boards for i in range(rnd.randrange(1, 20))]
                    results = await eng.submit(events)
                    acked.extend(r.event_id for r in results)

            await asyncio.gather(*(writer(w) for w in range(6)))
            live = {b: await eng.checksum(b) for b in boards}
        finally:
            await eng.close()
        return seen[1], acked, live

    most, acked, live = loop.run_until_complete(go())
    assert most >= 2, "two appends were in flight at once"
    with SegmentedFileLog.open(tmp_path / "log") as event_log:
        offsets = [o for o, _ in event_log.read_from(0)]
        ids = [ev.event_id for _, rec in event_log.read_from(0) for ev, _ in R.logged_events(rec)]
    assert offsets == list(range(len(offsets)))
    assert len(ids) == len(set(ids)) and set(acked) == set(ids)

    assert _replayed_from_the_log(loop, tmp_path, boards) == live


def test_the_routers_snapshot_cut_is_copied_off_the_event_loop(ray_session, loop, tmp_path, monkeypatch):
    """Issue 29 item 2: the router's state (its dedup tables: tens of MB at millions of events) is
    copied on a worker thread while the sequencing lock holds the folds, so reads on the event loop
    are answered during it; the snapshot taken is the same state and a restart from it equals live."""
    import threading
    import time

    board = "g:m:s:cutthread"
    events = [ScoreEvent(board, f"e{i}", f"p{i % 50}", i, 1, 1) for i in range(400)]
    seen: dict[str, object] = {}

    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=2))
            await eng.submit(events[:300])
            real = eng.router.to_state

            def slow_state():  # a big router state: its copy takes a while
                seen["thread"] = threading.current_thread() is not threading.main_thread()
                time.sleep(0.6)
                return real()

            monkeypatch.setattr(eng.router, "to_state", slow_state)
            snap = asyncio.ensure_future(eng.snapshot())
            await asyncio.sleep(0.1)
            began = time.monotonic()
            top = await eng.top(board, 0, 10)
            seen["read_s"] = time.monotonic() - began
            seen["snapshot_done_at_read"] = snap.done()
            await snap
            monkeypatch.setattr(eng.router, "to_state", real)
            await eng.submit(events[300:])
            return top, await eng.checksum(board)
        finally:
            await eng.close()

    top, live = loop.run_until_complete(go())
    assert seen["thread"] is True and seen["snapshot_done_at_read"] is False
    assert seen["read_s"] < 0.4, seen  # answered while the copy slept, not after it
    assert [e.player_id for e in top.entries][:1] == ["p49"]

    async def restart():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2)
        try:
            return await eng.checksum(board)
        finally:
            await eng.close()

    assert loop.run_until_complete(restart()) == live
