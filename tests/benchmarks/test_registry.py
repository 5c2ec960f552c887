"""The scenario registry, the distributed-run helper and the timing helpers (no Ray started)."""

import pytest

import benchmarks
from benchmarks import Context, FLOWRANK_SLOTS, SCENARIOS, percentile, register, run_distributed


def _square(x):
    return x * x


def test_run_distributed_in_process_keeps_order():
    assert run_distributed(_square, [3, 1, 2]) == [9, 1, 4]
    assert run_distributed(_square, [3, 1, 2], ray_address=None) == [9, 1, 4]


def test_redis_scenarios_registered_and_flowrank_slots_named():
    import benchmarks.__main__  # noqa: F401  registers the Redis side

    for name in ("redis_ingest", "redis_rank", "redis_top", "redis_around", "redis_friends", "redis_memory",
                 "redis_aof_ingest", "redis_restart", "naive_redis_tie_check"):
        assert name in SCENARIOS
    assert "flowrank_ingest" in FLOWRANK_SLOTS
    assert "ingest_events_per_s" in FLOWRANK_SLOTS["flowrank_ingest"]


def test_register_decorator_and_double_registration():
    @register("test_only_scenario", system="flowrank")
    def scen(ctx):
        """One line doc."""
        return []

    try:
        assert SCENARIOS["test_only_scenario"].doc == "One line doc."
        with pytest.raises(ValueError):
            register("test_only_scenario")(lambda ctx: [])
    finally:
        SCENARIOS.pop("test_only_scenario")


def test_context_workload_cache_and_percentile():
    ctx = Context(seed=3, players=50, events=200, progress_enabled=False)
    assert ctx.workload() is ctx.workload()
    assert ctx.workload().params["seed"] == 3
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5


def test_cli_rejects_unknown_scenario(capsys):
    from benchmarks.__main__ import main

    assert main(["run", "--only", "nope", "--no-progress"]) == 2
    assert benchmarks.SCENARIOS  # registry intact


def test_run_distributed_local_processes():
    assert run_distributed(_square, [1, 2, 3, 4], processes=2) == [1, 4, 9, 16]
