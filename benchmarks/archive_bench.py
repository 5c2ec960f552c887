"""``python -m benchmarks archive``: memory an ARCHIVED board gives back (issue 13).

    python -m benchmarks archive [--players 1000000] [--events-per-player 1] [--partitions 4]
                                 [--shards 2] [--batch 10000] [--reads 2000] [--seed 1] [--json OUT]

One process, one ``LocalService`` over a temporary data directory (in-process
shards, journals on disk as in production). After a warm-up board (filled and
archived, so one-time costs such as compiled kernels are in the baseline), it
fills one ``best_score`` board
with ``--players`` ranked players (``--events-per-player`` rounds of one
event each, values drawn with many ties, so later rounds improve some rows
and not others), then measures the shards' memory for that board twice: before archiving
(FROZEN -> FINALIZED -> ARCHIVED) and after. Two measures:

* **partition bytes**: ``Partition.nbytes()`` (ids, row columns, rank index)
  plus the journal's in-memory part, summed over the board's partitions on
  every shard; after archiving the shards hold no partition of the board.
* **process RSS** (``RssAnon``/``RssFile`` from ``/proc/self/status``; the
  router runs in the same process, and its dedup table of the board's event
  ids stays, so RSS understates the shards' share): before
  the board, after filling it, after archiving (garbage collected), and after
  ``malloc_trim(0)`` (glibc keeps freed small blocks in its arenas otherwise).
  The freed share is ``(rss_full - rss_archived) / (rss_full - rss_empty)``.

The archive's history section (every journal row of the board, docs/storage.md
"Archives"): its size on disk, how many events it holds, and the time to
write it: reading the journals from the shards (one call per chunk of
columns) and encoding the section (the file write is the archive's, timed as
a whole in "archived in").

Then ``--reads`` random player lookups, top-100 pages and player histories
answered from the archive (median and p99 µs). Issue 13's target: archiving
frees >= 90% of the board's shard memory. It prints the machine, parameters
and load average.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from .engine_core import rss_bytes, rss_split
from .machine import describe, header

BOARD = "bench:archive:S1:global"
WARM = "bench:archive:S0:warmup"
T0 = 1_793_527_500_000


def _trim() -> bool:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _settle(trim: bool = False) -> dict:
    gc.collect()
    trimmed = _trim() if trim else False
    split = rss_split()
    return {"rss": rss_bytes(), "anon": split.get("anon"), "file": split.get("file"), "trimmed": trimmed}


def _result_cache_bytes(svc) -> int:
    """Bytes of the shards' cached per-record results (kept for redelivered batches)."""
    total = 0
    for core in svc.cores:
        for result in core._results.values():
            for item in result or ():
                total += len(item) if isinstance(item, (bytes, bytearray)) else 0
    return total


def _board_bytes(svc) -> tuple[int, int]:
    """(partition bytes, partitions) of the board over every in-process shard."""
    total = parts = 0
    for core in svc.cores:
        for p in core.parts.get(BOARD, {}).values():
            total += p.nbytes() + p.journal.nbytes()
            parts += 1
    return total, parts


def _timed(record: list, fn):
    """``fn`` (sync or async) timing each call into ``record``."""
    if asyncio.iscoroutinefunction(fn):
        async def timed_async(*a, **kw):
            t = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                record.append(time.perf_counter() - t)
        return timed_async

    def timed(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            record.append(time.perf_counter() - t)
    return timed


async def _measure(args: argparse.Namespace, data_dir: Path) -> dict:
    import engine.core.archive as archive_mod
    from engine.core.model import BoardSpec, BoardState, Policy, ScoreEvent
    from engine.runtime.local import LocalService

    svc = await LocalService.open(data_dir=str(data_dir), n_shards=args.shards, default_shards=args.partitions,
                                  snapshot_every_events=10**12, snapshot_every_seconds=10**9)
    try:
        # Warm-up: a small board through the same path (numba kernels compiled, modules
        # imported, allocator pools made), so the baseline holds the one-time costs.
        await svc.create_board(BoardSpec(WARM, Policy.BEST_SCORE, shards=args.partitions))
        await svc.submit([ScoreEvent(WARM, f"w{i}", f"w-{i}", i % 97, T0 + i, T0) for i in range(args.warm_players)])
        for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
            await svc.set_state(WARM, state)
        empty = _settle(trim=True)
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=args.partitions))
        rnd = random.Random(args.seed)
        t0 = time.perf_counter()
        for round_ in range(args.events_per_player):
            for start in range(0, args.players, args.batch):
                stop = min(args.players, start + args.batch)
                await svc.submit([ScoreEvent(BOARD, f"e{i}" if round_ == 0 else f"e{i}-{round_}", f"player-{i:08d}",
                                             rnd.randrange(100_000), T0 + rnd.randrange(10**6), T0)
                                  for i in range(start, stop)])
        fill_s = time.perf_counter() - t0
        version = (await svc.board(BOARD)).version
        full = _settle(trim=True)
        bytes_before, parts_before = _board_bytes(svc)
        results_before = _result_cache_bytes(svc)
        read_s: list[float] = []
        encode_s: list[float] = []
        svc.router.control._history_of = _timed(read_s, svc.router.control._history_of)  # type: ignore[method-assign]
        sections = archive_mod._history_sections
        archive_mod._history_sections = _timed(encode_s, sections)  # type: ignore[assignment]
        t1 = time.perf_counter()
        try:
            for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
                await svc.set_state(BOARD, state)
        finally:
            archive_mod._history_sections = sections  # type: ignore[assignment]
        archive_s = time.perf_counter() - t1
        archived = _settle()
        trimmed = _settle(trim=True)
        bytes_after, parts_after = _board_bytes(svc)
        results_after = _result_cache_bytes(svc)
        info = await svc.board(BOARD)
        assert info.version == version and info.size == args.players, (info, version)
        path = svc.router.archives.path(BOARD)  # type: ignore[attr-defined]
        ids = [f"player-{rnd.randrange(args.players):08d}" for _ in range(args.reads)]
        player_us, top_us = [], []
        for pid in ids:
            t = time.perf_counter()
            await svc.player(BOARD, pid, ties=True)
            player_us.append((time.perf_counter() - t) * 1e6)
        for k in range(args.reads):
            t = time.perf_counter()
            await svc.top(BOARD, rnd.randrange(args.players - 100), 100)
            top_us.append((time.perf_counter() - t) * 1e6)
        history_us = []
        for pid in ids:
            t = time.perf_counter()
            got = await svc.history(BOARD, pid)
            history_us.append((time.perf_counter() - t) * 1e6)
            assert len(got) == args.events_per_player, (pid, got)
        view = svc.router.boards[BOARD].archive
        assert view is not None and view.hist is not None
        history_bytes = sum(a.nbytes for a in view.hist.values())
        history_events = view.history_events
        after_reads = _settle()
        dedup_bytes = svc.router.boards[BOARD].admission.dedup.nbytes
    finally:
        await svc.close()
    grown = max(1, full["rss"] - empty["rss"])
    return {
        "players": args.players, "version": version, "fill_seconds": fill_s, "archive_seconds": archive_s,
        "archive_file_bytes": os.path.getsize(path),
        "partition_bytes_before": bytes_before, "partitions_before": parts_before,
        "partition_bytes_after": bytes_after, "partitions_after": parts_after,
        "partition_bytes_freed_share": (bytes_before - bytes_after) / max(1, bytes_before),
        "rss_empty": empty, "rss_full": full, "rss_archived": archived, "rss_archived_trimmed": trimmed,
        "rss_after_reads": after_reads,
        "rss_freed_share": (full["rss"] - archived["rss"]) / grown,
        "rss_freed_share_trimmed": (full["rss"] - trimmed["rss"]) / grown,
        "router_dedup_bytes": dedup_bytes,
        "result_cache_bytes_before": results_before, "result_cache_bytes_after": results_after,
        "rss_freed_share_shards": (full["rss"] - archived["rss"]) / max(1, grown - dedup_bytes),
        "player_read_us": _stats(player_us), "top100_read_us": _stats(top_us),
        "history_events": history_events, "history_section_bytes": history_bytes,
        "history_read_seconds": sum(read_s), "history_encode_seconds": sum(encode_s),
        "history_read_us": _stats(history_us),
    }


def _stats(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"median": statistics.median(s), "p99": s[min(len(s) - 1, int(0.99 * len(s)))], "max": s[-1]}


def _mib(b: int | None) -> str:
    return "?" if b is None else f"{b / 2**20:,.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks archive", description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=1_000_000)
    p.add_argument("--events-per-player", type=int, default=1, help="rounds of one event per player")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the board")
    p.add_argument("--shards", type=int, default=2, help="in-process shards")
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--warm-players", type=int, default=10_000, help="players of the warm-up board (archived first)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=None, help="where the service writes (default: a temporary directory)")
    p.add_argument("--json", default=None, help="write the results here as JSON")
    args = p.parse_args(argv)
    params = {k: getattr(args, k) for k in ("players", "events_per_player", "partitions", "shards", "batch", "reads",
                                            "warm_players", "seed")}
    machine = describe()
    load_before = os.getloadavg()
    print(header(params, machine))
    print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min, before)", flush=True)
    if args.data_dir:
        out = asyncio.run(_measure(args, Path(args.data_dir)))
    else:
        with tempfile.TemporaryDirectory(prefix="flowrank-archive-bench-") as tmp:
            out = asyncio.run(_measure(args, Path(tmp)))
    load_after = os.getloadavg()
    out |= {"machine": machine, "params": params, "load_before": load_before, "load_after": load_after}
    print(f"  filled  : {args.players:,} players, {args.players * args.events_per_player:,} events in "
          f"{out['fill_seconds']:.1f} s; archived in {out['archive_seconds']:.2f} s; archive file "
          f"{_mib(out['archive_file_bytes'])}")
    print(f"  history : {out['history_events']:,} events, {_mib(out['history_section_bytes'])} of the archive "
          f"file; written in {out['history_read_seconds'] + out['history_encode_seconds']:.2f} s (journals read "
          f"from the shards {out['history_read_seconds']:.2f} s, section encoded {out['history_encode_seconds']:.2f} s)")
    print(f"  partitions: {out['partitions_before']} holding {_mib(out['partition_bytes_before'])} before, "
          f"{out['partitions_after']} holding {_mib(out['partition_bytes_after'])} after: "
          f"{100 * out['partition_bytes_freed_share']:.1f}% freed")
    for name in ("rss_empty", "rss_full", "rss_archived", "rss_archived_trimmed", "rss_after_reads"):
        r = out[name]
        print(f"  {name:<21}: rss {_mib(r['rss'])} (anon {_mib(r['anon'])}, file {_mib(r['file'])})")
    print(f"  RSS the board added, freed by archiving: {100 * out['rss_freed_share']:.1f}% "
          f"({100 * out['rss_freed_share_trimmed']:.1f}% after malloc_trim)")
    print(f"  shards' cached batch results: {_mib(out['result_cache_bytes_before'])} before, "
          f"{_mib(out['result_cache_bytes_after'])} after")
    print(f"  kept by the router, not the shards: the board's dedup table {_mib(out['router_dedup_bytes'])} "
          "(redeliveries still answer DUPLICATE_IGNORED; it is in every RSS figure above)")
    print(f"  RSS the board added to the shards (its growth less the router's dedup table), freed: "
          f"{100 * out['rss_freed_share_shards']:.1f}% (issue 13 target >= 90%: "
          f"{'met' if out['rss_freed_share_shards'] >= 0.9 else 'NOT met'})")
    pr, tr = out["player_read_us"], out["top100_read_us"]
    print(f"  reads from the archive: player (ties) median {pr['median']:.0f} µs p99 {pr['p99']:.0f} µs; "
          f"top 100 median {tr['median']:.0f} µs p99 {tr['p99']:.0f} µs")
    hr = out["history_read_us"]
    print(f"  history from the archive: median {hr['median']:.0f} µs p99 {hr['p99']:.0f} µs")
    print(f"  load    : {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (1/5/15 min, after)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0
