"""gateway.warm: the gateway's warm round, and /readyz while a process warms (issue 29)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from engine.runtime import compile_share, warm
from gateway.app import create_app
from gateway.warm import Warmup
from tests.gateway.conftest import open_engine, settings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


def test_a_warmed_gateway_process_leaves_no_kernel_to_compile():
    """A fresh interpreter (kernels compiled by other tests would hide a miss): after
    warm_gateway, every kernel of the code base is warm but the tests' invariant checks."""
    code = ("import json; from engine.runtime import warm, compile_share as C; from gateway.warm import warm_gateway; "
            "warm_gateway(local_engine=False); sigs = warm.compiled_signatures(); "
            "warm_gateway(local_engine=True); print(json.dumps([warm.unwarmed(), sigs]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    unwarmed, sigs = json.loads(out.stdout)
    assert unwarmed == sorted(warm.TEST_ONLY)
    # what a served gateway compiles (its engine on shard actors) is in the list a cold start shares out
    # (engine.runtime.compile_share; a miss: record it again with python -m gateway.record_signatures)
    recorded = {(k, a) for k, a, _ in compile_share.recorded()}
    assert {(k, tuple(a)) for k, al in sigs.items() for a in al} <= recorded


def test_a_complete_cache_loads_every_recorded_kernel_without_a_round(tmp_path):
    """A restart (warm.load_from_cache): a fresh interpreter on a complete cache loads every
    recorded signature, compiles none and leaves no kernel cold, with no warm round; on a
    cache without the complete mark it does nothing and says so (None: the round runs)."""
    from gateway.warm import warm_gateway

    cache = warm.cache_dir_for(os.environ[warm.ENV_CACHE_ROOT])  # the run's shared cache (tests/conftest.py)
    warm_gateway(local_engine=True)  # every kernel in it (compiled once in a fresh clone), so marking it is true
    warm.mark_complete(cache)
    code = ("import json; from engine.runtime import warm; r = warm.load_from_cache(warm.KERNEL_MODULES); "
            "print(json.dumps([r.compiled, r.loaded, warm.unwarmed(), warm.load_from_cache() is None]))")
    for path, complete in ((cache, True), (str(tmp_path), False)):
        if not complete:
            code = "from engine.runtime import warm; print(warm.load_from_cache() is None)"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "NUMBA_CACHE_DIR": path})
        assert out.returncode == 0, out.stderr[-3000:]
        if not complete:
            assert out.stdout.strip() == "True"
            continue
        compiled, loaded, unwarmed, again_none = json.loads(out.stdout)
        assert compiled == 0 and loaded == len(compile_share.recorded())
        assert unwarmed == sorted(warm.TEST_ONLY) and not again_none


async def test_readyz_is_503_until_every_part_is_warm():
    engine = await open_engine()
    try:
        gate = asyncio.Event()

        async def slow_warm():  # a shard actor still compiling
            await gate.wait()

        warmup = Warmup()
        warmup.add("this gateway process", asyncio.sleep(0))
        warmup.add("the shard actors", slow_warm())
        app = create_app(settings(), engine, warmup=warmup)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            await asyncio.sleep(0.01)
            r = await c.get("/readyz")
            assert r.status_code == 503 and r.headers["Retry-After"] == "1"
            body = r.json()["error"]
            assert body["code"] == "OVERLOADED"
            assert "the shard actors" in body["message"] and "this gateway process" not in body["message"]
            m = await c.get("/metrics")
            assert "flowrank_ready 0.0" in m.text
            assert (await c.get("/healthz")).status_code == 200  # alive, just not ready
            gate.set()
            await asyncio.wait_for(warmup.wait(), 5)
            assert (await c.get("/readyz")).json() == {"ready": True}
            assert "flowrank_ready 1.0" in (await c.get("/metrics")).text
    finally:
        await engine.close()


async def test_a_failed_warm_part_is_logged_and_does_not_block_readiness(caplog):
    async def broken():
        raise RuntimeError("no compiler here")

    warmup = Warmup()
    warmup.add("the shard actors", broken())
    with caplog.at_level(logging.ERROR, logger="flowrank.warm"):
        seconds = await asyncio.wait_for(warmup.wait(), 5)
    assert warmup.done and not warmup.ok and seconds >= 0
    assert "warming the shard actors failed" in caplog.text


def test_flowrank_warm_fills_the_cache_and_exits_0(tmp_path):
    """``flowrank warm --cache-dir DIR`` (here the run's shared cache root, already filled:
    a fresh one would compile every kernel, tens of seconds)."""
    root = os.environ[warm.ENV_CACHE_ROOT]
    target = warm.cache_dir_for(root)
    mark = Path(warm.complete_mark(target))
    mark.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", warm.ENV_CACHE_ROOT)}
    out = subprocess.run([sys.executable, "-m", "gateway", "warm", "--cache-dir", root, "--data-dir", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("flowrank warm: ") and target in out.stdout
    assert mark.exists()
    assert not os.listdir(os.path.join(target, ".claims"))  # the compile shared with --jobs processes: done
    assert list(tmp_path.iterdir()) == []  # nothing in the data directory: the cache was given


async def test_waiting_twice_logs_each_part_once(caplog):
    """A gateway worker waits for its warm round before it listens, and the background
    report waits too: one log line per part, not one per waiter."""
    async def broken():
        raise RuntimeError("no compiler here")

    warmup = Warmup()
    warmup.add("the shard actors", broken())
    with caplog.at_level(logging.ERROR, logger="flowrank.warm"):
        first, second = await asyncio.wait_for(asyncio.gather(warmup.wait(), warmup.wait()), 5)
    assert first == second
    assert caplog.text.count("warming the shard actors failed") == 1


async def test_a_cold_cache_is_shared_out_between_this_process_and_the_shard_actors(tmp_path, monkeypatch):
    """On a cold cache the gateway does not compile alone while the shard actors wait: both get the
    same claim folder of this start (engine.runtime.compile_share) at once; once warm, the cache is
    marked complete and the folder removed, and the next start loads without claims."""
    import gateway.warm as G

    cache = str(tmp_path / "cache")
    monkeypatch.setenv("NUMBA_CACHE_DIR", cache)
    seen: dict[str, object] = {}
    actors_started = asyncio.Event()

    def fake_load(modules, claims=None):  # the gateway's kernels from the cache (a daemon thread)
        seen["gateway"], seen["loaded"] = claims, tuple(modules)
        if claims is not None:
            os.makedirs(claims)  # as compile_share does when it claims the first kernel
        elif not warm.cache_complete(cache):
            return None
        return warm.WarmReport(0.0, 0, 0, 0, cache)

    class FakeEngine:
        async def warm(self, claims=None):
            seen["actors"] = claims
            actors_started.set()
            return []

    class FakeHelper:  # a compiler process started beside this one (gateway.warm.start_compilers)
        def wait(self):
            seen["helper waited"] = True

    def fake_compilers(claims, n):
        seen["helpers"] = (claims, n)
        return [FakeHelper()] if claims is not None else []

    monkeypatch.setattr(G.W, "warm_engine", lambda *a, **k: seen.setdefault("engine rounds", []).append(1))
    monkeypatch.setattr(G.W, "load_from_cache", fake_load)
    monkeypatch.setattr(G, "_gateway_round", lambda local_engine: seen.setdefault("gateway rounds", []).append(1))
    monkeypatch.setattr(G, "start_compilers", fake_compilers)
    monkeypatch.setattr(G.os, "cpu_count", lambda: 4)
    warmup = Warmup()
    warmup.add_this_process(local_engine=False)
    warmup.add_engine(FakeEngine())
    await asyncio.wait_for(actors_started.wait(), 5)  # the actors did not wait for this process's round
    await asyncio.wait_for(warmup.wait(), 5)
    await asyncio.wait_for(warmup._finish, 5)
    assert seen["gateway"] is not None and seen["gateway"] == seen["actors"]
    assert seen["helpers"] == (seen["gateway"], 3) and seen["helper waited"]  # one compiler per other core, reaped
    assert str(seen["gateway"]).startswith(os.path.join(cache, ".claims"))
    assert warm.cache_complete(cache) and os.listdir(os.path.join(cache, ".claims")) == []
    # cold: this process compiled its part, then loaded every kernel of the code base: no warm round
    assert seen["loaded"] == warm.KERNEL_MODULES and "gateway rounds" not in seen and "engine rounds" not in seen
    again = Warmup()
    again.add_this_process(local_engine=False)
    again.add_engine(FakeEngine())
    await asyncio.wait_for(again.wait(), 5)
    # complete: every process loads, no claims, no round
    assert seen["gateway"] is None and seen["actors"] is None
    assert "gateway rounds" not in seen and "engine rounds" not in seen
    await asyncio.wait_for(again._finish, 5)


def test_flowrank_warm_refuses_a_jobs_count_below_one(capsys):
    from gateway.cli import build_parser

    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(["warm", "--jobs", bad])
        assert exit_.value.code == 2 and "--jobs" in capsys.readouterr().err
    assert build_parser().parse_args(["warm", "--jobs", "3"]).jobs == 3
