"""The seeded workload generator: determinism and the shape of the stream."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.workload import Event, generate

ROOT = Path(__file__).resolve().parents[2]


def test_same_seed_same_bytes_in_this_process():
    a = generate(seed=11, players=500, events=5000)
    b = generate(seed=11, players=500, events=5000)
    assert a.events == b.events
    assert a.digest() == b.digest()


def test_same_seed_same_bytes_across_processes():
    # a fresh interpreter with a different hash seed must produce the same stream
    code = "from benchmarks.workload import generate; print(generate(11, 500, 5000, invalidation_rate=0.01).digest())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}).stdout.strip()
    assert out == generate(11, 500, 5000, invalidation_rate=0.01).digest()


def test_different_seed_different_stream():
    assert generate(1, 500, 5000).digest() != generate(2, 500, 5000).digest()


def test_event_tuple_shape():
    w = generate(3, 100, 1000)
    e = Event(*w.events[0])
    assert e.board_id == "bench:solo:S1:global"
    assert e.event_id.startswith("e-") and e.player_id.startswith("p-") and len(e.player_id) == 10
    assert all(isinstance(x, int) for x in (e.value, e.achieved_at, e.submitted_at))
    assert e.submitted_at >= e.achieved_at
    assert len(w) == 1000


def test_redeliveries_near_target_and_identical():
    w = generate(5, 2000, 20_000, dup_rate=0.01)
    by_id = {}
    dups = 0
    for e in w.events:
        if e[1] in by_id:
            dups += 1
            assert by_id[e[1]] == e  # exactly the same event repeated
        by_id[e[1]] = e
    assert 0.008 <= dups / len(w) <= 0.012
    # a redelivery always comes after its original
    first = {}
    for i, e in enumerate(w.events):
        first.setdefault(e[1], i)
    assert all(first[e[1]] <= i for i, e in enumerate(w.events))


def test_activity_skew_and_every_player_present():
    w = generate(5, 2000, 40_000)
    counts = Counter(e[2] for e in w.events)
    assert len(counts) == 2000  # every player posts at least once
    top = sum(c for _, c in counts.most_common(20))  # the most active 1%
    assert top / len(w) > 0.2  # far more than their 1% share


def test_ties_present_in_values_and_timestamps():
    w = generate(5, 2000, 20_000)
    st = w.stats()
    assert st["distinct_values"] <= 201
    best = {}
    for e in w.events:
        k = (-e[3], e[4])
        if e[2] not in best or k < best[e[2]]:
            best[e[2]] = k
    per_value = Counter(k[0] for k in best.values())
    assert max(per_value.values()) > 5  # many players share a value
    per_key = Counter(best.values())
    assert max(per_key.values()) > 1  # and even value + achieved_at: player id decides


def test_late_events_present():
    w = generate(5, 2000, 20_000, late_rate=0.02)
    assert w.stats()["late_share"] >= 0.015


def test_invalidations_are_distinct_existing_ids():
    w = generate(5, 200, 2000, invalidation_rate=0.05)
    ids = {e[1] for e in w.events}
    assert len(w.invalidations) == len(set(w.invalidations)) == round(len(ids) * 0.05)
    assert set(w.invalidations) <= ids


@pytest.mark.parametrize("policy", ["cumulative", "fastest_time"])
def test_other_policies(policy):
    w = generate(9, 300, 3000, policy=policy)
    vals = [e[3] for e in w.events]
    if policy == "fastest_time":
        assert min(vals) >= 30_000 and max(vals) <= 300_000
    else:
        assert any(v < 0 for v in vals) and any(v > 0 for v in vals)


def test_split_keeps_each_player_in_one_part_in_order():
    w = generate(5, 300, 3000)
    parts = w.split(3)
    assert sum(map(len, parts)) == len(w)
    owners = {}
    for i, part in enumerate(parts):
        for e in part:
            assert owners.setdefault(e[2], i) == i
    for part in parts:
        pos = [w.events.index(e) for e in part[:50]]
        assert pos == sorted(pos)


def test_bad_arguments():
    with pytest.raises(ValueError):
        generate(1, 10, 100, policy="nope")
    with pytest.raises(ValueError):
        generate(1, 0, 100)
