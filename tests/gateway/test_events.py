"""Score events over HTTP (docs/api.md §7) with the seed scenarios' outcomes."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio

EVT_101 = {"event_id": "evt-101", "board_id": BOARD, "player_id": "p-dev", "value": 9700,
           "achieved_at": "2026-11-01T10:05:00Z"}


async def post(c, *events):
    r = await c.post("/v1/events", json={"events": list(events)}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    return r.json()["results"]


async def test_results_shape_and_duplicates(seeded):
    c = seeded.client
    board = "arena-clash:solo:S7:global"
    assert await post(c, EVT_101) == [{"event_id": "evt-101", "board_id": board, "outcome": "APPLIED_NEW_BEST",
                                       "version": 6}]
    assert await post(c, EVT_101) == [{"event_id": "evt-101", "board_id": board, "outcome": "DUPLICATE_IGNORED",
                                       "version": 6}]
    conflict = dict(EVT_101, value=9701)
    assert (await post(c, conflict))[0]["outcome"] == "REJECTED_EVENT_ID_CONFLICT"
    late = dict(EVT_101, event_id="evt-099", value=9200, achieved_at="2026-11-01T10:04:30Z")
    assert (await post(c, late))[0]["outcome"] == "REJECTED_NOT_AN_IMPROVEMENT"
    unknown = dict(EVT_101, event_id="evt-s9", board_id="arena-clash:solo:S9:global")
    assert (await post(c, unknown))[0]["outcome"] == "REJECTED_UNKNOWN_SEASON"
    assert (await seeded.board())["version"] == 6


async def test_epoch_ms_and_rfc3339_are_the_same_content(seeded):
    c = seeded.client
    a = dict(EVT_101, achieved_at="2026-11-01T11:05:00+01:00", submitted_at=None)
    assert (await post(c, a))[0]["outcome"] == "APPLIED_NEW_BEST"
    b = dict(EVT_101, achieved_at=1793527500000, submitted_at=1793527500000)
    assert (await post(c, b))[0]["outcome"] == "DUPLICATE_IGNORED"


async def test_events_counted_in_metrics(seeded):  # details: test_metrics.py
    await post(seeded.client, EVT_101)
    text = (await seeded.client.get("/metrics")).text
    assert 'flowrank_events_total{outcome="APPLIED_NEW_BEST"} 1.0' in text
    assert 'flowrank_events_total{outcome="APPLIED_FIRST_SCORE"} 5.0' in text
    assert 'route="/v1/events"' in text


def test_results_render_byte_for_byte_as_one_record_per_event():
    """render.results (the columns) writes the very bytes the per-event rendering wrote."""
    import numpy as np
    import orjson

    from engine.core import records as R
    from engine.core.model import EventResult, Outcome
    from gateway import render

    outcomes = list(Outcome)
    ids = ["e\"1", "é\U0001f600", "back\\slash", "plain"] * 8
    codes = np.array([R.CODE[outcomes[i % len(outcomes)]] for i in range(len(ids))], np.uint8)
    versions = np.arange(len(ids), dtype=np.int64) * 7 + 2**40
    boards = [f"g:m:s:{i % 3}" for i in range(len(ids))]
    old = orjson.dumps({"results": [{"event_id": r.event_id, "board_id": b, "outcome": r.outcome, "version": r.version}
                                    for r, b in zip((EventResult(e, R.outcome_of(c), v) for e, c, v in zip(
                                        ids, codes.tolist(), versions.tolist())), boards)]})
    assert render.results(ids, codes, versions, boards) == old
