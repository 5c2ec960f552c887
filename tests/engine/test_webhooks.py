"""engine.core.webhooks: bodies byte for byte, ids and keys, signatures, the retry schedule."""

from __future__ import annotations

import hashlib
import hmac
import json

from hypothesis import given
from hypothesis import strategies as st

from engine.core import webhooks as wh


def test_award_body_is_compact_json_in_the_contract_order():
    body = wh.award_body("arena:S7:global/p-ava", "arena:S7:global", "p-ava", 1, None, {"gems": 500, "title": "Été"}, 42)
    assert body == ('{"type":"award","award_id":"arena:S7:global/p-ava","board_id":"arena:S7:global",'
                    '"player_id":"p-ava","rank":1,"cohort":null,"reward":{"gems":500,"title":"Été"},"version":42}'
                    ).encode("utf-8")


def test_state_body_is_compact_json_in_the_contract_order():
    assert wh.state_body("arena:S7:global", "FINALIZED", 9) == \
        b'{"type":"board_state","board_id":"arena:S7:global","state":"FINALIZED","version":9}'


def test_messages_carry_their_ids_and_creation_time():
    m = wh.award_message("b:1", "p/2", 3, 4, {}, 5, created_ms=77)
    assert m.message_id == "award/b:1/p/2" and m.created_ms == 77
    assert json.loads(m.body)["award_id"] == "b:1/p/2" == wh.award_id("b:1", "p/2")
    assert list(json.loads(m.body)) == ["type", "award_id", "board_id", "player_id", "rank", "cohort", "reward",
                                        "version"]
    s = wh.state_message("b:1", "FROZEN", 2, created_ms=5)
    assert s == wh.Message("state/b:1/FROZEN", wh.state_body("b:1", "FROZEN", 2), 5)


def test_idempotency_key_is_the_hex_sha256_of_the_id():
    assert wh.idempotency_key("award/b/p") == hashlib.sha256(b"award/b/p").hexdigest()
    assert wh.idempotency_key("state/b/é") == hashlib.sha256("state/b/é".encode("utf-8")).hexdigest()
    assert wh.idempotency_key("x") == wh.idempotency_key("x").lower()


def test_signature_is_the_hmac_of_the_exact_body():
    secret, body = b"s3cr3t", b'{"a":1}'
    sig = wh.signature(secret, body)
    assert sig == "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    assert sig != wh.signature(secret, body + b" ") and sig != wh.signature(secret + b"x", body)


def test_the_retry_schedule_doubles_from_one_second_to_five_minutes():
    assert [wh.retry_delay_ms(n) for n in range(1, 12)] == [
        1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 300000, 300000]
    assert wh.retry_delay_ms(10_000) == 300_000 and wh.retry_delay_ms(0) == 0


def test_give_up_starts_at_exactly_give_up_seconds():
    assert not wh.give_up(1_000, 1_000 + 86_399_999, 86_400)
    assert wh.give_up(1_000, 1_000 + 86_400_000, 86_400)
    assert wh.give_up(0, 500, 0.5) and not wh.give_up(0, 499, 0.5)


@given(st.integers(0, 10**13), st.integers(0, 10**7), st.integers(1, 60), st.floats(0.001, 10**6))
def test_the_next_look_is_never_past_give_up_nor_before_the_backoff(created, after, failures, give_up_s):
    failed_at = created + after
    nxt = wh.next_attempt_ms(created, failed_at, failures, give_up_s)
    deadline = wh.give_up_ms(created, give_up_s)
    assert nxt <= deadline
    assert nxt == failed_at + wh.retry_delay_ms(failures) or (nxt == deadline and wh.give_up(created, nxt, give_up_s))


def test_statuses_and_their_names():
    assert (wh.PENDING, wh.DELIVERED, wh.FAILED) == (0, 1, 2)
    assert [wh.STATUS_NAMES[s] for s in (wh.PENDING, wh.DELIVERED, wh.FAILED)] == ["pending", "delivered", "failed"]
    assert [wh.is_success(c) for c in (199, 200, 204, 299, 300, 404, 500)] == [False, True, True, True, False,
                                                                               False, False]
