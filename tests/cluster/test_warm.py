"""Shard actors warm their kernels (engine.runtime.warm, issue 29): on a complete compile cache in
``__init__``, so an actor restarted after a crash serves nothing cold."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from engine.runtime import warm
from engine.cluster import ClusterEngine
from gateway.warm import warm_gateway

pytestmark = pytest.mark.cluster


def test_a_restarted_shard_actor_is_warm_before_it_serves(ray_session, tmp_path):
    """And an engine that names no cache (tests, embedders) leaves its actors to warm() only."""
    cache = warm.cache_dir_for(os.environ[warm.ENV_CACHE_ROOT])  # the run's shared cache (tests/conftest.py)
    warm_gateway(local_engine=True)  # every kernel in it (compiled once in a fresh clone), so marking it is true
    warm.mark_complete(cache)

    async def scenario():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=1, cache_dir=cache)
        try:
            assert (await eng.shards[0].stats.remote())["warm"]  # before anyone asked it to warm
            first = await eng.shards[0].warm.remote()
            assert first["cache_dir"] == cache and first["loaded"] > 0 and first["kernels"] >= 30
            assert await eng.shards[0].warm.remote() == first  # done once, in __init__
            pid = (await eng.shard_pids())[0]
            os.kill(pid, signal.SIGKILL)  # a crash: Ray restarts the actor, __init__ runs again
            for _ in range(600):
                try:
                    if (await eng.shard_pids())[0] != pid:
                        break
                except Exception:  # the actor is restarting
                    pass
                await asyncio.sleep(0.1)
            assert (await eng.shards[0].stats.remote())["warm"]  # warm before its first call was served
            again = await eng.shards[0].warm.remote()
            assert again != first and again["loaded"] > 0  # the new process loaded every kernel itself
        finally:
            await eng.close()

    async def unnamed():
        eng = await ClusterEngine.open(data_dir=str(tmp_path / "other"), n_shards=1)
        try:
            assert not (await eng.shards[0].stats.remote())["warm"]
        finally:
            await eng.close()

    asyncio.run(scenario())
    asyncio.run(unnamed())


def test_shard_actors_share_a_cold_compile_through_claims(ray_session, tmp_path):
    """A cache without its complete mark: this process and the actors take claims of the recorded
    signatures (engine.runtime.compile_share) from one folder; each signature is claimed once and done
    before any warm round runs. (The run's cache holds the kernels already, so this loads: what is
    checked is the sharing, not a compile's time.)"""
    from engine.runtime import compile_share

    cache = warm.cache_dir_for(os.environ[warm.ENV_CACHE_ROOT])
    Path(warm.complete_mark(cache)).unlink(missing_ok=True)
    claims = warm.start_claims(cache)
    assert claims is not None

    async def scenario():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=2, cache_dir=cache)
        try:
            assert not (await eng.shards[0].stats.remote())["warm"]  # cold: it waits for warm(claims)
            here, there = await asyncio.gather(asyncio.to_thread(warm.warm_engine, True, claims), eng.warm(claims))
            assert len(there) == 2 and all(r["loaded"] > 0 for r in there)
        finally:
            await eng.close()

    asyncio.run(scenario())
    n = len(compile_share.recorded())
    names = set(os.listdir(claims))
    assert names == {str(i) for i in range(n)} | {f"{i}.done" for i in range(n)}
    warm.mark_complete(cache)
    assert not os.path.exists(claims)
