"""Warm every numba kernel before a process says it is ready (issue 29).

A numba kernel compiles on its first call (or loads from the compile cache),
in the process that calls it: the first batch of a fresh install used to wait
13.8 s on compiles. :func:`warm_engine` runs a small, throwaway engine through
the real code paths (every policy, batches with and without metadata, a
quarantine decision, an invalidation, every read, changes, export, history,
an archived board, a snapshot and a recovery from it) so that every kernel
of the engine is compiled for the argument types production gives it: the
shard calls cross msgpack as they do across Ray
(:class:`engine.runtime.local.InProcessShards` ``packed``). The gateway adds its own
HTTP round over the same kind of engine (:mod:`gateway.warm`). Nothing here
touches a service's data directory: the engine lives in a temporary directory
that is removed afterwards. A serving process skips the round when the recorded
signatures can simply be loaded (:func:`load_from_cache`, :func:`serving_warm`):
a round costs about three times the CPU of the loads it causes.

The compile cache. :func:`resolve_cache_root` picks where it lives (an
explicit directory, else ``$FLOWRANK_CACHE_DIR``, else ``<data-dir>/.numba-cache``),
:func:`cache_key` names a subfolder per numba, Python, machine and kernel
sources, and :func:`use_cache_dir` points this process's numba at it. numba
itself keys each cached kernel by the hash of its own source file, its
bytecode, its signature and the CPU (name and features), and drops an index
written by another numba version; the subfolder adds what it misses: a change
in a kernel *another* file inlines (``engine.core.xxh3`` into ``engine.core.dedup``).

This module imports neither numba nor any kernel module at import time, so
a process can call :func:`use_cache_dir` before numba reads its configuration.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

log = logging.getLogger("flowrank.warm")

#: Every module that defines numba kernels (tests/engine/test_warm.py checks the list against the code).
ENGINE_KERNEL_MODULES = (
    "engine.core.xxh3", "engine.core.players", "engine.core.dedup", "engine.core.rank_index", "engine.core.partition",
    "engine.core.journal", "engine.core.archive", "engine.core.entry", "engine.core.league",
)
GATEWAY_KERNEL_MODULES = ("gateway.export_format",)
KERNEL_MODULES = ENGINE_KERNEL_MODULES + GATEWAY_KERNEL_MODULES

#: ``<data-dir>/.numba-cache``: the default root of the compile cache.
CACHE_SUBDIR = ".numba-cache"
#: The root of the compile cache when no ``--cache-dir`` is given (before ``<data-dir>/.numba-cache``).
ENV_CACHE_ROOT = "FLOWRANK_CACHE_DIR"


# ------------------------------------------------------------------ the cache directory


def resolve_cache_root(cache_dir: str | None, data_dir: str | None,
                       environ: Mapping[str, str] | None = None) -> str | None:
    """Where the compile cache lives: ``cache_dir`` (``--cache-dir``), else
    ``$FLOWRANK_CACHE_DIR``, else ``<data_dir>/.numba-cache``; an absolute path.
    None (no data directory, no cache directory): numba's default place, beside
    the installed ``.py`` files when they are writable."""
    env = os.environ if environ is None else environ
    for root in (cache_dir, env.get(ENV_CACHE_ROOT)):
        if root:
            return os.path.abspath(root)
    if data_dir:
        return os.path.abspath(os.path.join(data_dir, CACHE_SUBDIR))
    return None


def _source_digest(modules: Iterable[str]) -> str:
    """The kernel modules' sources, and where they are: numba files a cached kernel under its
    source file's path, so two installs of the same code in different places (a checkout and
    an image, two worktrees) sharing one cache root must not share a complete mark."""
    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        h.update(name.encode() + b"\0" + (origin or "").encode() + b"\0")
        if origin and os.path.exists(origin):
            with open(origin, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def cache_key() -> str:
    """The subfolder of the cache root this install compiles into: numba's version,
    Python's, the machine architecture and a digest of every kernel module's source."""
    try:
        numba_version = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - numba is a dependency
        numba_version = "unknown"
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"numba{numba_version}-{py}-{platform.machine() or 'unknown'}-{_source_digest(KERNEL_MODULES)}"


def cache_dir_for(root: str | None) -> str | None:
    """The directory numba caches into for the cache root ``root`` (None: numba's default)."""
    return None if root is None else os.path.join(root, cache_key())


def use_cache_dir(path: str | None) -> str | None:
    """Point this process's numba at ``path`` (None: leave numba's default) and
    return the directory in use. Sets ``NUMBA_CACHE_DIR`` for numba's first import
    and for child processes; when numba is already imported (a Ray actor imports
    the kernel modules while it unpickles its class), re-points its configuration
    and every kernel not yet compiled, whose cache locator numba picked at import."""
    if path is None:
        return os.environ.get("NUMBA_CACHE_DIR")
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        pass  # unwritable: numba falls back to its default place, kernel by kernel
    os.environ["NUMBA_CACHE_DIR"] = path
    if "numba" in sys.modules:
        from numba.core import config  # noqa: PLC0415

        if config.CACHE_DIR != path:
            config.CACHE_DIR = path
            for module in KERNEL_MODULES:
                if module in sys.modules:
                    for d in dispatchers([module]).values():
                        # numba picks a kernel's cache locator when it is defined: pick again
                        if getattr(d, "_cache", None) is not None and not d.overloads:
                            try:
                                d.enable_caching()
                            except Exception:  # an unwritable place: numba's default for this kernel
                                log.warning(
                                    "kernel %s: cannot cache in %s; numba's default place instead", d.__name__, path,
                                    exc_info=True)
    return path


# ------------------------------------------------------------------ the kernels


def dispatchers(modules: Iterable[str] = KERNEL_MODULES) -> dict:
    """Every numba dispatcher defined at the top level of ``modules`` (imported
    here), by ``module.name``."""
    from numba.core.dispatcher import Dispatcher  # noqa: PLC0415

    out = {}
    for name in modules:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, Dispatcher) and getattr(value.py_func, "__module__", None) == name:
                out[f"{name}.{attr}"] = value
    return out


def inlined(d) -> bool:
    """A kernel inlined into its callers: by numba (``inline="always"``), or by LLVM
    (``forceinline=True``, compiled for the exact, often literal, types each caller
    passes). It is never compiled on its own, its callers are."""
    return d.targetoptions.get("inline") == "always" or bool(d.targetoptions.get("forceinline"))


def compiled_signatures(modules: Iterable[str] = KERNEL_MODULES) -> dict[str, list[tuple[str, ...]]]:
    """Every signature this process holds for the (not inlined) kernels of ``modules``, as text
    (:func:`engine.runtime.compile_share.encode`), by kernel, sorted."""
    from engine.runtime.compile_share import encode  # noqa: PLC0415

    return {name: sorted({tuple(encode(t) for t in sig) for sig in d.signatures})
            for name, d in sorted(dispatchers(modules).items()) if d.signatures and not inlined(d)}


@dataclass(frozen=True)
class WarmReport:
    seconds: float
    kernels: int  # compiled kernels of the modules warmed (inlined ones excluded)
    loaded: int  # signatures loaded from the compile cache
    compiled: int  # signatures compiled (and saved to the cache)
    cache_dir: str | None

    def line(self) -> str:
        return (f"{self.kernels} kernels warm in {self.seconds:.2f} s ({self.loaded} loaded from the cache, "
                f"{self.compiled} compiled; cache {self.cache_dir or 'numba default'})")


def report(started: float, modules: Iterable[str] = KERNEL_MODULES) -> WarmReport:
    ds = [d for d in dispatchers(modules).values() if not inlined(d)]
    loaded = sum(sum(d.stats.cache_hits.values()) for d in ds)
    compiled = sum(sum(d.stats.cache_misses.values()) for d in ds)
    return WarmReport(time.monotonic() - started, len(ds), loaded, compiled, os.environ.get("NUMBA_CACHE_DIR"))


#: Kernels no production path calls, left cold on purpose: only tests run them.
TEST_ONLY = {
    "engine.core.dedup._verify": "DedupTable._check, the invariant check of the tests",
    "engine.core.rank_index._check_kernel": "RankIndex._check, the invariant check of the tests",
}


def _callees(d) -> set:
    """The dispatchers ``d``'s code names (its calls into other kernels, inlined or not)."""
    out, codes = set(), [d.py_func.__code__]
    while codes:
        code = codes.pop()
        for name in code.co_names:
            target = d.py_func.__globals__.get(name)
            if target is not None and hasattr(target, "py_func") and hasattr(target, "overloads"):
                out.add(target)
        codes += [c for c in code.co_consts if hasattr(c, "co_names")]
    return out


def unwarmed(modules: Iterable[str] = KERNEL_MODULES) -> list[str]:
    """The kernels of ``modules`` this process would still compile (or load) on a
    first call: those with no compiled signature that no compiled kernel calls.
    A kernel only other kernels call is compiled into them, or loaded with them
    from the cache (where it is then never compiled on its own)."""
    found = dispatchers(modules)
    reached = {d for d in found.values() if d.overloads}
    todo = list(reached)
    while todo:
        for callee in _callees(todo.pop()):
            if callee not in reached:
                reached.add(callee)
                todo.append(callee)
    return sorted(name for name, d in found.items() if d not in reached)


#: Written into a cache directory once a warm round left no kernel cold there, per CPU
#: (``<mark>-<cpu>``: numba keys its cached code by CPU, so another CPU starts cold).
COMPLETE_MARK = "flowrank-warm-complete"


def _cpu_name() -> str:
    """The host CPU as LLVM names it (what numba's cache keys on, with its features)."""
    try:
        import llvmlite.binding as ll  # noqa: PLC0415

        return re.sub(r"[^A-Za-z0-9_.-]", "_", ll.get_host_cpu_name()) or "unknown"
    except Exception:  # pragma: no cover - llvmlite comes with numba
        return "unknown"


def complete_mark(cache_dir: str) -> str:
    """The file that says ``cache_dir`` holds every kernel compiled for this CPU."""
    return os.path.join(cache_dir, f"{COMPLETE_MARK}-{_cpu_name()}")


def cache_complete(cache_dir: str | None) -> bool:
    """A warm round already filled ``cache_dir`` for this CPU: processes can load in parallel."""
    return cache_dir is not None and os.path.exists(complete_mark(cache_dir))


def start_claims(cache_dir: str | None) -> str | None:
    """A cold cache (no complete mark for this CPU): the claim folder through which every
    process of this start shares the compile (:mod:`engine.runtime.compile_share`; stale
    folders of starts that died are removed). None: a complete cache, or numba's default place."""
    if cache_dir is None or cache_complete(cache_dir):
        return None
    import uuid  # noqa: PLC0415

    from engine.runtime import compile_share  # noqa: PLC0415

    compile_share.remove_claims(cache_dir, stale_only=True)
    return compile_share.claims_dir(cache_dir, uuid.uuid4().hex)


def mark_complete(cache_dir: str | None) -> None:
    """Write the complete mark (every process of the next start loads in parallel) and remove
    this cache's claim folders."""
    if cache_dir is None:
        return
    from engine.runtime import compile_share  # noqa: PLC0415

    compile_share.remove_claims(cache_dir)
    try:
        with open(complete_mark(cache_dir), "w") as f:
            f.write(cache_key() + "\n")
    except OSError:
        pass  # a read-only cache: the next start waits for one process's warm round again


def load_from_cache(modules: Iterable[str] = ENGINE_KERNEL_MODULES, claims: str | None = None) -> WarmReport | None:
    """Every recorded signature of ``modules``' kernels (:mod:`engine.runtime.compile_share`'s
    list, the types a warm round compiles: tests/gateway/test_warm.py), straight from the
    compile cache, without a warm round: about a third of a round's CPU (the round also runs a
    throwaway engine's Python), in each process of a serving start at once.

    - A restart on a complete cache (:func:`cache_complete`): every signature loads.
    - A cold cache (``claims``: :func:`start_claims`): this process first takes its part of
      the shared compile (:func:`engine.runtime.compile_share.share`), then loads the rest.

    None: the cache is neither complete nor being compiled, or a kernel is still cold after it
    (the list is stale), or a load failed: run the warm round instead."""
    started = time.monotonic()
    modules = tuple(modules)
    from engine.runtime import compile_share  # noqa: PLC0415

    if claims is not None:
        compile_share.share(claims)
    elif not cache_complete(os.environ.get("NUMBA_CACHE_DIR")):
        return None
    try:
        for kernel, args, _cost in compile_share.recorded():
            if kernel.rpartition(".")[0] in modules:
                compile_share.compile_one(kernel, args)
    except Exception:
        log.warning("loading the recorded kernels from the cache failed; a warm round runs instead", exc_info=True)
        return None
    left = [k for k in unwarmed(modules) if k not in TEST_ONLY]
    if left:
        log.info("kernels the recorded list misses (%s): a warm round runs", ", ".join(left))
        return None
    return report(started, modules)


def serving_warm(claims: str | None = None) -> WarmReport:
    """What a serving engine process (a shard actor, an engine host) runs before it is ready:
    the recorded kernels from the cache (:func:`load_from_cache`: a complete cache, or a cold
    one this start compiles through ``claims``); the warm round (:func:`warm_engine`) only if
    that leaves a kernel cold."""
    loaded = load_from_cache(claims=claims)
    return loaded if loaded is not None else warm_engine()


def warm_engine(packed: bool = True, claims: str | None = None) -> WarmReport:
    """Compile (or load) every engine kernel in this process through a throwaway
    engine. Blocking; run it in a thread from async code. ``packed``: the shards
    get their calls through msgpack, as a shard actor does (False: as the shards
    of ``--engine local`` do, in process). ``claims``: a cold cache's compile is shared
    out among the processes of this start (:func:`start_claims`): this process first
    compiles the recorded signatures it claims, then waits for the others' (the round
    then loads them)."""
    started = time.monotonic()
    if claims is not None:
        from engine.runtime import compile_share  # noqa: PLC0415

        compile_share.share(claims)
    warm_direct()
    run_round(engine_round(packed))
    return report(started, ENGINE_KERNEL_MODULES)


#: True in whatever a warm round runs (its loop's tasks, the threads they start): the
#: throwaway engine's log lines ("router recovered ...", "board ... archived") are dropped.
_WARMING: contextvars.ContextVar[bool] = contextvars.ContextVar("flowrank_warming", default=False)


class _NotWarming(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _WARMING.get()


_QUIET = _NotWarming()


def _quiet_loggers() -> None:
    """Keep a warm round out of the logs: a filter on every FlowRank logger (and httpx's,
    whose request lines the gateway's HTTP round would print) drops what the round logs,
    and only that (a filter sees the context of the call that logs)."""
    import engine.runtime.local  # noqa: F401, PLC0415  (its imports create the engine's loggers)

    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith("flowrank")] + ["flowrank", "httpx"]
    for name in names:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


def run_round(coro) -> None:
    """``coro`` to completion on a loop of its own (this thread may have none, or one
    already running), in a context marked as warming (:func:`_quiet_loggers`)."""
    _quiet_loggers()
    ctx = contextvars.copy_context()
    ctx.run(_WARMING.set, True)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        ctx.run(asyncio.run, coro)
        return
    err: list[BaseException] = []

    def target() -> None:
        try:
            ctx.run(asyncio.run, coro)
        except BaseException as exc:  # surfaces in the caller's thread
            err.append(exc)

    import threading  # noqa: PLC0415

    t = threading.Thread(target=target, name="flowrank-warm")
    t.start()
    t.join()
    if err:
        raise err[0]


async def engine_round(packed: bool = True) -> None:
    async with throwaway_engine(packed) as (engine, reopen):
        await exercise(engine)
        engine = await reopen()  # a snapshot, then recovery from it and from the log after it
        await exercise(engine, again=True)


class _FailingWrites:
    """The throwaway engine's log fault hook: fails the next write when armed (the failed-append path)."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, op: str, path: str) -> None:
        if self.armed and op == "write":
            self.armed = False
            raise OSError("warm: an injected write failure")


class throwaway_engine:
    """``async with throwaway_engine() as (engine, reopen)``: an in-process engine
    (:class:`engine.runtime.local.LocalService`, two shards, wire packed as over Ray) in a
    temporary directory removed on exit; ``await reopen()`` closes it (a snapshot)
    and opens it again (recovery), returning the new engine. ``engine.cfg.fault_hook.armed = True``
    makes the next log write fail."""

    def __init__(self, packed: bool = True) -> None:
        self.root = ""
        self.engine = None
        self.packed = packed

    async def _open(self):
        from engine.runtime.local import LocalService  # noqa: PLC0415

        self.engine = await LocalService.open(data_dir=self.root, default_shards=2, n_shards=2, packed_wire=self.packed,
                                              journal_tail_rows=4, segment_bytes=1 << 16, fault_hook=_FailingWrites())
        return self.engine

    async def reopen(self):
        await self.engine.close()
        self.engine = None
        return await self._open()

    async def __aenter__(self):
        self.root = tempfile.mkdtemp(prefix="flowrank-warm-")
        try:
            return await self._open(), self.reopen
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    async def __aexit__(self, *exc) -> None:
        try:
            if self.engine is not None:
                await self.engine.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def warm_direct() -> None:
    """The kernels of paths a throwaway engine cannot reach cheaply, called with the
    argument types their callers give them."""
    import numpy as np  # noqa: PLC0415

    from engine.core import journal  # noqa: PLC0415

    # Journal._from_columns: loading a snapshot written before the journal moved to disk
    journal.chain_prev(np.zeros(2, np.int32), np.full(1, -1, np.int64), 0, np.zeros(2, np.int64))


T0 = 1_793_527_500_000  # achieved_at of the warm round's events: 2026-11-01T12:05:00Z, epoch ms
#: The warm round's players: ASCII, multi-byte UTF-8, and characters CSV must quote.
PLAYERS = [f"p-{i}" for i in range(12)] + ["日本語", "p-ünï ✓", "q,\"x\""]


def _events(board_id: str, n: int, tag: str, metadata: bool, value=lambda i: (i * 37) % 7 * 100):
    from engine.core.model import ScoreEvent  # noqa: PLC0415

    return [ScoreEvent(board_id, f"{tag}-{i}", PLAYERS[i % len(PLAYERS)], value(i), T0 + (i % 4) * 1000, T0 + 5000,
                       (b'{"skin":"s%d"}' % i) if metadata and i % 2 else b"")
            for i in range(n)]


async def exercise(engine, again: bool = False) -> None:
    """Every kind of engine call on fresh boards of every policy (and one taken to
    ARCHIVED), with and without metadata. ``again``: the round after a reopen (other board ids)."""
    from engine.core import model as M  # noqa: PLC0415
    from engine.core.columns import ScoreBatch  # noqa: PLC0415
    from engine.core.errors import FlowRankError  # noqa: PLC0415
    from engine.core.model import BoardSpec, BoardState, Policy  # noqa: PLC0415

    suffix = "r" if again else "a"
    boards = []
    for policy in Policy:
        board_id = f"warm:{policy.value}:{suffix}:global"
        await engine.create_board(BoardSpec(board_id, policy, shards=2, review_above=10_000))
        boards.append(board_id)
        await engine.submit(_events(board_id, 20, "e", metadata=False))
        # the HTTP write path: columns (with metadata, then without; duplicates; one held for review)
        await engine.submit_columns(ScoreBatch.from_events(_events(board_id, 20, "m", True, lambda i: i * 50 + 1)))
        await engine.submit_columns(ScoreBatch.from_events(_events(board_id, 20, "n", False, lambda i: i * 9 + 2)))
        await engine.submit_columns(ScoreBatch.from_events(_events(board_id, 3, "e", False)))
        await engine.submit_columns(ScoreBatch.from_events(_events(board_id, 1, "big", True, lambda i: 50_000)))
    # a partition past its first owner table (Journal.reserve rehashes it)
    await engine.submit_columns(ScoreBatch.from_events(_events(boards[0], 400, "many", False, lambda i: i)))
    engine.cfg.fault_hook.armed = True  # the log refuses a batch: nothing is folded in
    try:
        await engine.submit_columns(ScoreBatch.from_events(_events(boards[0], 5, "lost", True, lambda i: i)))
    except FlowRankError:
        pass
    for board_id in boards:
        await engine.invalidate(M.Invalidation(board_id, "m-3", "warm", "warm"))
        for held in await engine.quarantine(board_id):
            await engine.decide(M.QuarantineDecision(board_id, held.event_id, "apply", "warm", "warm"))
        await _reads(engine, board_id)
    entered = f"warm:entry:{suffix}:global"  # competition entry (engine.core.entry): joins, the caps' kernel
    await engine.create_board(BoardSpec(entered, Policy.BEST_SCORE, shards=2, entry=M.EntrySpec(True, 8, 2)))
    for pid in PLAYERS[:4]:
        await engine.join(entered, pid)
    await engine.submit_columns(ScoreBatch.from_events(_events(entered, 12, "e", False)))
    await engine.submit(_events(entered, 2, "s", True))
    await _reads(engine, entered)
    league = f"warm:league:{suffix}:global"  # a league with prizes (engine.core.league): placement, cohorts, awards
    await engine.create_board(BoardSpec(league, Policy.BEST_SCORE, shards=2, league=M.LeagueSpec(3, 2, 1, 1),
                                        prizes=(M.Prize(1, 2, '{"gems":1}'),)))
    await engine.join(league, PLAYERS[0])
    await engine.submit_columns(ScoreBatch.from_events(_events(league, 12, "e", False)))
    await engine.cohort(league, player_id=PLAYERS[0])
    for state in (BoardState.FROZEN, BoardState.FINALIZED):
        await engine.set_state(league, state)
    await engine.awards(league, 0, 10)
    await engine.next_season(league, f"next{suffix}", None)
    for policy, dirs in ((Policy.BEST_SCORE, ("desc", "asc")), (Policy.FASTEST_TIME, ("asc",))):  # subscores (§14)
        subbed = f"warm:subs-{policy.value}:{suffix}:global"
        await engine.create_board(BoardSpec(subbed, policy, shards=2, review_above=10_000, subscores=dirs))
        for batch in (_events(subbed, 20, "e", False), _events(subbed, 20, "m", True, lambda i: i * 50 + 1),
                      _events(subbed, 1, "big", True, lambda i: 50_000)):
            await engine.submit_columns(ScoreBatch.from_events(
                [ev._replace(subscores=tuple((i * 7 + c) % 5 - 2 for c in range(len(dirs)))) for i, ev in enumerate(batch)]))
        await engine.invalidate(M.Invalidation(subbed, "m-3", "warm", "warm"))
        for held in await engine.quarantine(subbed):
            await engine.decide(M.QuarantineDecision(subbed, held.event_id, "apply", "warm", "warm"))
        await _reads(engine, subbed)
    archived = f"warm:archived:{suffix}:global"
    await engine.create_board(BoardSpec(archived, Policy.BEST_SCORE, shards=2))
    await engine.submit(_events(archived, 15, "e", metadata=True))
    for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
        await engine.set_state(archived, state)
    await _reads(engine, archived)
    await engine.next_season(archived, f"next{suffix}", None)
    # an erasure (docs/api.md §17): the journals' and player tables' scrub kernels, the archive rewrite, and the
    # job's run-file rewrite and log rewrite
    erased = await engine.erase_player(PLAYERS[1])
    await engine.erasure(erased.erasure_id)
    engine.erasure_job.snapshot_wait_s = 0.0
    await engine.erasure_job.run()


async def _reads(engine, board_id: str) -> None:
    info = await engine.board(board_id)
    for ties in (False, True):
        await engine.top(board_id, 0, 5, ties=ties)
        await engine.top(board_id, 5, 100, ties=ties)
        for pid in (PLAYERS[1], PLAYERS[-1], "p-nobody"):
            try:
                await engine.player(board_id, pid, ties=ties)
            except Exception:  # a player not on the board: its error is part of the round
                pass
            try:
                await engine.around(board_id, pid, 3, ties=ties)
            except Exception:
                pass
        if await engine.router.fanout.build_mirror(board_id):  # the rank mirror's build, its reads and follows
            for pid in (PLAYERS[1], PLAYERS[-1], "p-nobody"):
                try:
                    await engine.player(board_id, pid, ties=ties)
                except Exception:
                    pass
        await engine.ranked_subset(board_id, PLAYERS[::2] + ["p-nobody"], ties=ties)
        await engine.changes(board_id, 0, 5, ties=ties)
        await engine.changes(board_id, max(0, info.version - 2), ties=ties)
        async for _chunk in engine.export(board_id, 4, ties=ties):
            pass
    try:
        await engine.approximate_player(board_id, PLAYERS[1])
    except Exception:
        pass
    for pid in (PLAYERS[1], PLAYERS[3], "p-nobody"):
        await engine.history(board_id, pid)
    await engine.checksum(board_id)
