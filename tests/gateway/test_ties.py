"""``?ties=competition`` over HTTP (docs/api.md §13): ``tied_rank`` beside ``rank``.

The seed board has p-ben and p-chloe tied on 9500 (p-ben first by time):
strict ranks 1..5, competition ranks 1, 2, 2, 4, 5.
"""

from __future__ import annotations

import pytest

from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio

B = f"/v1/boards/{BOARD}"
TIED = {"p-ava": 1, "p-ben": 2, "p-chloe": 2, "p-dev": 4, "p-eli": 5}


async def get(c, path, **params):
    r = await c.get(path, params=params, headers=H("reader"))
    assert r.status_code == 200, r.text
    return r.json()


async def test_every_ranked_read_carries_tied_rank_when_asked(seeded):
    c = seeded.client
    top = await get(c, f"{B}/top", limit=5, ties="competition")
    assert [(e["rank"], e["tied_rank"], e["player_id"]) for e in top["entries"]] == [
        (1, 1, "p-ava"), (2, 2, "p-ben"), (3, 2, "p-chloe"), (4, 4, "p-dev"), (5, 5, "p-eli")]
    page2 = await get(c, f"{B}/top", limit=2, ties="competition", cursor=(await get(c, f"{B}/top", limit=2))["next_cursor"])
    assert [(e["rank"], e["tied_rank"]) for e in page2["entries"]] == [(3, 2), (4, 4)]  # a page starting mid-tie
    me = await get(c, f"{B}/players/p-chloe", ties="competition")
    assert (me["rank"], me["tied_rank"]) == (3, 2)
    around = await get(c, f"{B}/players/p-dev/around", radius=1, ties="competition")
    assert [(e["rank"], e["tied_rank"]) for e in around["entries"]] == [(3, 2), (4, 4), (5, 5)]
    r = await c.post(f"{B}/ranked-subset", params={"ties": "competition"}, headers=H("reader"),
                     json={"player_ids": ["p-eli", "p-chloe", "p-ben"]})
    assert [(e["rank"], e["tied_rank"], e["player_id"]) for e in r.json()["entries"]] == [
        (1, 1, "p-ben"), (2, 1, "p-chloe"), (3, 3, "p-eli")]  # local to the subset


async def test_without_the_parameter_nothing_changes(seeded):
    c = seeded.client
    top = await get(c, f"{B}/top", limit=5)
    assert all("tied_rank" not in e for e in top["entries"])
    assert "tied_rank" not in await get(c, f"{B}/players/p-chloe")


async def test_an_unranked_player_has_a_null_tied_rank(seeded):
    c = seeded.client
    r = await c.post(f"{B}/invalidations", headers=H("moderator"),
                     json={"event_id": "evt-ben-1", "reason": "cheat", "moderator": "m"})
    assert r.status_code == 200, r.text
    ben = await get(c, f"{B}/players/p-ben", ties="competition")
    assert ben["status"] == "INVALIDATED" and ben["rank"] is None and ben["tied_rank"] is None
    chloe = await get(c, f"{B}/players/p-chloe", ties="competition")
    assert (chloe["rank"], chloe["tied_rank"]) == (2, 2)


async def test_an_unknown_ties_mode_is_422_and_changes_nothing(seeded):
    c = seeded.client
    before = await seeded.board()
    r = await c.get(f"{B}/top", params={"ties": "dense"}, headers=H("reader"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_FAILED"
    assert await seeded.board() == before


@pytest.mark.settings(delta_retention=2)
async def test_snapshot_pages_of_changes_carry_tied_ranks(seeded):
    c = seeded.client
    first = await get(c, f"{B}/changes", since_version=0, limit=2, ties="competition")
    assert first["kind"] == "snapshot"
    pairs = [(e["rank"], e["tied_rank"]) for e in first["entries"]]
    cursor = first["next_cursor"]
    while cursor:
        page = await get(c, f"{B}/changes", cursor=cursor, limit=2, ties="competition")
        pairs += [(e["rank"], e["tied_rank"]) for e in page["entries"]]
        cursor = page["next_cursor"]
    assert pairs == [(1, 1), (2, 2), (3, 2), (4, 4), (5, 5)]  # page 2 starts inside the tie
    plain = await get(c, f"{B}/changes", since_version=0, limit=5)
    assert all("tied_rank" not in e for e in plain["entries"])
