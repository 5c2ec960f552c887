"""The Redis peer end to end against a private redis-server (skipped when none is installed).

The exact peer must reproduce docs/api.md §6-7 on the design example and agree with a
sorted() oracle on seeded workloads of every policy; the naive ZADD GT board
must show the known tie bug.
"""

import shutil
import struct

import pytest

from benchmarks.redis_peer import (
    DESIGN_BOARD,
    DESIGN_ORDER,
    NaiveRedisBoard,
    RedisBoard,
    RedisServer,
    decode_member,
    design_events,
    encode_member,
    naive_tie_demo,
)
from benchmarks.workload import generate

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")


def test_member_encoding_is_the_comparator():
    # pure Python: no server needed
    rows = [(9800, 5, "p-ava"), (9500, 1, "p-ben"), (9500, 2, "p-chloe"), (9500, 2, "p-d"), (-3, 0, "p-neg")]
    keys = [encode_member("best_score", v, t, p) for v, t, p in rows]
    assert keys == sorted(keys)
    assert [decode_member("best_score", k) for k in keys] == [(p, v, t) for v, t, p in rows]
    # code point order == UTF-8 byte order, including non-ASCII ids
    assert encode_member("best_score", 1, 1, "p-\u00e9") < encode_member("best_score", 1, 1, "p-\U0001f600")
    fast = [encode_member("fastest_time", v, t, "p") for v, t in ((100, 9), (100, 10), (101, 0))]
    assert fast == sorted(fast)
    assert struct.unpack(">Q", encode_member("best_score", 2**63 - 1, 0, "")[:8])[0] == 0


@pytest.fixture(scope="module")
def server():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed")
    with RedisServer() as srv:
        yield srv


@needs_redis
def test_design_example_order_dedup_and_conflict(server):
    c = server.client()
    b = RedisBoard(c, DESIGN_BOARD)
    b.clear()
    ev = design_events()
    assert b.ingest(ev) == ["APPLIED_FIRST_SCORE"] * 5
    assert [e[1] for e in b.top(10)] == DESIGN_ORDER
    assert [b.rank(p) for p in DESIGN_ORDER] == [1, 2, 3, 4, 5]
    assert b.rank("p-nobody") is None
    # redelivery, then the same id with other content
    ben = ev[1]
    assert b.ingest([ben, ben[:3] + (9999,) + ben[4:]]) == ["DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT"]
    assert b.version() == 5
    # Chloe's window, clamped windows at both ends, and Ava's friends ranked locally
    assert [e[1] for e in b.around("p-chloe", 1)] == ["p-ben", "p-chloe", "p-dev"]
    assert [e[0] for e in b.around("p-ava", 2)] == [1, 2, 3]
    assert [e[0] for e in b.around("p-eli", 1)] == [4, 5]
    assert [(r, p) for r, p, *_ in b.friends("p-ava", ["p-ben", "p-dev", "p-eli", "p-ghost"])] == [
        (1, "p-ben"), (2, "p-dev"), (3, "p-eli")]
    # Test B of the design: Eli ties Ben and Chloe at 9,500, later: lands behind Chloe
    t_eli = ev[2][4] + 4 * 60_000
    assert b.ingest([(DESIGN_BOARD, "evt-eli-2", "p-eli", 9500, t_eli, t_eli)]) == ["APPLIED_NEW_BEST"]
    assert [e[1] for e in b.top(5)] == ["p-ava", "p-ben", "p-chloe", "p-eli", "p-dev"]
    # a same-value event achieved later is not an improvement
    assert b.ingest([(DESIGN_BOARD, "evt-ben-2", "p-ben", 9500, t_eli, t_eli)]) == ["REJECTED_NOT_AN_IMPROVEMENT"]
    assert b.memory_per_player() > 0
    b.clear()


@needs_redis
def test_naive_board_ranks_the_tie_wrongly(server):
    demo = naive_tie_demo(server.client())
    assert demo["exact"] == DESIGN_ORDER
    assert demo["naive"][1:3] == ["p-chloe", "p-ben"] and not demo["naive_ok"]


def _oracle(policy, events):
    seen, rows, outcomes = {}, {}, []
    for e in events:
        _, eid, pid, v, a, s = e
        if eid in seen:
            outcomes.append("DUPLICATE_IGNORED" if seen[eid] == e else "REJECTED_EVENT_ID_CONFLICT")
            continue
        seen[eid] = e
        if policy == "best_score":
            key = (-v, a, pid)
            first = pid not in rows
            if first or key < rows[pid]:
                rows[pid] = key
                outcomes.append("APPLIED_FIRST_SCORE" if first else "APPLIED_NEW_BEST")
            else:
                outcomes.append("REJECTED_NOT_AN_IMPROVEMENT")
        elif policy == "fastest_time":
            key = (v, s, pid)
            if pid not in rows or key < rows[pid]:
                rows[pid] = key
                outcomes.append("APPLIED_NEW_BEST_TIME")
            else:
                outcomes.append("REJECTED_NOT_FASTER")
        else:
            tot, lat = rows.get(pid, (0, a))
            rows[pid] = (tot + v, max(lat, a))
            outcomes.append("APPLIED")
    if policy == "cumulative":
        order = sorted(rows, key=lambda p: (-rows[p][0], rows[p][1], p))
    else:
        order = sorted(rows, key=lambda p: rows[p])
    return outcomes, order


@needs_redis
@pytest.mark.parametrize("policy", ["best_score", "cumulative", "fastest_time"])
def test_seeded_workload_matches_oracle(server, policy):
    seed = 20261101
    w = generate(seed, 300, 3000, policy=policy)
    events = list(w.events)
    # a conflicting reuse of an event id, and (cumulative) a negative running total
    events.append(events[10][:3] + (events[10][3] + 1,) + events[10][4:])
    if policy == "cumulative":
        events.append((w.board_id, "neg-1", "p-neg", -(2**32 + 5), events[0][4], events[0][4]))
    c = server.client()
    b = RedisBoard(c, w.board_id, policy)
    b.clear()
    got = b.ingest(events, batch=500)
    exp_out, exp_order = _oracle(policy, events)
    assert got == exp_out, f"seed {seed}"
    assert [e[1] for e in b.top(len(exp_order) + 1)] == exp_order, f"seed {seed}"
    assert b.ranks(exp_order[:20]) == list(range(1, 21))
    if policy == "cumulative":
        assert b.top(1, offset=len(exp_order) - 1)[0][1:3] == ("p-neg", -(2**32 + 5))
    b.clear()


@needs_redis
def test_fastest_time_rejects_implausible_times(server):
    b = RedisBoard(server.client(), "t:speed:S1:global", "fastest_time", max_plausible_time_ms=1000)
    b.clear()
    ev = [("t:speed:S1:global", "a", "p-a", 0, 5, 5), ("t:speed:S1:global", "b", "p-a", 1001, 5, 5),
          ("t:speed:S1:global", "c", "p-a", 1000, 5, 5)]
    assert b.ingest(ev) == ["REJECTED_INVALID_TIMING", "REJECTED_INVALID_TIMING", "APPLIED_NEW_BEST_TIME"]
    b.clear()


@needs_redis
def test_server_restart_keeps_data_and_reports_load_time():
    with RedisServer(appendonly=True, appendfsync="always") as srv:
        c = srv.client()
        b = RedisBoard(c, DESIGN_BOARD)
        b.ingest(design_events())
        secs = srv.restart()
        assert 0 < secs < 30
        b2 = RedisBoard(srv.client(), DESIGN_BOARD, load=False)
        assert [e[1] for e in b2.top(5)] == DESIGN_ORDER
        assert srv.used_memory() > 0


@needs_redis
def test_naive_board_counts(server):
    n = NaiveRedisBoard(server.client(), "t:naive:S1:global")
    n.clear()
    assert n.ingest(design_events("t:naive:S1:global")) == 5
    assert n.rank("p-ava") == 1
    n.clear()


@needs_redis
def test_quick_cli_end_to_end_tiny(tmp_path, capsys):
    import json

    from benchmarks.__main__ import main

    rc = main(["run", "--only", "redis_rank,naive_redis_tie_check", "--size", "300", "--events", "1000",
               "--repeat", "1", "--out", str(tmp_path), "--no-progress", "--no-plots"])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    metrics = {(s["metric"], s["system"]) for s in doc["samples"]}
    assert ("rank_latency_p50_ms", "redis") in metrics
    tie = {s["system"]: s["value"] for s in doc["samples"] if s["metric"] == "design_tie_order_correct"}
    assert tie == {"redis": 1.0, "redis_naive": 0.0}
    assert "FlowRank benchmarks" in capsys.readouterr().out
