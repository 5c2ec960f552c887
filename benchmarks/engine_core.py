"""Single-partition engine core benchmark (issue 2): ``engine.core.board.Board`` in-process.

Measures, ``--repeat`` times after one warm-up, and prints min/median/max:

* events applied per second through ``Board.apply_batch`` (batches of
  ``--batch``, default 1000), best_score, the seeded Zipf-skewed workload of
  :func:`benchmarks.workload.generate` (~1% byte-identical redeliveries);
* exact-rank lookups per second: one ``Board.player`` call per lookup, and
  the batched ``Board.ranks(ids)`` (``--rank-batch`` ids per call);
* ``Board.top(0, 100)`` and ``Board.around(pid, 5)`` reads per second;
* memory: bytes per ranked player of board state (rows + rank index: every
  object reachable from them, shared objects counted once), bytes per
  remembered event id of the dedup table (its arrays), and bytes per event of the
  per-player history (+ event-id -> player map), with the RSS growth of the
  whole build as a cross-check.

Side by side in the same run: a plain ``dict`` + ``SortedList`` of
``(-value, achieved_at, player_id)`` keys (the best-score guard only: no
dedup, history, versions or results), and, when ``redis-server`` exists,
the exact-semantics Redis peer (``benchmarks/redis_peer.py``) on the same
events (``--redis-events`` caps its ingest; ``--no-redis`` skips it).

Usage::

    python -m benchmarks.engine_core --players 1000000 --events 2000000 --seed 1 --repeat 3

The helpers (:func:`to_events`, :func:`ingest_board`, :func:`read_rates`,
:func:`board_memory`, :func:`baseline_ingest`) are reused by
``benchmarks/scenarios/flowrank.py``; the baseline, :func:`rate` and
:func:`rss_bytes` by ``benchmarks/core_bench.py`` (issue 10).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from typing import Callable, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from sortedcontainers import SortedList  # noqa: E402

from engine.core.board import Board  # noqa: E402
from engine.core.records import outcome_of  # noqa: E402
from engine.core.model import BoardSpec, Policy, ScoreEvent  # noqa: E402

TARGETS = {
    "apply_events_per_s": (400_000, "higher"),
    "rank_lookups_per_s_batched": (300_000, "higher"),
    "board_bytes_per_player": (200, "lower"),
    "dedup_bytes_per_event_id": (80, "lower"),
}


# ----------------------------------------------------------------- building blocks


def to_events(tuples: Sequence[tuple]) -> list[ScoreEvent]:
    """Workload tuples -> ScoreEvent objects (what a decoded request holds); untimed."""
    return [ScoreEvent(*t) for t in tuples]


def new_board(board_id: str, policy: str = "best_score") -> Board:
    return Board(BoardSpec(board_id, Policy(policy)))


def ingest_board(events: Sequence[ScoreEvent], batch: int = 1000, board: Board | None = None,
                 policy: str = "best_score") -> tuple[float, Board]:
    """Apply ``events`` in batches; returns (wall seconds, board)."""
    b = board or new_board(events[0].board_id, policy)
    apply = b.apply_batch
    n = len(events)
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        apply(events[i : i + batch])
    return time.perf_counter() - t0, b


def baseline_ingest(tuples: Sequence[tuple], batch: int = 1000) -> tuple[float, dict, SortedList]:
    """The floor: dict player -> key + SortedList of keys, best-score guard only."""
    rows: dict = {}
    index = SortedList()
    t0 = time.perf_counter()
    for i in range(0, len(tuples), batch):
        for _, _, pid, value, ach, _ in tuples[i : i + batch]:
            key = (-value, ach, pid)
            old = rows.get(pid)
            if old is None:
                rows[pid] = key
                index.add(key)
            elif key < old:
                index.remove(old)
                index.add(key)
                rows[pid] = key
    return time.perf_counter() - t0, rows, index


def sample_players(players: int, n: int, seed: int, salt: int = 0) -> list[str]:
    rnd = random.Random(seed * 1_000_003 + salt)
    return [f"p-{rnd.randrange(players):08d}" for _ in range(n)]


def rate(fn: Callable[[], object], ops: int) -> float:
    """``ops`` divided by the wall seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - t0)


def read_rates(board: Board, ids: Sequence[str], rank_batch: int = 1000) -> dict[str, float]:
    """Ops/s of single exact rank (Board.player), batched Board.ranks, top-100, around(5)."""
    player, ranks, top, around = board.player, board.ranks, board.top, board.around
    n = len(ids)
    out = {
        "rank_lookups_per_s_single": rate(lambda: [player(p) for p in ids], n),
        "rank_lookups_per_s_batched": rate(
            lambda: [ranks(ids[i : i + rank_batch]) for i in range(0, n, rank_batch)], n),
    }
    k = max(200, n // 20)
    out["top100_reads_per_s"] = rate(lambda: [top(0, 100) for _ in range(k)], k)
    out["around5_reads_per_s"] = rate(lambda: [around(p, 5) for p in ids[:k * 4]], min(n, k * 4))
    return out


def baseline_read_rates(rows: dict, index: SortedList, ids: Sequence[str]) -> dict[str, float]:
    bis, get = index.bisect_left, rows.get
    n = len(ids)
    k = max(200, n // 20)
    return {
        "rank_lookups_per_s_batched": rate(lambda: [bis(get(p)) + 1 for p in ids], n),
        "top100_reads_per_s": rate(lambda: [list(index.islice(0, 100)) for _ in range(k)], k),
    }


# ----------------------------------------------------------------- memory


def deep_size(roots: Sequence[object], seen: set[int]) -> int:
    """Bytes of every object reachable from ``roots`` through dicts, lists,
    tuples, sets, SortedList internals and objects' ``__slots__`` and
    ``__dict__`` attributes, skipping anything already in ``seen`` (shared
    objects count once, for whoever is walked first). Small ints (-5..256)
    and enum members are interned: free."""
    from enum import Enum

    size = 0
    getsizeof = sys.getsizeof
    stack = list(roots)
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen:
            continue
        seen.add(i)
        t = type(o)
        if t is int:
            if -5 <= o <= 256:
                continue
            size += getsizeof(o)
        elif t is str or t is bytes or t is float or o is None or t is bool:
            size += getsizeof(o) if o is not None and t is not bool else 0
        elif isinstance(o, Enum):
            continue
        elif t is dict:
            size += getsizeof(o)
            stack.extend(o.keys())
            stack.extend(o.values())
        elif t in (list, tuple, set, frozenset):
            size += getsizeof(o)
            stack.extend(o)
        elif t is SortedList:
            size += getsizeof(o)
            stack.extend((o._lists, o._maxes, o._index))
        else:
            size += getsizeof(o)
            for slot in getattr(t, "__slots__", ()):
                v = getattr(o, slot, None)
                if v is not None:
                    stack.append(v)
            if isinstance(getattr(o, "__dict__", None), dict) and not isinstance(o, type):
                stack.append(o.__dict__)  # plain objects: their attributes (numpy arrays count their own buffer)
    return size


def board_memory(board: Board) -> dict[str, float]:
    """Bytes per ranked player (rows + index), per dedup id, per history event."""
    p = board.partition
    players = max(1, len(p.players))
    state = p.nbytes()  # ids, rows and rank index are arrays (engine/core/partition.py)
    # the dedup table holds no Python object per id (engine/core/dedup.py): its arrays
    dedup = board.admission.dedup
    ids = max(1, len(dedup))
    dedup_own = dedup.nbytes
    history = p.journal.nbytes()
    events = max(1, len(p.journal))
    return {
        "board_bytes_per_player": state / players,
        "dedup_bytes_per_event_id": dedup_own / ids,
        "dedup_bytes_per_event_id_excl_id_string": dedup_own / ids,  # no id strings to exclude any more
        "history_bytes_per_event": history / events,
        "players": players,
        "dedup_ids": ids,
        "history_events": events,
    }


def baseline_memory(rows: dict, index: SortedList) -> float:
    return deep_size([rows, index], set()) / max(1, len(rows))


def rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_split() -> dict[str, int]:
    """The process's resident memory by kind (Linux ``/proc/self/status``):
    ``anon`` (its own allocations) and ``file`` (mapped file pages, which the
    kernel can drop and read back), in bytes; empty elsewhere."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:")):
                    out[line.split(":")[0][3:].lower()] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


# ----------------------------------------------------------------- Redis side


def redis_side(tuples: Sequence[tuple], ids: Sequence[str], batch: int, repeat: int, max_events: int) -> dict[str, list[float]]:
    """The exact Redis peer on the same events (no persistence): ingest/s, ranks/s, top/s, around/s."""
    from .redis_peer import RedisBoard, RedisServer

    srv = RedisServer()
    srv.start()
    out: dict[str, list[float]] = {}
    try:
        c = srv.client()
        ev = tuples[:max_events]
        for rep in range(max(1, repeat)):
            c.flushall()
            b = RedisBoard(c, ev[0][0])
            t0 = time.perf_counter()
            b.ingest(ev, batch=batch)
            out.setdefault("apply_events_per_s", []).append(len(ev) / (time.perf_counter() - t0))
        n = min(len(ids), 20_000)
        sub = ids[:n]
        out["rank_lookups_per_s_single"] = [rate(lambda: [b.rank(p) for p in sub[:2000]], 2000)]
        out["rank_lookups_per_s_batched"] = [rate(lambda: b.ranks(sub, batch=batch), n)]
        out["top100_reads_per_s"] = [rate(lambda: [b.top(100) for _ in range(500)], 500)]
        out["around5_reads_per_s"] = [rate(lambda: [b.around(p, 5) for p in sub[:2000]], 2000)]
        out["board_bytes_per_player"] = [b.memory_per_player()]
        out["dedup_bytes_per_event_id"] = [b.dedup_memory()]
        out["_events"] = [len(ev)]
    finally:
        srv.stop()
    return out


# ----------------------------------------------------------------- CLI


def stats_row(name: str, values: Sequence[float], unit: str = "") -> str:
    if not values:
        return f"  {name:<44} {'-':>12}"
    lo, med, hi = min(values), statistics.median(values), max(values)
    return f"  {name:<44} {lo:>14,.1f} {med:>14,.1f} {hi:>14,.1f}  {unit}"


def header(params: dict) -> str:
    from .machine import describe, header as mh

    h = mh(params, describe())
    try:
        load = os.getloadavg()
        h += f"\n  load    : {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min) at start"
    except OSError:
        pass
    return h


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--reads", type=int, default=200_000, help="rank lookups per repeat")
    ap.add_argument("--rank-batch", type=int, default=1000)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--redis-events", type=int, default=None, help="cap the Redis peer's ingest (default: all)")
    ap.add_argument("--redis-repeat", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--gc-tuned", action="store_true",
                    help="gc.freeze() the workload and gc.set_threshold(50000, 20, 100): what a server setting buys")
    args = ap.parse_args(argv)

    from .workload import generate

    params = {k: getattr(args, k) for k in ("players", "events", "seed", "repeat", "batch", "reads", "rank_batch")}
    params["policy"] = "best_score"
    params["gc"] = "tuned (freeze + threshold 50000,20,100)" if args.gc_tuned else "default"
    print(header(params), flush=True)
    t0 = time.perf_counter()
    w = generate(args.seed, args.players, args.events, policy="best_score")
    st = w.stats()
    print(f"  workload: {st['events']} events, {st['active_players']} players, dup {st['dup_share']:.2%}, "
          f"top 1% post {st['top1pct_share']:.0%}, digest {w.digest()[:16]} ({time.perf_counter() - t0:.1f}s)",
          flush=True)
    events = to_events(w.events)
    ids = sample_players(w.players, args.reads, args.seed, salt=11)
    if args.gc_tuned:
        gc.collect()
        gc.freeze()  # the workload itself is never garbage: keep it out of every collection
        gc.set_threshold(50_000, 20, 100)

    res: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    board = None
    gc.collect()
    # warm-up on a slice, then --repeat full builds (each on a fresh board)
    ingest_board(events[: min(len(events), 50_000)], args.batch)
    for rep in range(args.repeat):
        board = None
        gc.collect()
        rss0 = rss_bytes()
        secs, board = ingest_board(events, args.batch)
        rss1 = rss_bytes()
        res.setdefault("apply_events_per_s", []).append(len(events) / secs)
        res.setdefault("rss_growth_bytes_per_player", []).append((rss1 - rss0) / max(1, len(board.partition.players)))
        for k, v in read_rates(board, ids, args.rank_batch).items():
            res.setdefault(k, []).append(v)
        print(f"  repeat {rep + 1}: {len(events) / secs:,.0f} events/s applied "
              f"({secs:.2f}s), rss +{(rss1 - rss0) / 2**20:,.0f} MiB", flush=True)
    mem = board_memory(board)
    for k in ("board_bytes_per_player", "dedup_bytes_per_event_id", "dedup_bytes_per_event_id_excl_id_string",
              "history_bytes_per_event"):
        res[k] = [mem[k]]
    outcomes: dict[str, int] = {}
    # outcome mix of the last build (sanity: ~1% DUPLICATE_IGNORED)
    journal = board.partition.journal
    for code, count in zip(*np.unique(journal.out[: len(journal)], return_counts=True)):
        name = outcome_of(int(code)).value
        outcomes[name] = outcomes.get(name, 0) + int(count)
    board = None
    gc.collect()

    if not args.no_baseline:
        for rep in range(args.repeat):
            secs, rows, index = baseline_ingest(w.events, args.batch)
            base.setdefault("apply_events_per_s", []).append(len(w.events) / secs)
            for k, v in baseline_read_rates(rows, index, ids).items():
                base.setdefault(k, []).append(v)
        base["board_bytes_per_player"] = [baseline_memory(rows, index)]
        rows = index = None
        gc.collect()

    red: dict[str, list[float]] = {}
    if not args.no_redis:
        try:
            from .redis_peer import redis_server_version

            if redis_server_version():
                red = redis_side(w.events, ids, args.batch, args.redis_repeat, args.redis_events or len(w.events))
        except Exception as e:  # noqa: BLE001 - the peer is optional here
            print(f"  redis peer skipped: {type(e).__name__}: {e}")

    print(f"\nFlowRank Board (engine.core.board), {len(events):,} events, {mem['players']:,} ranked players"
          f"\n  {'metric':<44} {'min':>14} {'median':>14} {'max':>14}")
    units = {"apply_events_per_s": "events/s", "board_bytes_per_player": "B",
             "dedup_bytes_per_event_id": "B", "dedup_bytes_per_event_id_excl_id_string": "B",
             "history_bytes_per_event": "B", "rss_growth_bytes_per_player": "B (all state / player)"}
    for k, v in res.items():
        print(stats_row(k, v, units.get(k, "ops/s")))
    print(f"  outcomes: {dict(sorted(outcomes.items()))}")
    if base:
        print("\nBaseline dict + SortedList (best-score guard only: no dedup/history/results)")
        for k, v in base.items():
            print(stats_row(k, v, units.get(k, "ops/s")))
    if red:
        n = int(red.pop("_events")[0])
        print(f"\nRedis exact peer (no persistence, {n:,} events ingested, pipelined {args.batch})")
        for k, v in red.items():
            print(stats_row(k, v, units.get(k, "ops/s")))
    print("\nTargets (issue 2), FlowRank median:")
    for k, (target, way) in TARGETS.items():
        med = statistics.median(res[k])
        ok = med >= target if way == "higher" else med <= target
        extra = ""
        if k in base:
            extra += f"; baseline {statistics.median(base[k]):,.0f}"
        if k in red:
            extra += f"; redis {statistics.median(red[k]):,.0f}"
        print(f"  {k:<30} {med:>12,.0f} vs {'>=' if way == 'higher' else '<='} {target:,}: "
              f"{'MET' if ok else 'MISSED'}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
