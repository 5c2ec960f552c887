"""Capacity (issue 10): how many ranked players one board holds in an RSS budget.

``python -m benchmarks capacity --max-rss-gib 20`` fills one
``engine.core.board.Board`` through ``Board.ingest`` with batches of ``--batch``
(100,000) synthetic new players, one first score each, reading the RSS of
this process and all its children (psutil) after every batch, until a
reading passes ``--max-rss-gib`` or ``--max-players`` players are in. The
players held are those of the last reading within the limit (arrays grow
by doubling, so the batch that passes it may overshoot by one growth step);
it reports them, RSS and bytes per player (RSS growth since the empty board,
and ``partition.nbytes()`` when the partition has it), and the fill rate.

Then it checks exact ranks against an oracle that never looks at the board:
every batch is regenerated from the seed (numpy only, no strings), each
row's comparator key ``(-value, achieved_at, player_id)`` packed into one
int64, and for a random sample of ``--sample`` (1,000) players the expected
rank is 1 + the number of rows whose key is smaller. ``Board.ranks`` of the
sample must equal it, and ``Board.top(0, 100)`` must list the oracle's best
100 in order. Player ids are ``c-`` + 10 digits, so code-point order is
index order; values take 2**17 levels and times 2**16 whole seconds, so
value and time ties are frequent and the id decides them.

Usage::

    python -m benchmarks capacity --max-rss-gib 20 --json OUT
    python -m benchmarks capacity --max-players 200000           # a quick check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.core_bench import GC_DEFAULT, GC_SERVER, _load, _nbytes, ingest, new_board, settle_gc
from benchmarks.machine import describe, header
from benchmarks.workload import EPOCH0_MS
from engine.core import records as R
from engine.core.columns import ScoreColumns
from engine.core.model import Outcome

BOARD_ID = "bench:capacity:S1:global"
VALUE_BITS, TIME_BITS, ID_BITS = 17, 16, 30  # 63 bits: one non-negative int64 key per row
MAX_PLAYERS = 1 << ID_BITS
FIRST = R.CODE[Outcome.APPLIED_FIRST_SCORE]


def synthetic(seed: int, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, achieved seconds) of players ``start .. start + n - 1``: the same for the same arguments."""
    rng = np.random.Generator(np.random.PCG64([seed, start]))
    return rng.integers(0, 1 << VALUE_BITS, n, dtype=np.int64), rng.integers(0, 1 << TIME_BITS, n, dtype=np.int64)


def player_ids(start: int, n: int) -> list[str]:
    return list(map("c-{:010d}".format, range(start, start + n)))


def columns(seed: int, start: int, n: int) -> ScoreColumns:
    values, secs = synthetic(seed, start, n)
    achieved = EPOCH0_MS + secs * 1000
    return ScoreColumns(BOARD_ID, list(map("ce-{:010d}".format, range(start, start + n))), player_ids(start, n),
                        values, achieved, achieved + 1000)


def packed_keys(start: int, values: np.ndarray, secs: np.ndarray) -> np.ndarray:
    """The comparator key as one int64: smaller is better (higher value, then earlier, then smaller id)."""
    idx = np.arange(start, start + len(values), dtype=np.int64)
    return (((1 << VALUE_BITS) - 1 - values) << (TIME_BITS + ID_BITS)) | (secs << ID_BITS) | idx


def tree_rss() -> int:
    """RSS of this process plus every descendant."""
    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def batches(players: int, batch: int):
    for start in range(0, players, batch):
        yield start, min(batch, players - start)


def oracle(seed: int, players: int, batch: int, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(expected rank of each sampled player, best 100 player indices in order), from the seed alone. O(players)."""
    want = np.sort(sample)
    keys = np.empty(len(want), dtype=np.int64)
    for start, n in batches(players, batch):  # pass 1: the sampled players' keys
        lo, hi = np.searchsorted(want, [start, start + n])
        if hi > lo:
            values, secs = synthetic(seed, start, n)
            keys[lo:hi] = packed_keys(start, values, secs)[want[lo:hi] - start]
    order = np.argsort(keys)
    sorted_keys = keys[order]
    below = np.zeros(len(want) + 1, dtype=np.int64)
    best = np.empty(0, dtype=np.int64)
    for start, n in batches(players, batch):  # pass 2: how many rows beat each sampled key
        values, secs = synthetic(seed, start, n)
        k = packed_keys(start, values, secs)
        below += np.bincount(np.searchsorted(sorted_keys, k, side="right"), minlength=len(want) + 1)
        best = np.concatenate([best, k])
        if len(best) > 100:
            best = np.partition(best, 99)[:100]
    # below[j] counts rows with exactly j sampled keys <= their key; those rows beat sampled keys j, j+1, ...
    better_sorted = np.cumsum(below)[: len(want)]
    expected = np.empty(len(want), dtype=np.int64)
    expected[order] = 1 + better_sorted
    # map back from `want` (sorted indices) to the caller's sample order
    pos = np.searchsorted(want, sample)
    return expected[pos], np.sort(best) & ((1 << ID_BITS) - 1)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks capacity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-rss-gib", type=float, default=20.0, help="stop when the process tree holds this much")
    ap.add_argument("--max-players", type=int, default=None, help="stop at this many players (a small run)")
    ap.add_argument("--batch", type=int, default=100_000, help="new players per Board.ingest call")
    ap.add_argument("--sample", type=int, default=1000, help="players whose exact rank is checked")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gc", choices=("server", "default"), default="server",
                    help="server: engine.core.gc_tuning.tune() as `flowrank serve` does (default); default: CPython's")
    ap.add_argument("--json", default=None, metavar="OUT")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    limit = int(args.max_rss_gib * 2**30)
    cap = min(args.max_players or MAX_PLAYERS, MAX_PLAYERS)
    load_before = _load()
    machine = describe()
    params = {"max_rss_gib": args.max_rss_gib, "max_players": args.max_players, "batch": args.batch,
              "sample": args.sample, "seed": args.seed}
    gc_note = GC_SERVER if args.gc == "server" else GC_DEFAULT
    print(header(params, machine).replace("FlowRank benchmarks", "FlowRank capacity benchmark (issue 10)"))
    print(f"  load    : {load_before} (1/5/15 min) before")
    print(f"  gc      : {gc_note}")

    warm = new_board(BOARD_ID)
    ingest(warm, [columns(args.seed + 1, 0, 1000)])
    warm.ranks(player_ids(0, 10))
    warm.top(0, 100)
    del warm
    settle_gc(args.gc)
    print("  warm-up : untimed, 1,000 players through a throwaway board (numba, if used, compiles here)", flush=True)

    rss_start = peak = tree_rss()
    board = new_board(BOARD_ID)
    players, fill_s, build_s, reason = 0, 0.0, 0.0, "max players"
    within = (0, rss_start)  # (players, rss) at the last reading within the limit
    shown = t_start = time.perf_counter()
    while players < cap:
        t0 = time.perf_counter()
        cols = columns(args.seed, players, min(args.batch, cap - players))
        t1 = time.perf_counter()
        res = board.ingest(cols)
        fill_s += time.perf_counter() - t1
        build_s += t1 - t0
        if not bool(np.all(res.codes == FIRST)):
            print(f"error: a new player's first score was not APPLIED_FIRST_SCORE (batch at {players:,})", file=sys.stderr)
            return 1
        players += len(cols)
        del cols, res
        rss = tree_rss()
        peak = max(peak, rss)
        if time.perf_counter() - shown >= 10:
            shown = time.perf_counter()
            print(f"  {players:>13,} players, rss {rss / 2**30:6.2f} GiB, {(rss - rss_start) / players:,.0f} B/player, "
                  f"{players / fill_s:,.0f} players/s ingested ({shown - t_start:,.0f}s)", flush=True)
        if rss > limit:
            reason = "RSS limit passed"
            break
        within = (players, rss)
    held, held_rss = within
    rss_end = tree_rss()
    nbytes = part_nbytes / players if (part_nbytes := _nbytes(board.partition)) is not None else None
    print(f"  filled  : {players:,} players ({reason}; rss {rss_end / 2**30:.2f} GiB, peak {peak / 2**30:.2f}, "
          f"start {rss_start / 2**30:.2f}), {players / fill_s:,.0f} players/s ingested, "
          f"{build_s:.1f}s building columns (untimed)", flush=True)

    t0 = time.perf_counter()
    rng = np.random.Generator(np.random.PCG64([args.seed, 1 << 40]))
    sample = rng.choice(players, size=min(args.sample, players), replace=False).astype(np.int64)
    expected, best = oracle(args.seed, players, args.batch, sample)
    got = board.ranks([f"c-{i:010d}" for i in sample.tolist()])
    mismatches = sum(1 for g, e in zip(got, expected.tolist()) if g != e)
    top = [e.player_id for e in board.top(0, 100).entries]
    top_ok = top == [f"c-{i:010d}" for i in best.tolist()]
    exact = mismatches == 0 and top_ok
    load_after = _load()
    out = {
        "players": held,
        "rss_bytes": held_rss,
        "players_filled": players,
        "stop_reason": reason,
        "rss_limit_bytes": limit,
        "rss_start_bytes": rss_start,
        "rss_end_bytes": rss_end,
        "rss_peak_bytes": peak,
        "rss_bytes_per_player": (held_rss - rss_start) / max(1, held),
        "nbytes_per_player": nbytes,
        "dedup_ids": len(board.admission.dedup),
        "fill_players_per_s": players / fill_s if fill_s else None,
        "sample": len(sample),
        "rank_mismatches": mismatches,
        "top100_matches": top_ok,
        "exact": exact,
    }
    print(f"\nOne board: {held:,} ranked players in {held_rss / 2**30:.2f} GiB of process tree RSS "
          f"(the last reading within {args.max_rss_gib:g} GiB; {players:,} when it stopped)")
    print(f"  bytes per player : {out['rss_bytes_per_player']:,.1f} (RSS growth since the empty board)"
          + (f", {nbytes:,.1f} (partition.nbytes(), at {players:,})" if nbytes is not None else ""))
    print(f"  dedup ids held   : {out['dedup_ids']:,} (retention of a default board)")
    print(f"  exact ranks      : {len(sample) - mismatches:,}/{len(sample):,} sampled players match the oracle; "
          f"top-100 {'matches' if top_ok else 'DIFFERS'} ({time.perf_counter() - t0:.1f}s to check)")
    if held >= 150_000_000 and held_rss <= 20 * 2**30:
        verdict = "MET"
    elif reason == "max players":
        verdict = "n/a (stopped by --max-players)"
    elif args.max_rss_gib < 20:
        verdict = f"n/a (limit {args.max_rss_gib:g} GiB)"
    else:
        verdict = "MISSED"
    out["target_150m_in_20gib"] = verdict
    print(f"  target           : >= 150M players in 20 GiB (issue 10): {verdict}")
    print(f"  load             : {load_before} before, {load_after} after (1/5/15 min)")
    if args.json:
        doc = {"command": "python -m benchmarks capacity " + " ".join(sys.argv[2:] if argv is None else argv),
               "params": params, "machine": machine, "gc": gc_note, "load_before": load_before,
               "load_after": load_after, **out}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
        print(f"wrote {args.json}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
