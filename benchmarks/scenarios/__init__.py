"""FlowRank scenarios for ``python -m benchmarks`` (every module here is imported by the runner)."""
