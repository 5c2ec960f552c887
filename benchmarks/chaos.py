"""Long fault-injection run (issue 7): ``python -m benchmarks.chaos --duration 120 --seed 1``.

Runs :func:`tests.chaos.harness.run`: concurrent HTTP writers with recorded
acknowledgements against a ``flowrank serve`` subprocess on a loopback port,
a nemesis that SIGKILLs the server's whole session (and, with ``--engine
ray``, single shard actor processes) and restarts it on the same data
directory, then the history checker (every acknowledged event admitted once,
no event twice, top lists equal a brute-force oracle, checksums equal over
two more kill-and-replay restarts). Exits 1 if any anomaly was found.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of writes under the nemesis")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--min-gap", type=float, default=1.0, help="min seconds between faults")
    p.add_argument("--max-gap", type=float, default=4.0, help="max seconds between faults")
    p.add_argument("--repeat", type=int, default=1, help="runs, seeds seed..seed+repeat-1")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    a = p.parse_args(argv)

    from tests.chaos.harness import run  # noqa: PLC0415

    try:
        import ray  # noqa: PLC0415

        ray_v = ray.__version__
    except ImportError:
        ray_v = "-"
    print(f"# chaos: python {platform.python_version()} cpu {os.cpu_count()} ({platform.processor() or platform.machine()})"
          f" ray {ray_v}")
    print(f"# params: engine={a.engine} duration={a.duration} writers={a.writers} gaps={a.min_gap}-{a.max_gap}"
          f" seed={a.seed} repeat={a.repeat}")
    bad = 0
    for i in range(a.repeat):
        work = Path(tempfile.mkdtemp(prefix="fr-chaos-"))
        try:
            rep = asyncio.run(run(work, engine=a.engine, duration=a.duration, seed=a.seed + i, writers=a.writers,
                                  min_gap=a.min_gap, max_gap=a.max_gap))
        finally:
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
        bad += len(rep.anomalies)
        print(f"RESULT {rep.line()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
