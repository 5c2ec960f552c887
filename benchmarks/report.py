"""Benchmark results: raw samples in, ``results.json`` + ``REPORT.md`` + PNGs out.

A scenario returns :class:`Sample` records, one per measured repeat. Nothing
is averaged away: ``results.json`` keeps every raw sample next to the machine
description, the parameters, the seed and the command; ``REPORT.md`` shows
min/median/max per (metric, system, shard count) and the FlowRank/Redis ratios
computed **only from samples of the same run**.

Pairing rule for ratios: a ``system="flowrank"`` sample and a
``system="redis"`` sample (the exact-semantics peer) with the same ``metric``
name form a ratio of medians, per FlowRank shard count. For metrics where
higher is better (throughput) a ratio above 1 means FlowRank is ahead; for
lower-is-better metrics (latency, bytes, seconds) the report states the ratio
and which way is better. ``redis_naive`` samples are shown but never used as
the denominator: that board is wrong on ties.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

SYSTEMS_ORDER = ("redis", "redis_naive", "flowrank")


@dataclass
class Sample:
    """One raw measurement.

    ``system``: ``redis`` (exact peer), ``redis_naive`` (ZADD GT, wrong on
    ties) or ``flowrank``. ``shards`` is the FlowRank shard count (None for
    Redis, a single node). ``repeat`` numbers the repeats of one scenario.
    """

    scenario: str
    system: str
    metric: str
    value: float
    unit: str
    higher_is_better: bool = True
    shards: int | None = None
    repeat: int = 0
    params: dict = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        return cls(**d)


def _key(s: Sample) -> tuple:
    return (s.metric, SYSTEMS_ORDER.index(s.system) if s.system in SYSTEMS_ORDER else 99, s.system, s.shards or 0)


def summarize(samples: Iterable[Sample]) -> list[dict]:
    """One row per (metric, system, shards): n, min, median, max, unit."""
    groups: dict[tuple, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.metric, s.system, s.shards), []).append(s)
    rows = []
    for (metric, system, shards), ss in sorted(groups.items(), key=lambda kv: _key(kv[1][0])):
        vals = [s.value for s in ss]
        rows.append({
            "metric": metric,
            "system": system,
            "shards": shards,
            "scenario": ss[0].scenario,
            "n": len(vals),
            "min": min(vals),
            "median": statistics.median(vals),
            "max": max(vals),
            "unit": ss[0].unit,
            "higher_is_better": ss[0].higher_is_better,
            "note": ss[0].note,
        })
    return rows


def ratios(samples: Iterable[Sample]) -> list[dict]:
    """FlowRank/Redis ratio of medians per metric and FlowRank shard count.

    Only metrics measured on both ``flowrank`` and ``redis`` in these samples
    (i.e. in the same run) produce a row.
    """
    rows = summarize(samples)
    redis = {r["metric"]: r for r in rows if r["system"] == "redis"}
    out = []
    for r in rows:
        if r["system"] != "flowrank" or r["metric"] not in redis:
            continue
        base = redis[r["metric"]]["median"]
        ratio = r["median"] / base if base else math.inf
        better = ratio > 1 if r["higher_is_better"] else ratio < 1
        out.append({
            "metric": r["metric"],
            "shards": r["shards"],
            "flowrank_median": r["median"],
            "redis_median": base,
            "unit": r["unit"],
            "ratio": ratio,
            "higher_is_better": r["higher_is_better"],
            "flowrank_better": better,
        })
    return out


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 1e-3:
        return f"{v:.4f}"
    return f"{v:.2e}"


def format_table(rows: Sequence[dict]) -> str:
    """The min/median/max rows as a fixed-width console table."""
    lines = [f"{'metric':<34} {'system':<12} {'shards':>6} {'n':>3} {'min':>14} {'median':>14} {'max':>14}  unit"]
    for r in rows:
        sh = "-" if r["shards"] is None else str(r["shards"])
        lines.append(
            f"{r['metric']:<34} {r['system']:<12} {sh:>6} {r['n']:>3} {_fmt(r['min']):>14} "
            f"{_fmt(r['median']):>14} {_fmt(r['max']):>14}  {r['unit']}"
        )
    return "\n".join(lines)


def _markdown(summary: list[dict], ratio_rows: list[dict], meta: dict, plots: list[str], notes: list[str]) -> str:
    m = meta.get("machine", {})
    ram = f"{m['ram_bytes'] / 2**30:.1f} GiB" if m.get("ram_bytes") else "?"
    out = [
        "# FlowRank benchmark report",
        "",
        f"Command: `{meta.get('command', '?')}`  ",
        f"Seed: `{meta.get('seed')}`  ",
        f"Started: {meta.get('started_at', '?')}, finished: {meta.get('finished_at', '?')}  ",
        f"Commit: `{m.get('git_commit')}`{' (dirty tree)' if m.get('git_dirty') else ''}",
        "",
        "## Machine",
        "",
        f"- CPU: {m.get('cpu_model')} ({m.get('cores_usable')} usable / {m.get('cores_logical')} logical cores), RAM {ram}",
        f"- OS: {m.get('os_pretty') or m.get('os')}",
        f"- Python {m.get('python')}, Ray {m.get('ray')}, redis-server {m.get('redis_server')}, redis-py {m.get('redis_py')}",
        "",
        "## Parameters",
        "",
        "```",
        json.dumps(meta.get("params", {}), indent=2, sort_keys=True),
        "```",
        "",
        "## Results (min / median / max over repeats)",
        "",
        "`redis` is the exact-semantics peer (Lua FUNCTION, lexicographic zset, SET NX dedup). "
        "`redis_naive` is `ZADD GT` + `ZREVRANK`: **it ranks ties wrongly** (reverse member order "
        "instead of earlier achieved_at) and has no dedup, so it is a speed reference only, never a ratio base.",
        "",
        "| metric | system | shards | n | min | median | max | unit |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in summary:
        sh = "–" if r["shards"] is None else str(r["shards"])
        out.append(
            f"| {r['metric']} | {r['system']} | {sh} | {r['n']} | {_fmt(r['min'])} | {_fmt(r['median'])} "
            f"| {_fmt(r['max'])} | {r['unit']}{' (lower is better)' if not r['higher_is_better'] else ''} |"
        )
    out += ["", "## FlowRank / Redis ratios (same run)", ""]
    if ratio_rows:
        out += [
            "| metric | FlowRank shards | FlowRank median | Redis median | ratio | better |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in ratio_rows:
            sh = "–" if r["shards"] is None else str(r["shards"])
            out.append(
                f"| {r['metric']} | {sh} | {_fmt(r['flowrank_median'])} {r['unit']} | {_fmt(r['redis_median'])} {r['unit']} "
                f"| {r['ratio']:.2f}× | {'FlowRank' if r['flowrank_better'] else 'Redis'} "
                f"({'higher' if r['higher_is_better'] else 'lower'} is better) |"
            )
    else:
        out.append("No FlowRank scenario ran in this run, so there are no ratios. "
                   "Ratios are only ever computed between samples of the same run.")
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if plots:
        out += ["", "## Plots", ""] + [f"![{os.path.splitext(p)[0]}]({p})" for p in plots]
    out.append("")
    return "\n".join(out)


def _plot(metric: str, rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    unit = rows[0]["unit"]
    shard_counts = sorted({r["shards"] for r in rows if r["shards"] is not None}) or [1]
    for system in sorted({r["system"] for r in rows}, key=lambda s: SYSTEMS_ORDER.index(s) if s in SYSTEMS_ORDER else 99):
        rs = sorted((r for r in rows if r["system"] == system), key=lambda r: r["shards"] or 0)
        if all(r["shards"] is None for r in rs):
            r = rs[0]
            ax.axhline(r["median"], linestyle="--", label=f"{system} (single node) median")
            ax.fill_between([min(shard_counts) - 0.5, max(shard_counts) + 0.5], r["min"], r["max"], alpha=0.15)
        else:
            xs = [r["shards"] for r in rs]
            ax.errorbar(
                xs, [r["median"] for r in rs],
                yerr=[[r["median"] - r["min"] for r in rs], [r["max"] - r["median"] for r in rs]],
                marker="o", capsize=3, label=f"{system} median (min–max)",
            )
    ax.set_xlabel("FlowRank shard count")
    ax.set_ylabel(unit)
    ax.set_xticks(shard_counts)
    ax.set_xlim(min(shard_counts) - 0.5, max(shard_counts) + 0.5)
    ax.set_ylim(bottom=0)  # ratios are read off bars: never a truncated axis
    ax.set_title(metric)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(
    out_dir: str,
    samples: Sequence[Sample],
    machine: dict,
    params: dict,
    seed: int,
    command: str = "",
    started_at: str = "",
    finished_at: str = "",
    notes: Sequence[str] = (),
    plots: bool = True,
) -> dict:
    """Write ``results.json``, ``REPORT.md`` and one ``<metric>.png`` per metric.

    Returns ``{"json": path, "markdown": path, "plots": [paths]}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    summary = summarize(samples)
    ratio_rows = ratios(samples)
    meta = {
        "command": command,
        "seed": seed,
        "params": params,
        "machine": machine,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    doc = {**meta, "notes": list(notes), "summary": summary, "ratios": ratio_rows,
           "samples": [s.to_dict() for s in samples]}
    json_path = os.path.join(out_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False, default=str)
        f.write("\n")
    plot_files: list[str] = []
    if plots:
        by_metric: dict[str, list[dict]] = {}
        for r in summary:
            by_metric.setdefault(r["metric"], []).append(r)
        for metric, rows in by_metric.items():
            name = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in metric) + ".png"
            _plot(metric, rows, os.path.join(out_dir, name))
            plot_files.append(name)
    md_path = os.path.join(out_dir, "REPORT.md")
    with open(md_path, "w") as f:
        f.write(_markdown(summary, ratio_rows, meta, plot_files, list(notes)))
    return {"json": json_path, "markdown": md_path, "plots": [os.path.join(out_dir, p) for p in plot_files]}


def load(path: str) -> tuple[dict, list[Sample]]:
    """Read a ``results.json`` back: (document, samples)."""
    with open(path) as f:
        doc = json.load(f)
    return doc, [Sample.from_dict(d) for d in doc["samples"]]
