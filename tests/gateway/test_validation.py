"""docs/api.md §3-4 input rules: a table of bad inputs, each must be 4xx with the
right code and field and must change nothing."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from engine.core.errors import BatchTooLarge, ValidationFailed
from gateway.validation import (
    CURSOR_PATTERN,
    ID_PATTERN,
    check_board_id,
    decode_batch,
    decode_cursor,
    decode_events,
    encode_cursor,
    event_from_json,
    events_from_body,
    id_problem,
    loc_to_field,
)
from tests.gateway.conftest import BOARD, H

GOOD = {"event_id": "evt-x", "board_id": BOARD, "player_id": "p-zed", "value": 5, "achieved_at": "2026-11-01T10:00:00Z"}


def ev(**kw):
    e = dict(GOOD)
    for k, v in kw.items():
        if v is ...:
            e.pop(k)
        else:
            e[k] = v
    return e


BAD_EVENTS = [
    # (description, event, field)
    ("float value", ev(value=5.0), "value"),
    ("float value 5.5", ev(value=5.5), "value"),
    ("string value", ev(value="5"), "value"),
    ("bool value", ev(value=True), "value"),
    ("null value", ev(value=None), "value"),
    ("value above int64", ev(value=2**63), "value"),
    ("value below int64", ev(value=-(2**63) - 1), "value"),
    ("missing value", ev(value=...), "value"),
    ("missing event_id", ev(event_id=...), "event_id"),
    ("empty event_id", ev(event_id=""), "event_id"),
    ("long event_id", ev(event_id="e" * 129), "event_id"),
    ("control char in event_id", ev(event_id="e\u0007"), "event_id"),
    ("numeric event_id", ev(event_id=7), "event_id"),
    ("empty player_id", ev(player_id=""), "player_id"),
    ("long player_id", ev(player_id="p" * 129), "player_id"),
    ("NUL in player_id", ev(player_id="p\x00"), "player_id"),
    ("C1 control in player_id", ev(player_id="p\u0085"), "player_id"),
    ("DEL in player_id", ev(player_id="p\x7f"), "player_id"),
    ("newline in player_id", ev(player_id="p\n"), "player_id"),
    ("lone surrogate in player_id", ev(player_id="p\ud800"), "player_id"),
    ("board_id with 3 parts", ev(board_id="a:b:c"), "board_id"),
    ("board_id part starting with dash", ev(board_id="a:b:-c:d"), "board_id"),
    ("board_id part too long", ev(board_id="a:b:c:" + "d" * 65), "board_id"),
    ("board_id with space", ev(board_id="a:b:c:d e"), "board_id"),
    ("board_id trailing newline", ev(board_id="a:b:c:d\n"), "board_id"),
    ("missing achieved_at", ev(achieved_at=...), "achieved_at"),
    ("achieved_at without zone", ev(achieved_at="2026-11-01T10:00:00"), "achieved_at"),
    ("achieved_at float", ev(achieved_at=1.5), "achieved_at"),
    ("achieved_at bool", ev(achieved_at=False), "achieved_at"),
    ("achieved_at garbage", ev(achieved_at="yesterday"), "achieved_at"),
    ("achieved_at Feb 30", ev(achieved_at="2026-02-30T10:00:00Z"), "achieved_at"),
    ("submitted_at without zone", ev(submitted_at="2026-11-01 10:00:00"), "submitted_at"),
]


@pytest.mark.parametrize("desc,event,field", BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
def test_event_rules(desc, event, field):
    with pytest.raises(ValidationFailed) as ei:
        event_from_json(event, "events[0]")
    assert ei.value.field == f"events[0].{field}"


def test_good_event_converts_and_defaults_submitted_at():
    e = event_from_json(GOOD, "events[0]")
    assert e.achieved_at == e.submitted_at == 1793527200000
    assert event_from_json(ev(submitted_at=1793527200001, achieved_at=1793527200000), "x").submitted_at == 1793527200001
    assert event_from_json(ev(player_id="p-\u00e9\U0001f600" * 32), "x")  # 128 code points


def test_batch_rules():
    with pytest.raises(BatchTooLarge):
        events_from_body({"events": [GOOD] * 10_001}, 10_000)
    with pytest.raises(BatchTooLarge):  # size is checked before contents
        events_from_body({"events": [{"junk": 1}] * 10_001}, 10_000)
    with pytest.raises(ValidationFailed) as ei:
        events_from_body({"events": [GOOD, GOOD, GOOD, ev(value=1.0), ev(value="x")]}, 10_000)
    assert ei.value.field == "events[3].value"
    for body, field in [([], None), ({}, "events"), ({"events": {}}, "events"), ({"events": []}, "events"),
                        ({"events": [1]}, "events[0]")]:
        with pytest.raises(ValidationFailed) as ei:
            events_from_body(body, 10)
        assert ei.value.field == field


def test_ids_and_board_ids():
    assert id_problem("p" * 128) is None
    assert id_problem("\U0001f600") is None
    assert id_problem("p\u200b") is None  # format chars (Cf) are allowed, only Cc is not
    assert check_board_id("a:b:c:d") == "a:b:c:d"
    assert check_board_id("A0:b_1:c.2:d-3") == "A0:b_1:c.2:d-3"


def test_cursor_codec():
    assert decode_cursor(encode_cursor(12, 3400)) == (12, 3400)
    assert encode_cursor(0, 0) == "0.0" and decode_cursor("7.20") == (7, 20)
    for bad in ["", "x", "!!!", encode_cursor(1, 2)[:-2], "eyJ2IjoiYSIsIm8iOjF9", "bnVsbA", "W10", "01.2", "1.02",
                "-1.2", "1.2.3", " 1.2", "1.2\n", "1.", ".2", "1e3.2", "\u0661.2", "1" * 19 + ".0", "0." + "1" * 19]:
        with pytest.raises(ValidationFailed) as ei:
            decode_cursor(bad)
        assert ei.value.field == "cursor"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20) | st.from_regex(CURSOR_PATTERN[:-1] + r"\Z"))
def test_cursor_pattern_is_exactly_what_decode_accepts(token):
    """/openapi.json states CURSOR_PATTERN (ECMA-262: ``$`` is the end of input, Python's ``\\Z``)."""
    stated = re.search(CURSOR_PATTERN[:-1] + r"\Z", token) is not None
    try:
        decode_cursor(token)
        accepted = True
    except ValidationFailed:
        accepted = False
    assert stated == accepted, token


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=130)
       | st.lists(st.sampled_from(["\ud800", "\udfff", "\x00", "\x1f", " ", "\x7f", "\x9f", "\xa0", "\n", "a"])
                  | st.characters(), max_size=6).map("".join))
def test_id_pattern_is_exactly_id_problem(raw):
    """The ``pattern`` (+ maxLength 128) that /openapi.json states for ids agrees with :func:`id_problem`
    on Unicode text; a lone surrogate (no JSON-schema string holds one) is refused too."""
    if re.search("[\ud800-\udfff]", raw):
        assert id_problem(raw) is not None
        return
    stated = len(raw) <= 128 and re.search(ID_PATTERN[:-1] + r"\Z", raw) is not None
    assert stated == (id_problem(raw) is None), repr(raw)


def test_loc_to_field():
    assert loc_to_field(("body", "events", 3, "value")) == "events[3].value"
    assert loc_to_field(("query", "limit")) == "limit"
    assert loc_to_field(("body", "player_ids", 2, "function-after[_valid_id(), str]")) == "player_ids[2]"
    assert loc_to_field(("body",)) is None


# ---------------------------------------------------------------- over HTTP

pytestmark_http = pytest.mark.anyio


@pytest.mark.anyio
@pytest.mark.parametrize("desc,event,field", BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
async def test_bad_event_in_batch_is_422_and_changes_nothing(seeded, desc, event, field):
    before = await seeded.board()
    good = [dict(GOOD, event_id=f"evt-ok-{i}", player_id=f"p-ok-{i}") for i in range(3)]
    r = await seeded.client.post("/v1/events", json={"events": good + [event]}, headers=H("game_server")) \
        if "surrogate" not in desc else await seeded.client.post(
            "/v1/events", content=_json_with_surrogate(good + [event]), headers=H("game_server"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED"
    assert r.json()["error"]["field"] == f"events[3].{field}"
    after = await seeded.board()
    assert (after["version"], after["size"]) == (before["version"], before["size"])


def _json_with_surrogate(events) -> bytes:
    import json

    return json.dumps({"events": events}, ensure_ascii=True).encode()


BAD_REQUESTS = [
    # (desc, method, path, kwargs, status, code, field)
    ("malformed json", "POST", "/v1/events", {"content": b'{"events": ['}, 422, "VALIDATION_FAILED", None),
    ("NaN literal", "POST", "/v1/events", {"content": b'{"events": [{"value": NaN}]}'}, 422, "VALIDATION_FAILED", None),
    ("not utf-8", "POST", "/v1/events", {"content": b'\xff\xfe'}, 422, "VALIDATION_FAILED", None),
    ("events not list", "POST", "/v1/events", {"json": {"events": 3}}, 422, "VALIDATION_FAILED", "events"),
    ("too many events", "POST", "/v1/events", {"json": {"events": [GOOD] * 10_001}}, 413, "BATCH_TOO_LARGE", "events"),
    ("body over 8 MiB", "POST", "/v1/events", {"content": b" " * (8 * 1024 * 1024 + 1)}, 413, "BATCH_TOO_LARGE", None),
    ("chunked body over 8 MiB", "POST", "/v1/events",
     {"content": "CHUNKED"}, 413, "BATCH_TOO_LARGE", None),
    ("limit 0", "GET", f"/v1/boards/{BOARD}/top?limit=0", {}, 422, "VALIDATION_FAILED", "limit"),
    ("limit 1001", "GET", f"/v1/boards/{BOARD}/top?limit=1001", {}, 422, "VALIDATION_FAILED", "limit"),
    ("limit text", "GET", f"/v1/boards/{BOARD}/top?limit=ten", {}, 422, "VALIDATION_FAILED", "limit"),
    ("bad cursor", "GET", f"/v1/boards/{BOARD}/top?cursor=zzz", {}, 422, "VALIDATION_FAILED", "cursor"),
    ("radius 101", "GET", f"/v1/boards/{BOARD}/players/p-ava/around?radius=101", {}, 422, "VALIDATION_FAILED", "radius"),
    ("radius -1", "GET", f"/v1/boards/{BOARD}/players/p-ava/around?radius=-1", {}, 422, "VALIDATION_FAILED", "radius"),
    ("since_version -1", "GET", f"/v1/boards/{BOARD}/changes?since_version=-1", {}, 422, "VALIDATION_FAILED",
     "since_version"),
    ("since_version missing", "GET", f"/v1/boards/{BOARD}/changes", {}, 422, "VALIDATION_FAILED", "since_version"),
    ("max_staleness_ms -1", "GET", f"/v1/boards/{BOARD}/top?max_staleness_ms=-1", {}, 422, "VALIDATION_FAILED",
     "max_staleness_ms"),
    ("bad board id in path", "GET", "/v1/boards/a:b:c/top", {}, 422, "VALIDATION_FAILED", "board_id"),
    ("control char player in path", "GET", f"/v1/boards/{BOARD}/players/p%07x", {}, 422, "VALIDATION_FAILED",
     "player_id"),
    ("subset over 10k", "POST", f"/v1/boards/{BOARD}/ranked-subset",
     {"json": {"player_ids": [f"p{i}" for i in range(10_001)]}}, 422, "VALIDATION_FAILED", "player_ids"),
    ("subset bad id", "POST", f"/v1/boards/{BOARD}/ranked-subset",
     {"json": {"player_ids": ["p-ava", "p\x01"]}}, 422, "VALIDATION_FAILED", "player_ids[1]"),
    ("create board float shards", "POST", "/v1/boards",
     {"json": {"board_id": "g:m:s:x", "policy": "best_score", "shards": 2.0}}, 422, "VALIDATION_FAILED", "shards"),
    ("create board bad policy", "POST", "/v1/boards",
     {"json": {"board_id": "g:m:s:x", "policy": "highest"}}, 422, "VALIDATION_FAILED", "policy"),
    ("create board bad id", "POST", "/v1/boards",
     {"json": {"board_id": "g:m:s", "policy": "best_score"}}, 422, "VALIDATION_FAILED", "board_id"),
    ("create board bool review_above", "POST", "/v1/boards",
     {"json": {"board_id": "g:m:s:x", "policy": "best_score", "review_above": True}}, 422, "VALIDATION_FAILED",
     "review_above"),
    ("state unknown", "POST", f"/v1/boards/{BOARD}/state", {"json": {"state": "CLOSED"}}, 422, "VALIDATION_FAILED",
     "state"),
    ("body is a list", "POST", f"/v1/boards/{BOARD}/state", {"json": []}, 422, "VALIDATION_FAILED", None),
    ("decision unknown", "POST", f"/v1/boards/{BOARD}/quarantine/evt-1", {"json": {"decision": "maybe"}}, 422,
     "VALIDATION_FAILED", "decision"),
    ("invalidation without event", "POST", f"/v1/boards/{BOARD}/invalidations", {"json": {"reason": "x"}}, 422,
     "VALIDATION_FAILED", "event_id"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("desc,method,path,kw,status,code,field", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
async def test_bad_requests(seeded, desc, method, path, kw, status, code, field):
    before = await seeded.board()
    boards_before = (await seeded.client.get("/v1/boards", headers=H("reader"))).json()
    if kw.get("content") == "CHUNKED":
        async def chunks():
            for _ in range(9):
                yield b" " * (1024 * 1024)

        kw = {"content": chunks()}
    r = await seeded.client.request(method, path, headers=H("admin"), **kw)
    assert r.status_code == status, r.text
    body = r.json()
    assert body == {"error": {"code": code, "message": body["error"]["message"], "field": field}}
    assert isinstance(body["error"]["message"], str) and "Traceback" not in body["error"]["message"]
    after = await seeded.board()
    assert (after["version"], after["size"], after["state"]) == (before["version"], before["size"], before["state"])
    assert (await seeded.client.get("/v1/boards", headers=H("reader"))).json() == boards_before


@pytest.mark.anyio
async def test_unknown_route_and_method_use_error_body(harness):
    r = await harness.client.get("/v1/nope", headers=H("reader"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await harness.client.delete("/v1/boards", headers=H("admin"))
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


@pytest.mark.anyio
async def test_engine_bug_is_500_without_traceback(harness):
    async def boom(*a, **k):
        raise RuntimeError("secret internals")

    harness.engine.list_boards = boom
    r = await harness.client.get("/v1/boards", headers=H("reader"))
    assert r.status_code == 500
    assert r.json() == {"error": {"code": "INTERNAL", "message": "Internal error.", "field": None}}
    assert "secret" not in r.text


# ---- the columnar decode of POST /v1/events


def _flat(batch) -> list:
    """A ScoreBatch back to its events in submission order."""
    out: list = [None] * len(batch)
    for cols, positions in zip(batch.boards, batch.positions):
        for ev_, pos in zip(cols.events(), positions.tolist()):
            out[pos] = ev_
    assert [e.event_id for e in out] == batch.event_ids
    return out


def _same_decode(raw: bytes, max_events: int = 50) -> None:
    """decode_batch answers exactly as decode_events: the same events, or the same error."""
    try:
        want = decode_events(raw, max_events)
    except (ValidationFailed, BatchTooLarge) as exc:
        with pytest.raises(type(exc)) as ei:
            decode_batch(raw, max_events)
        assert (ei.value.field, str(ei.value)) == (exc.field, str(exc))
        return
    assert _flat(decode_batch(raw, max_events)) == want


MS = 1793527200000


@pytest.mark.parametrize("desc,event,field", BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
def test_columnar_decode_names_the_same_field(desc, event, field):
    good = ev(achieved_at=MS)
    raw = json.dumps({"events": [good, good, event]}).encode()
    with pytest.raises(ValidationFailed) as ei:
        decode_batch(raw, 10)
    assert ei.value.field == f"events[2].{field}"
    _same_decode(raw)


def test_a_plain_batch_is_decoded_without_one_record_per_event(monkeypatch):
    import gateway.validation as v

    def boom(*_a, **_k):
        raise AssertionError("took the per-event path")

    monkeypatch.setattr(v, "decode_events", boom)
    evs = [ev(event_id=f"e{i}", player_id=f"p{i % 3}", value=i, achieved_at=MS + i,
              board_id=BOARD if i % 2 else "g:m:s:other") for i in range(6)]
    evs[4]["submitted_at"] = MS + 99
    batch = decode_batch(json.dumps({"events": evs}).encode(), 10)
    assert [c.board_id for c in batch.boards] == ["g:m:s:other", BOARD]
    assert [p.tolist() for p in batch.positions] == [[0, 2, 4], [1, 3, 5]]
    assert batch.boards[0].submitted.tolist() == [MS, MS + 2, MS + 99]


_VALUES = {
    "event_id": st.sampled_from(["e1", "e2", "", "x" * 129, "e\u0007", 7, None, "e\"q", "\u00e9\U0001f600"]),
    "player_id": st.sampled_from(["p1", "p2", "p\n", "p\ud800", "", None, ["p"], {"p": 1}]),
    "board_id": st.sampled_from([BOARD, "g:m:s:x", "a:b:c", "a:b:c:d\n", 1, {"a": 1}, ["b"]]),
    "value": st.sampled_from([0, -5, 2**63 - 1, -(2**63), 2**63, 5.0, True, "5", None, 10**30]),
    "achieved_at": st.sampled_from([MS, 0, "2026-11-01T10:00:00Z", "yesterday", 1.5, -1, 253402300800000, None]),
    "submitted_at": st.sampled_from([MS + 1, "2026-11-01T10:00:00Z", 2.5, None, -(2**63)]),
    "metadata": st.sampled_from([{"a": 1}, [], None]),
}


@st.composite
def bodies(draw):
    events = []
    for _ in range(draw(st.integers(0, 6))):
        keys = draw(st.lists(st.sampled_from(sorted(_VALUES)), unique=True, min_size=3))
        keys = set(keys) | ({"event_id", "board_id", "player_id", "value", "achieved_at"}
                            if draw(st.booleans()) else set())
        events.append({k: draw(_VALUES[k]) for k in sorted(keys)})
    if draw(st.booleans()):
        events.append(draw(st.sampled_from([1, "x", None, []])))
    return json.dumps({"events": events}).encode()


@settings(max_examples=300)
@given(bodies(), st.sampled_from([3, 50]))
def test_columnar_decode_agrees_with_the_per_event_decode(raw, max_events):
    _same_decode(raw, max_events)


def test_columnar_decode_of_bodies_that_are_not_batches():
    for raw in [b"", b"[]", b"{}", b'{"events": 1}', b'{"events": []}', b"{bad", b'{"events": [1e400]}',
                b"\xff", json.dumps({"events": [GOOD] * 11}).encode()]:
        _same_decode(raw, 10)


def test_a_fan_out_batch_decodes_as_columns_equal_to_the_checked_path():
    """docs/api.md §15: a batch whose events carry board_ids decodes column by column to the same batch as the
    event-by-event path (rows per (event, board) in request order, each with its request index)."""
    import numpy as np
    import orjson

    from gateway.validation import _batch_columns, decode_batch, decode_expanded

    events = [{"event_id": f"e{i}", "board_ids": [f"g:m:s:{(i + k) % 5}" for k in range(1 + i % 3)],
               "player_id": f"p{i % 7}", "value": i * 3 - 20, "achieved_at": 1_790_000_000_000 + i,
               **({"submitted_at": 1_790_000_000_500} if i % 4 == 0 else {})} for i in range(40)]
    raw = orjson.dumps({"events": events})
    fast = decode_batch(raw, 10_000)
    assert _batch_columns(events) is not None  # it did take the columnar path
    rows, origin = decode_expanded(raw, 10_000)
    assert fast.origin is not None and fast.origin.tolist() == origin
    assert fast.board_ids() == [r.board_id for r in rows] and fast.event_ids == [r.event_id for r in rows]
    for cols, pos in zip(fast.boards, fast.positions):
        assert cols.events() == [rows[p] for p in pos.tolist()]
    assert np.all(np.diff(fast.origin) >= 0)
    # shapes the columns leave to the checked path, which names the field
    for bad, field in (({"board_ids": ["g:m:s:1", "g:m:s:1"]}, "events[0].board_ids"),
                       ({"board_ids": ["g:m:s:1", {}]}, "events[0].board_ids[1]"),
                       ({"board_ids": []}, "events[0].board_ids"),
                       ({"board_ids": ["g:m:s:1"], "board_id": "g:m:s:1"}, "events[0].board_ids")):
        body = orjson.dumps({"events": [{**events[0], **bad}] + events[1:]})
        with pytest.raises(ValidationFailed) as got:
            decode_batch(body, 10_000)
        assert got.value.field == field
    with pytest.raises(BatchTooLarge):
        decode_batch(raw, len(rows) - 1)
