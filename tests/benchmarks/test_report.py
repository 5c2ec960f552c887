"""The report writer: valid JSON with every raw sample, markdown tables, PNG plots, ratios."""

import json

from benchmarks.report import Sample, load, ratios, summarize, write


def _samples():
    out = []
    for rep, v in enumerate([100.0, 120.0, 110.0]):
        out.append(Sample("redis_aof_ingest", "redis", "ingest_events_per_s", v, "events/s", repeat=rep))
    for shards, base in ((1, 80.0), (2, 150.0), (4, 260.0)):
        for rep in range(3):
            out.append(Sample("flowrank_ingest", "flowrank", "ingest_events_per_s", base + rep, "events/s",
                              shards=shards, repeat=rep))
    out.append(Sample("redis_rank", "redis", "rank_latency_p50_ms", 0.1, "ms", False))
    out.append(Sample("redis_rank", "redis_naive", "rank_latency_p50_ms", 0.09, "ms", False))
    return out


def test_summary_min_median_max():
    rows = {(r["metric"], r["system"], r["shards"]): r for r in summarize(_samples())}
    r = rows[("ingest_events_per_s", "redis", None)]
    assert (r["n"], r["min"], r["median"], r["max"]) == (3, 100.0, 110.0, 120.0)


def test_ratios_pair_same_metric_against_exact_redis_only():
    rat = {r["shards"]: r for r in ratios(_samples())}
    assert set(rat) == {1, 2, 4}
    assert abs(rat[2]["ratio"] - 151.0 / 110.0) < 1e-9
    assert rat[2]["flowrank_better"] and not rat[1]["flowrank_better"]
    # naive Redis is never a denominator; a metric without a FlowRank side has no ratio
    assert all(r["metric"] == "ingest_events_per_s" for r in ratios(_samples()))


def test_write_json_markdown_png(tmp_path):
    samples = _samples()
    paths = write(str(tmp_path), samples, {"cpu_model": "test", "ram_bytes": 2**30}, {"players": 10}, seed=7,
                  command="python -m benchmarks run --quick", notes=["naive board is wrong on ties"])
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["seed"] == 7 and doc["params"] == {"players": 10} and doc["machine"]["cpu_model"] == "test"
    assert len(doc["samples"]) == len(samples)
    assert doc["ratios"] and doc["command"].startswith("python -m benchmarks")
    md = (tmp_path / "REPORT.md").read_text()
    assert "| metric | system | shards | n | min | median | max | unit |" in md
    assert "FlowRank / Redis ratios" in md and "wrong on ties" in md
    assert paths["plots"]
    for p in paths["plots"]:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    _, back = load(paths["json"])
    assert back == samples


def test_markdown_says_no_ratio_without_flowrank(tmp_path):
    redis_only = [s for s in _samples() if s.system != "flowrank"]
    write(str(tmp_path), redis_only, {}, {}, seed=1, plots=False)
    assert "no ratios" in (tmp_path / "REPORT.md").read_text()
