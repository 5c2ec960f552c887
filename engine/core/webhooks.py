"""Webhook messages (docs/api.md §16 "Webhooks"): bodies, ids, keys, signatures, retries.

Pure: the clock comes in as ``now_ms``, the secret as bytes. The outbox that
keeps messages durable is :mod:`engine.log.outbox`; the worker that POSTs them
is :mod:`engine.runtime.webhooks`.

A message is born once, when the log record it comes from (an award at
FINALIZED, a board state change) is durable, and never changes: every
delivery of it sends the same ``body`` with the same ``Idempotency-Key``
(:func:`idempotency_key` of its ``message_id``), so a receiver that keeps the
keys it has seen gets each message exactly once.

>>> m = state_message("g:m:S1:global", "FROZEN", 7, created_ms=1_000)
>>> m.body
b'{"type":"board_state","board_id":"g:m:S1:global","state":"FROZEN","version":7}'
>>> m.message_id
'state/g:m:S1:global/FROZEN'
>>> idempotency_key("state/b/FROZEN")[:16]
'442b7133def1b7f8'
>>> [retry_delay_ms(n) for n in (1, 2, 3, 9, 10, 50)]
[1000, 2000, 4000, 256000, 300000, 300000]
"""

from __future__ import annotations

import hashlib
import hmac
from typing import NamedTuple, Sequence

import orjson

# delivery statuses, as stored (one byte per message in the outbox's state file)
PENDING = 0
DELIVERED = 1
FAILED = 2
STATUS_NAMES = ("pending", "delivered", "failed")  # STATUS_NAMES[status]: what GET …/awards says

FIRST_RETRY_MS = 1_000  # the delay before the second attempt
MAX_RETRY_MS = 300_000  # the delay never grows past 5 minutes
DEFAULT_GIVE_UP_S = 86_400  # --webhook-give-up-s
TIMEOUT_S = 10.0  # no answer within this: the attempt failed

CONTENT_TYPE = "application/json"
KEY_HEADER = "Idempotency-Key"
SIGNATURE_HEADER = "X-FlowRank-Signature"


class Message(NamedTuple):
    """One webhook: its id (``award/<board>/<player>`` or ``state/<board>/<state>``),
    the exact bytes POSTed, and when it was created (epoch ms: give-up counts from it)."""

    message_id: str
    body: bytes
    created_ms: int


def award_id(board_id: str, player_id: str) -> str:
    """``"<board_id>/<player_id>"`` (docs/api.md §16 "Prizes")."""
    return f"{board_id}/{player_id}"


def award_body(award_id: str, board_id: str, player_id: str, rank: int, cohort: int | None, reward: dict,
               version: int) -> bytes:
    """The award's JSON body: compact UTF-8, keys in the contract's order. ``O(len(reward))``."""
    return orjson.dumps({"type": "award", "award_id": award_id, "board_id": board_id, "player_id": player_id,
                         "rank": rank, "cohort": cohort, "reward": reward, "version": version})


def state_body(board_id: str, state: str, version: int) -> bytes:
    """A board state change's JSON body: compact UTF-8, keys in the contract's order."""
    return orjson.dumps({"type": "board_state", "board_id": board_id, "state": state, "version": version})


def award_message(board_id: str, player_id: str, rank: int, cohort: int | None, reward: dict, version: int,
                  created_ms: int) -> Message:
    """The message of one award (id ``award/<board_id>/<player_id>``)."""
    aid = award_id(board_id, player_id)
    return Message(f"award/{aid}", award_body(aid, board_id, player_id, rank, cohort, reward, version), created_ms)


def award_messages(board_id: str, version: int, rewards: Sequence[dict], player_ids: Sequence[str],
                   ranks: Sequence[int], cohorts: Sequence[str | None], prizes: Sequence[int],
                   created_ms: int) -> list[Message]:
    """The messages of a board's awards given as columns (``prizes[i]``: the index of award ``i``'s reward)."""
    return [award_message(board_id, pid, rank, cohort, rewards[k], version, created_ms)
            for pid, rank, cohort, k in zip(player_ids, ranks, cohorts, prizes)]


def state_message(board_id: str, state: str, version: int, created_ms: int) -> Message:
    """The message of one board state change (id ``state/<board_id>/<state>``)."""
    return Message(f"state/{board_id}/{state}", state_body(board_id, state, version), created_ms)


def idempotency_key(message_id: str) -> str:
    """The ``Idempotency-Key`` header: lowercase hex SHA-256 of the id's UTF-8 bytes."""
    return hashlib.sha256(message_id.encode("utf-8")).hexdigest()


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-FlowRank-Signature`` header: ``"sha256=" + hex HMAC-SHA256(secret, body)``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def retry_delay_ms(failures: int) -> int:
    """How long to wait before the next attempt after ``failures`` (>= 1) failed
    ones: 1 s, doubling, at most 300 s."""
    if failures < 1:
        return 0
    if failures > 20:  # 2**19 s is far past the cap: no huge ints
        return MAX_RETRY_MS
    return min(FIRST_RETRY_MS << (failures - 1), MAX_RETRY_MS)


def give_up_ms(created_ms: int, give_up_s: float) -> int:
    """The epoch ms from which no attempt starts: ``created_ms + give_up_s`` seconds."""
    return created_ms + int(give_up_s * 1000)


def give_up(created_ms: int, now_ms: int, give_up_s: float) -> bool:
    """True once ``give_up_s`` seconds have passed since the message was created:
    no attempt is started then, the message is ``failed``."""
    return now_ms >= give_up_ms(created_ms, give_up_s)


def next_attempt_ms(created_ms: int, failed_at_ms: int, failures: int, give_up_s: float) -> int:
    """When to look at a message again after its ``failures``-th failed attempt
    ended at ``failed_at_ms``: the backoff's time, or the give-up time if that
    comes first (then :func:`give_up` is true and it is failed, not tried)."""
    return min(failed_at_ms + retry_delay_ms(failures), give_up_ms(created_ms, give_up_s))


def is_success(http_status: int) -> bool:
    """Only a 2xx answer delivers a message."""
    return 200 <= http_status < 300
