"""Chaos runs (issue 14): ``python -m benchmarks chaos --kills 100 --engine local|ray``.

Runs :func:`tests.chaos.harness.run`: concurrent HTTP writers with recorded
acknowledgements against a ``flowrank serve`` subprocess on a loopback port,
a nemesis that SIGKILLs the server's whole session (and, with ``--engine
ray``, single shard actor processes, alternating) at random moments and
restarts it on the same data directory, until it has killed ``--kills``
times; then the history checker: every acknowledged event admitted exactly
once with its acknowledged outcome, no event twice, no phantom, top lists
equal a brute-force oracle, checksums and histories equal over two more
kill-and-replay restarts.

Writes ``chaos.json`` (machine, parameters, load average, every kill with
its recovery time, the counts and anomalies) and ``chaos.png`` (recovery
time per kill; acknowledged events over the kills) into ``--out``. Exits 1 on
any anomaly, or when fewer kills than asked were made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from . import nearest_rank
from .machine import describe, header


def summary(kills: list[dict]) -> dict:
    """Recovery-time statistics per kind of kill (seconds)."""
    out = {}
    for kind in sorted({k["kind"] for k in kills}):
        xs = sorted(k["recovery_s"] for k in kills if k["kind"] == kind)
        out[kind] = {
            "kills": len(xs),
            "p50_s": statistics.median(xs),
            "p99_s": nearest_rank(xs, 0.99),
            "max_s": xs[-1],
        }
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kills = result["kills"]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for kind, colour in (("server", "tab:red"), ("shard", "tab:blue")):
        ks = [k for k in kills if k["kind"] == kind]
        a.scatter([k["n"] for k in ks], [k["recovery_s"] for k in ks], s=12, c=colour, label=f"{kind} kill")
    a.set_ylabel("answering again after (s)")
    a.legend(loc="upper left")
    load = a.twinx()
    load.plot([k["n"] for k in kills], [k.get("load1", 0) for k in kills], c="grey", lw=0.8)
    load.set_ylabel("1-min load average", color="grey")
    r = result["report"]
    a.set_title(f"chaos, {result['params']['engine']} engine: {r['kill_count']} kills, "
                f"{r['events_checked']} events checked, {len(r['anomalies'])} anomalies")
    b.plot([k["n"] for k in kills], [k["acked_before"] for k in kills], c="tab:green")
    b.set_xlabel("kill")
    b.set_ylabel("events acknowledged before it")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks chaos", description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=100, help="kill cycles to make (server kills + shard kills)")
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--min-gap", type=float, default=0.5, help="min seconds between kills")
    p.add_argument("--max-gap", type=float, default=2.0, help="max seconds between kills")
    p.add_argument("--max-minutes", type=float, default=120.0, help="safety cap on the run")
    p.add_argument("--out", default=None, help="output directory (default results/chaos-<engine>-<UTC time>)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (server logs, data)")
    a = p.parse_args(argv)

    from tests.chaos.harness import run  # noqa: PLC0415

    params = {"engine": a.engine, "kills": a.kills, "seed": a.seed, "writers": a.writers,
              "gaps_s": [a.min_gap, a.max_gap], "players": 40, "boards": 2, "partitions": 2}
    machine = describe()
    print(header(params, machine), flush=True)
    load_before = os.getloadavg()
    print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min) before", flush=True)
    work = Path(tempfile.mkdtemp(prefix="fr-chaos-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        rep = asyncio.run(run(work, engine=a.engine, duration=a.max_minutes * 60, seed=a.seed, writers=a.writers,
                              min_gap=a.min_gap, max_gap=a.max_gap, kills=a.kills))
    finally:
        if a.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    kills = [asdict(k) for k in rep.kills]
    report = {k: v for k, v in asdict(rep).items() if k != "kills"}
    report["kill_count"] = rep.kill_count
    result = {"machine": machine, "params": params, "started": started,
              "load_before": load_before, "load_after": load_after,
              "report": report, "recovery": summary(kills), "kills": kills}
    out = Path(a.out or f"results/chaos-{a.engine}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out / "chaos.png")
    print(f"RESULT {rep.line()}")
    for kind, st in result["recovery"].items():
        print(f"recovery after a {kind} kill: p50 {st['p50_s']:.2f}s p99 {st['p99_s']:.2f}s max {st['max_s']:.2f}s"
              f" over {st['kills']} kills")
    print(f"load {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after; wrote {out}/chaos.json, chaos.png")
    if rep.kill_count < a.kills:
        print(f"only {rep.kill_count} of {a.kills} kills were made before the cap")
        return 1
    return 1 if rep.anomalies else 0


if __name__ == "__main__":
    raise SystemExit(main())
