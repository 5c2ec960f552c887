"""FlowRank benchmarks: every performance claim is a ratio against Redis, same run.

Run them with ``python -m benchmarks run [--quick] [--only NAME] ...`` (see
``benchmarks/README.md``). This package holds the pieces scenarios share:

* :data:`SCENARIOS`, the registry ``name -> Scenario``, and :func:`register`;
* :class:`Context`, what a scenario receives (seed, sizes, repeats, shard
  counts, Ray address, a workload cache, progress bars, shared servers);
* :func:`run_distributed`, which runs load-generator work as Ray tasks when a
  Ray address is given and in-process otherwise;
* small timing helpers (:func:`timed`, :func:`latency_samples`).

How FlowRank scenarios plug in
------------------------------
The Redis side lives in ``benchmarks/__main__.py``. The FlowRank side goes in
modules under ``benchmarks/scenarios/`` (a plain package; every module in it
is imported by ``python -m benchmarks`` before the registry is read). A
module registers its scenarios with the decorator::

    # benchmarks/scenarios/flowrank_board.py
    from benchmarks import Context, register
    from benchmarks.report import Sample

    @register("flowrank_ingest", system="flowrank")
    def flowrank_ingest(ctx: Context) -> list[Sample]:
        w = ctx.workload()                       # the same seeded events Redis gets
        out = []
        for shards in ctx.shards:                # one series per shard count
            for rep in range(ctx.repeat):
                ...                              # engine.core.board.Board(...).apply_batch(...)
                out.append(Sample("flowrank_ingest", "flowrank", "ingest_events_per_s",
                                  rate, "events/s", shards=shards, repeat=rep))
        return out

To be paired with Redis in the ratio table, a FlowRank sample must use the
**same metric name** as the Redis scenario it answers; :data:`FLOWRANK_SLOTS`
lists the expected scenario names and their metrics (``python -m benchmarks
list`` shows which slots are still empty).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .report import Sample

__all__ = [
    "Context",
    "FLOWRANK_SLOTS",
    "SCENARIOS",
    "Sample",
    "Scenario",
    "latency_samples",
    "percentile",
    "register",
    "run_distributed",
    "timed",
]


@dataclass(frozen=True)
class Scenario:
    name: str
    fn: Callable[["Context"], list[Sample]]
    system: str  # "redis" | "flowrank" | "check"
    doc: str = ""


SCENARIOS: dict[str, Scenario] = {}

# The FlowRank scenarios the report expects, and the Redis metrics they pair with.
# Empty until the engine side registers them (benchmarks/scenarios/*.py).
FLOWRANK_SLOTS: dict[str, tuple[str, ...]] = {
    "flowrank_ingest": ("ingest_events_per_s", "ingest_events_per_s_memory"),
    "flowrank_rank": ("rank_latency_p50_ms", "rank_latency_p99_ms", "rank_reads_per_s"),
    "flowrank_top": ("top100_latency_p50_ms", "top100_latency_p99_ms"),
    "flowrank_around": ("around10_latency_p50_ms", "around10_latency_p99_ms"),
    "flowrank_friends": ("friends50_latency_p50_ms", "friends50_latency_p99_ms"),
    "flowrank_memory": ("ranking_bytes_per_player", "total_bytes_per_player"),
    "flowrank_restart": ("restart_seconds",),
    "flowrank_tie_check": ("design_tie_order_correct",),
}


def register(name: str, *, system: str = "flowrank") -> Callable:
    """Decorator: add ``fn(ctx) -> list[Sample]`` to :data:`SCENARIOS` under ``name``."""

    def deco(fn: Callable[["Context"], list[Sample]]) -> Callable:
        if name in SCENARIOS and SCENARIOS[name].fn is not fn:
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = Scenario(name, fn, system, (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return deco


@dataclass
class Context:
    """What every scenario gets. Sizes are already resolved for ``--quick``.

    ``players``/``events`` size the workload; ``repeat`` is the number of
    measured repeats (after one warm-up); ``shards`` the FlowRank shard counts
    to sweep; ``ray_address`` is None for in-process load generation.
    ``generators`` is how many load-generator parts to split ingest into.
    """

    seed: int = 1
    players: int = 100_000
    events: int = 200_000
    repeat: int = 3
    quick: bool = True
    shards: Sequence[int] = (1, 2, 4)
    ray_address: str | None = None
    generators: int = 1
    batch: int = 1000
    read_ops: int = 2000
    progress_enabled: bool = True
    notes: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def workload(self, policy: str = "best_score", **overrides):
        """The run's seeded workload (cached per policy/overrides)."""
        from .workload import generate

        key = ("workload", policy, tuple(sorted(overrides.items())))
        if key not in self.cache:
            self.cache[key] = generate(self.seed, self.players, self.events, policy=policy, **overrides)
        return self.cache[key]

    def progress(self, total: int | None = None, desc: str = "", unit: str = "it"):
        """A tqdm bar (to stderr) for one phase; a no-op bar when disabled."""
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm is in the bench extra; degrade quietly
            return _NoBar()
        return tqdm(total=total, desc=desc, unit=unit, disable=not self.progress_enabled,
                    leave=False, dynamic_ncols=True, mininterval=0.5)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the whole run ends (shared servers, Ray, temp dirs)."""
        self._closers.append(fn)

    def close(self) -> None:
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # noqa: BLE001 - cleanup must not hide results
                pass


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def run_distributed(
    fn: Callable[[Any], Any],
    shards_of_work: Sequence[Any],
    ray_address: str | None = None,
    *,
    same_node: bool = False,
    num_cpus: float = 1,
    processes: int = 0,
) -> list[Any]:
    """Run ``fn(part)`` for every part; results in the order of the parts.

    Without ``ray_address``: in this process, one part after the other, or
    in a pool of ``processes`` local worker processes when ``processes > 1``.
    With one (``auto`` or ``host:port``): ``ray.init(address=...)`` if needed,
    then one ``ray.remote`` task per part, gathered with ``ray.get``.
    ``same_node=True`` pins the tasks to the driver's node (needed for load
    against a loopback-only server such as the Redis peer). ``fn`` must be a
    picklable top-level function; set ``RAY_AUTH_MODE`` in the environment as
    the cluster expects (see RAY_NOTES: ``token`` on real clusters).
    """
    if not ray_address:
        if processes > 1 and len(shards_of_work) > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(processes, len(shards_of_work))) as pool:
                return list(pool.map(fn, shards_of_work))
        return [fn(part) for part in shards_of_work]
    import ray

    if not ray.is_initialized():
        ray.init(address=ray_address, log_to_driver=False)
    opts: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": 0}
    if same_node:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    task = ray.remote(**opts)(fn)
    return ray.get([task.remote(part) for part in shards_of_work])


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call, with ``perf_counter``."""
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100, linear interpolation) of ``values``."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """The sample at rank round(q * (n - 1)) of the sorted ``values`` (0 <= q <= 1),
    None for no samples: a value that was observed (chaos and soak outputs)."""
    s = sorted(values)
    if not s:
        return None
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def latency_samples(call: Callable[[Any], Any], args: Iterable[Any], warmup: int = 100) -> list[float]:
    """Per-call latencies in ms of ``call(a)`` for each ``a``, sequential.

    The first ``warmup`` args are run untimed (connection, caches, JIT-free
    but still: first calls pay for imports and socket setup).
    """
    args = list(args)
    for a in args[:warmup]:
        call(a)
    out = []
    pc = time.perf_counter_ns
    for a in args[warmup:]:
        t0 = pc()
        call(a)
        out.append((pc() - t0) / 1e6)
    return out
