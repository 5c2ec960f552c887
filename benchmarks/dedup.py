"""The dedup table (``engine.core.dedup.DedupTable``) against the dict window it replaced.

Measures, ``--repeat`` times after one warm-up, and prints min/median/max:

* bytes per remembered id at a full table (``--size`` ids at retention
  ``--size``): the table's arrays over ``len``; for the dict window the dict
  plus its fingerprint ints, with and without the id strings (the engine
  shares those with the event and the partition's history);
* ``remember`` per second while filling the table and, once full, with one
  eviction each (steady state);
* ``check`` per second of remembered ids (hits) and of new ids (misses);
* the admission pattern: batches of ``--batch`` ``check`` + ``add``, then
  ``trim`` (``Admission.admit`` / ``commit``), below the retention (nothing
  evicted) and at a full table (each batch evicts as many ids as it adds);
* ``check_many`` and ``remember_many`` ids per second (table only);
* the same table lookup without numba, for the record: the probe loop in
  Python over memoryviews of the arrays (one id, against ``check``), and
  vectorised in numpy (batches of hashed ids, no in-batch duplicates, against
  the numba kernel of ``check_many`` on the same hashed ids).

Usage::

    python -m benchmarks.dedup --size 1000000 --seed 1 --repeat 3
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

from engine.core.dedup import DedupTable, Seen, _check_many, fingerprint  # noqa: E402


class DictWindow:
    """The dict window before ``DedupTable`` (engine/core/dedup.py at 17eca82), the peer."""

    __slots__ = ("retention", "_seen")

    def __init__(self, retention: int):
        self.retention = retention
        self._seen: dict[str, int] = {}

    def check(self, event_id: str, fp: int) -> Seen:
        known = self._seen.get(event_id)
        if known is None:
            return Seen.NEW
        return Seen.DUPLICATE if known == fp else Seen.CONFLICT

    def remember(self, event_id: str, fp: int) -> None:
        seen = self._seen
        seen[event_id] = fp
        if len(seen) > self.retention:
            del seen[next(iter(seen))]

    def add(self, event_id: str, fp: int) -> None:
        self._seen[event_id] = fp

    def trim(self) -> None:
        seen = self._seen
        while len(seen) > self.retention:
            del seen[next(iter(seen))]

    def nbytes(self, with_ids: bool) -> int:
        n = sys.getsizeof(self._seen) + sum(sys.getsizeof(v) for v in self._seen.values())
        return n + (sum(sys.getsizeof(k) for k in self._seen) if with_ids else 0)


# ------------------------------------------------------------ numba-free lookups


def python_check(t: DedupTable, event_id: str, fp: int) -> Seen:
    """``DedupTable.check`` with the probe loop in Python (memoryviews)."""
    w0, w1, w2 = t._words(event_id)
    slots, ent = memoryview(t._slots), memoryview(t._ent).cast("B").cast("I")
    size = len(slots)
    if not size:
        return Seen.NEW
    i = (w0 * size) >> 32
    while True:
        p = slots[i]
        if p < 0:
            return Seen.NEW
        b = 4 * p
        if ent[b] == w0 and ent[b + 1] == w1 and ent[b + 2] == w2:
            return Seen.DUPLICATE if ent[b + 3] == (fp ^ (fp >> 32)) & 0xFFFFFFFF else Seen.CONFLICT
        i = i + 1 if i + 1 < size else 0


def numpy_check_many(t: DedupTable, ids: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """The table lookup of ``check_many``, vectorised: all probes advance one
    slot per round until each meets its id or an empty slot."""
    out = np.zeros(len(ids), np.int8)
    size = t._slots.size
    if not size:
        return out
    slot = (ids[:, 0].astype(np.int64) * size) >> 32
    live = np.arange(len(ids))
    while live.size:
        p = t._slots[slot]
        empty = p < 0
        row = t._ent[np.where(empty, 0, p)]
        hit = ~empty & (row[:, :3] == ids[live]).all(axis=1)
        out[live[hit]] = np.where(row[hit, 3] == cs[live[hit]], 1, 2)
        go = ~(empty | hit)
        live, slot = live[go], slot[go] + 1
        slot[slot == size] = 0
    return out


# ------------------------------------------------------------ measurements


def _rate(fn: Callable[[], object], ops: int) -> float:
    t0 = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - t0)


def make_ids(n: int, seed: int, salt: int = 0) -> list[str]:
    """``n`` distinct event ids shaped like the workload's (``e-`` + 9 digits)."""
    rng = random.Random(seed * 1_000_003 + salt)
    return list(map("e-{:09d}".format, rng.sample(range(10**9), n)))


def run_once(kind: str, size: int, batch: int, ids: Sequence[str], more: Sequence[str], fps: Sequence[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    fps = fps[: len(ids)]
    w = DedupTable(size, "g:bench") if kind == "table" else DictWindow(size)

    def fill():
        remember = w.remember
        for e, f in zip(ids, fps):
            remember(e, f)

    out["remember_fill_per_s"] = _rate(fill, len(ids))
    fresh = DedupTable(2 * size, "g:bench") if kind == "table" else DictWindow(2 * size)

    def admit_fresh():  # Admission.admit + commit below the retention: check, add, trim per batch, nothing evicted
        check, add, trim = fresh.check, fresh.add, fresh.trim
        for i in range(0, len(ids), batch):
            for e, f in zip(ids[i:i + batch], fps[i:i + batch]):
                if check(e, f) is Seen.NEW:
                    add(e, f)
            trim()

    out["admit_below_retention_per_s"] = _rate(admit_fresh, len(ids))
    if kind == "table":
        out["bytes_per_id"] = w.nbytes / len(w)
    else:
        out["bytes_per_id"] = w.nbytes(with_ids=True) / len(w._seen)
        out["bytes_per_id_excl_id_string"] = w.nbytes(with_ids=False) / len(w._seen)
    probe = ids[: len(more)]

    def hits():
        check = w.check
        for e, f in zip(probe, fps):
            check(e, f)

    def misses():
        check = w.check
        for e, f in zip(more, fps):
            check(e, f)

    out["check_hit_per_s"] = _rate(hits, len(probe))
    out["check_miss_per_s"] = _rate(misses, len(more))
    if kind == "table":
        out["check_hit_per_s_python_probe"] = _rate(lambda: [python_check(w, e, f) for e, f in zip(probe, fps)], len(probe))
        pf = fps[: len(probe)]
        cs = w._fold_many(pf, len(probe))
        words = w.words_many(probe)
        assert (numpy_check_many(w, words, cs) == w.check_many(probe, pf)).all()
        out["check_many_per_s"] = _rate(lambda: [w.check_many(probe[i:i + batch], pf[i:i + batch])
                                                  for i in range(0, len(probe), batch)], len(probe))
        # the lookup alone, ids already hashed: the numba kernel vs the same probe in numpy
        out["check_many_lookup_per_s_numba"] = _rate(
            lambda: [_check_many(w._ent, w._slots, words[i:i + batch], cs[i:i + batch], np.zeros(len(words[i:i + batch]), np.int8))
                     for i in range(0, len(probe), batch)], len(probe))
        out["check_many_lookup_per_s_numpy"] = _rate(
            lambda: [numpy_check_many(w, words[i:i + batch], cs[i:i + batch]) for i in range(0, len(probe), batch)],
            len(probe))

    half = len(more) // 2

    def admit():  # the same at a full table: each trim evicts what the batch added
        check, add, trim = w.check, w.add, w.trim
        for i in range(0, half, batch):
            for e, f in zip(more[i:i + batch], fps[i:i + batch]):
                if check(e, f) is Seen.NEW:
                    add(e, f)
            trim()

    out["admit_at_retention_per_s"] = _rate(admit, half)

    def steady():
        remember = w.remember
        for e, f in zip(more[half:], fps):
            remember(e, f)

    out["remember_evicting_per_s"] = _rate(steady, len(more) - half)
    if kind == "table":
        t2 = DedupTable(size, "g:bench")
        out["remember_many_fill_per_s"] = _rate(
            lambda: [t2.remember_many(ids[i:i + batch], fps[i:i + batch]) for i in range(0, len(ids), batch)], len(ids))
        assert len(t2) == len(ids)
        w._check()
    return out


def stats_row(name: str, values: Sequence[float], unit: str = "") -> str:
    lo, med, hi = min(values), statistics.median(values), max(values)
    return f"  {name:<34} {lo:>14,.1f} {med:>14,.1f} {hi:>14,.1f}  {unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1_000_000, help="retention = ids remembered")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=200_000, help="ids checked per measurement")
    args = ap.parse_args(argv)
    from .engine_core import header

    print(header({k: getattr(args, k) for k in ("size", "seed", "repeat", "batch", "probes")}))
    try:
        import numba

        print(f"  numba   : {numba.__version__} | numpy {np.__version__}")
    except ImportError:
        pass
    ids = make_ids(args.size, args.seed)
    more = make_ids(args.probes, args.seed, salt=1)
    more = list(set(more) - set(ids))
    rng = random.Random(args.seed)
    fps = [fingerprint(f"p-{rng.randrange(10**6):08d}", rng.randrange(1000), 0, 0) for _ in range(args.size)]
    warm = min(50_000, args.size)
    for kind in ("table", "dict"):
        run_once(kind, warm, args.batch, ids[:warm], more[: warm // 4], fps)
    res: dict[str, dict[str, list[float]]] = {"table": {}, "dict": {}}
    for rep in range(args.repeat):
        for kind in ("table", "dict"):  # interleaved: the load changes under us
            gc.collect()
            for k, v in run_once(kind, args.size, args.batch, ids, more, fps).items():
                res[kind].setdefault(k, []).append(v)
        print(f"  repeat {rep + 1} done", flush=True)
    for kind, title in (("table", "DedupTable (engine.core.dedup)"), ("dict", "dict window (before)")):
        print(f"\n{title}, {args.size:,} ids remembered\n  {'metric':<34} {'min':>14} {'median':>14} {'max':>14}")
        for k, v in res[kind].items():
            print(stats_row(k, v, "B" if k.startswith("bytes") else "ops/s"))
    print("\nratios table / dict (medians)")
    for k, v in res["table"].items():
        if k in res["dict"]:
            print(f"  {k:<34} {statistics.median(v) / statistics.median(res['dict'][k]):>8.2f}x")
    try:
        load = os.getloadavg()
        print(f"\n  load    : {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min) at end")
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
