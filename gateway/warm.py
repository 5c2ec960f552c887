"""Warm a gateway process: every kernel it runs, through its own HTTP code (issue 29).

:func:`warm_gateway` serves a throwaway engine (:class:`engine.runtime.warm.throwaway_engine`)
through a real app (:func:`gateway.app.create_app`, lean routes and FastAPI's)
in process, and sends it one round of every route that reaches a kernel:
boards of every policy, event batches with and without metadata,
invalidations, tops, ranks, windows, subsets, changes, CSV and JSON Lines
exports, history, an archived board; after the engine's own round
(:func:`engine.runtime.warm.warm_engine`: every engine call, a snapshot and a recovery).
On a cold cache this process, helper processes started with it (one per other core)
and the shard actors first share out the compile of the recorded kernel signatures
(:mod:`engine.runtime.compile_share`). A serving start runs no round at all
when it can help it: its processes load the recorded signatures from the cache
(:func:`engine.runtime.warm.load_from_cache`, on a complete cache or once the shared
compile is done); the rounds are what ``flowrank warm`` runs, what records the list,
and the fallback when a kernel is left cold. Nothing reaches the service's engine or
data directory.

:class:`Warmup` is what ``/readyz`` asks while a process warms: the parts it
waits for (this process, the shard actors, ...), each a task.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Awaitable

from engine.runtime import warm as W

log = logging.getLogger("flowrank.warm")

_KEY = "warm-admin-key"


def warm_gateway(local_engine: bool = False, claims: str | None = None) -> W.WarmReport:
    """Compile (or load) every kernel of this process's code. Blocking: run it in a
    thread. ``local_engine``: this process also holds the shards (``--engine local``).
    ``claims``: a cold cache's compile shared out with other processes (engine.runtime.compile_share)."""
    started = time.monotonic()
    W.warm_engine(claims=claims)
    _gateway_round(local_engine)
    return W.report(started)


def start_compilers(claims: str | None, n: int) -> list[subprocess.Popen]:
    """``n`` processes that take part in a cold cache's shared compile beside this one
    (:func:`engine.runtime.compile_share.share` on ``claims``); each exits once every
    recorded signature is compiled. None: a warm cache, nothing to start. They inherit
    ``NUMBA_CACHE_DIR``; a start that dies leaves them to finish filling the cache."""
    if claims is None:
        return []
    code = f"from engine.runtime import compile_share; compile_share.share({claims!r})"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(max(0, n))]


def _engine_part(claims: str | None) -> bool:
    """The first part of warming a serving gateway process: every recorded kernel of the code
    base from the cache (a complete one, or a cold one this start compiles through ``claims``:
    :func:`engine.runtime.warm.load_from_cache`): True, nothing more to run. Otherwise the
    engine's warm round: False, the gateway's round follows."""
    if W.load_from_cache(W.KERNEL_MODULES, claims) is not None:
        return True
    W.warm_engine(True, None)  # (a cold cache's shared compile is done by then: the round loads)
    return False


def _gateway_round(local_engine: bool) -> None:
    """What a gateway runs beyond the engine's round: its HTTP code (export rendering,
    the columns its JSON parsing builds) and, with in-process shards, their unpacked calls."""
    W.run_round(_http_round())
    if local_engine:
        W.run_round(W.engine_round(packed=False))


def in_daemon_thread(fn, *args) -> asyncio.Future:
    """``fn(*args)`` in a daemon thread, as a future of this loop: a refusal at start
    exits at once instead of waiting for a warm round to finish (a compile cannot be
    interrupted)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(result, exc) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    def target() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - surfaces in the awaiting task
            result, exc = None, e
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop is closed: the process is exiting
            pass

    threading.Thread(target=target, name="flowrank-warm", daemon=True).start()
    return fut


async def _http_round() -> None:
    import httpx  # noqa: PLC0415

    from gateway.app import create_app  # noqa: PLC0415
    from gateway.friends import StaticFriends  # noqa: PLC0415
    from gateway.settings import Settings  # noqa: PLC0415

    async with W.throwaway_engine() as (engine, _reopen):
        settings = Settings(data_dir=None, keys=({"name": "warm", "role": "admin", "key": _KEY},),
                            read_rate_per_s=1e9, read_burst=1e9, write_rate_per_s=1e9, write_burst=1e9)
        app = create_app(settings, engine, friends=StaticFriends({W.PLAYERS[1]: W.PLAYERS[::3]}),
                         token_secret=b"w" * 32)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://warm",
                                     headers={"Authorization": f"Bearer {_KEY}"}) as c:
            for policy in ("best_score", "cumulative", "fastest_time"):
                await _board_round(c, f"warm:{policy}:http:global", policy)


async def _ok(response_awaitable) -> object:
    r = await response_awaitable
    if r.status_code >= 500:
        raise RuntimeError(f"warm: {r.request.method} {r.request.url.path} answered {r.status_code}: {r.text[:200]}")
    return r


async def _board_round(c, board: str, policy: str) -> None:
    b = f"/v1/boards/{board}"
    await _ok(c.post("/v1/boards", json={"board_id": board, "policy": policy, "shards": 2, "review_above": 10_000}))
    events = [{"event_id": f"h-{i}", "board_id": board, "player_id": pid, "value": (i * 37) % 7 * 100 + 1,
               "achieved_at": W.T0 + (i % 4) * 1000, **({"metadata": {"skin": f"s{i}", "ü": [i, None]}} if i % 2 else {})}
              for i, pid in enumerate(W.PLAYERS)]
    plain = [{k: v for k, v in e.items() if k != "metadata"} | {"event_id": f"p-{i}", "value": i * 11 + 3}
             for i, e in enumerate(events)]
    for batch in (events, plain, events[:3], [dict(events[0], value=50_000, event_id="h-big")]):
        await _ok(c.post("/v1/events", json={"events": batch}))
    await _ok(c.post(f"{b}/invalidations", json={"event_id": "h-5", "reason": "warm", "moderator": "warm"}))
    q = (await _ok(c.get(f"{b}/quarantine"))).json()
    for held in q.get("events", []) if isinstance(q, dict) else []:
        await _ok(c.post(f"{b}/quarantine/{held['event_id']}", json={"decision": "apply", "reason": "warm"}))
    await _reads(c, b)
    for state in ("FROZEN", "FINALIZED", "ARCHIVED"):
        await _ok(c.post(f"{b}/state", json={"state": state}))
    await _reads(c, b)


async def _reads(c, b: str) -> None:
    for ties in ({}, {"ties": "competition"}):
        top = (await _ok(c.get(f"{b}/top", params={"limit": 4, **ties}))).json()
        cursor = top.get("next_cursor") if isinstance(top, dict) else None
        if cursor:
            await _ok(c.get(f"{b}/top", params={"limit": 4, "cursor": cursor, **ties}))
        await _ok(c.get(f"{b}/top", params={"limit": 100, "offset": 2, **ties}))
        for pid in (W.PLAYERS[1], W.PLAYERS[-1], "p-nobody"):
            await _ok(c.get(f"{b}/players/{pid}", params=ties))
            await _ok(c.get(f"{b}/players/{pid}/around", params={"radius": 3, **ties}))
            await _ok(c.get(f"{b}/players/{pid}/friends", params=ties))
        await _ok(c.post(f"{b}/ranked-subset", params=ties, json={"player_ids": W.PLAYERS[::2] + ["p-nobody"]}))
        await _ok(c.get(f"{b}/changes", params={"since_version": 0, "limit": 5, **ties}))
        await _ok(c.get(f"{b}/changes", params={"since_version": 1, **ties}))
        for fmt in ("csv", "jsonl"):
            await _ok(c.get(f"{b}/export", params={"format": fmt, **ties}))
    await _ok(c.get(f"{b}/players/{W.PLAYERS[3]}", params={"approximate": "true"}))
    for pid in (W.PLAYERS[1], "p-nobody"):
        await _ok(c.get(f"{b}/players/{pid}/history"))
    await _ok(c.get(f"{b}/checksum"))


class Warmup:
    """What a process waits for before it is ready (``/readyz``): named parts, each a
    future. A part that fails is logged and counts as done (its kernels then compile
    on first use, as they did before warming existed)."""

    def __init__(self) -> None:
        self.parts: dict[str, asyncio.Future] = {}
        self.started = time.monotonic()
        self.seconds: float | None = None
        self.ok = True
        self._finish: asyncio.Future | None = None
        self._engine_round: asyncio.Future | None = None
        self.claims: str | None = None  # a cold cache: the claim folder of its shared compile
        self._waiting: asyncio.Future | None = None

    def add(self, name: str, work: Awaitable) -> None:
        self.parts[name] = asyncio.ensure_future(work)

    def add_this_process(self, local_engine: bool) -> None:
        """Warm this gateway process in daemon threads: the engine's round first (what
        the shard actors run too), then the gateway's own round. A cold cache: this process
        and the shard actors share its compile first (engine.runtime.compile_share)."""
        self.claims = W.start_claims(os.environ.get("NUMBA_CACHE_DIR"))
        # a cold cache: the other cores compile from the start too, not only once the shard
        # actors are up (Ray's start takes seconds); the actors join the same claims then
        helpers = start_compilers(self.claims, (os.cpu_count() or 1) - 1)
        engine_round = in_daemon_thread(_engine_part, self.claims)
        self._engine_round = engine_round

        async def here() -> W.WarmReport:
            loaded = await engine_round
            for h in helpers:  # done or nearly: this round waited for every claim
                await in_daemon_thread(h.wait)
            if not loaded:
                await in_daemon_thread(_gateway_round, local_engine)
            return W.report(self.started)

        self.add("this gateway process", here())

    def add_engine(self, engine) -> None:
        """The engine's own processes (``engine.runtime.warm()``: the shard actors of a
        :class:`engine.cluster.ClusterEngine`), then :meth:`wait` in the background,
        which prints how long warming took."""
        engine_warm = getattr(engine, "warm", None)
        if engine_warm is not None:
            first = self._engine_round
            cache = os.environ.get("NUMBA_CACHE_DIR")

            claims = self.claims

            async def actors():
                if claims is not None:  # a cold cache: the compile shared out with this process
                    return await engine_warm(claims)
                if first is not None and not W.cache_complete(cache):
                    await asyncio.wait([first])  # numba's default place, cold: compile once here, then load there
                return await engine_warm()

            self.add("the shard actors", actors())
        self._finish = asyncio.ensure_future(self._report())

    async def _report(self) -> None:
        seconds = await self.wait()
        if self.ok:
            W.mark_complete(os.environ.get("NUMBA_CACHE_DIR"))
        print(f"flowrank: warm in {seconds:.1f} s ({', '.join(self.parts) or 'nothing to warm'}"
              f"{'' if self.ok else '; some kernels compile on first use: see the log'})", flush=True)

    def pending(self) -> list[str]:
        return [name for name, f in self.parts.items() if not f.done()]

    @property
    def done(self) -> bool:
        return not self.pending()

    def describe(self) -> str:
        """What readiness waits for, in a sentence."""
        waiting = self.pending()
        return ("Warm." if not waiting else
                "Not ready: compiling or loading the engine's kernels (waiting for " + ", ".join(waiting) + ").")

    async def wait(self) -> float:
        """Until every part is done; the seconds from this Warmup's start to its end.
        Any number of callers; each part's outcome is logged once."""
        if self._waiting is None:
            self._waiting = asyncio.ensure_future(self._collect())
        return await asyncio.shield(self._waiting)

    async def _collect(self) -> float:
        for name, f in self.parts.items():
            try:
                result = await f
            except asyncio.CancelledError:
                raise
            except Exception:
                self.ok = False
                log.exception("warming %s failed: its kernels compile on first use instead", name)
                continue
            if isinstance(result, W.WarmReport):
                log.info("warm: %s: %s", name, result.line())
            elif isinstance(result, list):
                for i, r in enumerate(result):
                    log.info("warm: %s, actor %d: %s", name, i, W.WarmReport(**r).line())
        if self.seconds is None:
            self.seconds = time.monotonic() - self.started
        return self.seconds

    def cancel(self) -> None:
        for f in [*self.parts.values(), self._finish, self._waiting]:
            if f is not None:
                f.cancel()
