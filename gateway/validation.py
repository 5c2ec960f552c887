"""Input rules of docs/api.md §3-4 as plain functions, and the cursor codec.

Every check raises :class:`engine.core.errors.ValidationFailed` naming the field
in the API's path format (``events[3].value``). Nothing here touches HTTP,
so the same rules serve the routes, the client and the tests.

>>> check_board_id("arena-clash:solo:S7:global")
'arena-clash:solo:S7:global'
>>> decode_cursor(encode_cursor(version=6, offset=10))
(6, 10)
"""

from __future__ import annotations

import json
import re
from itertools import repeat
from typing import Any, Sequence

import numpy as np
import orjson

from engine.core.columns import ScoreBatch, ScoreColumns
from engine.core.errors import BatchTooLarge, ValidationFailed
from engine.core.model import INT64_MAX, INT64_MIN, MAX_SUBSCORES, ScoreEvent
from engine.core.records import canonical_json
from engine.core.timefmt import MAX_MS, MIN_MS, parse_timestamp

BOARD_PART = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
BOARD_ID_RE = re.compile(rf"^{BOARD_PART}:{BOARD_PART}:{BOARD_PART}:{BOARD_PART}$")
BOARD_ID_PATTERN = BOARD_ID_RE.pattern
MAX_ID_CHARS = 128
_BAD_ID_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # Cc and lone surrogates
# The same rule as a JSON-schema ``pattern`` (what /openapi.json states; :func:`id_problem` enforces it)
ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"  # lone surrogates: not Unicode text, so no JSON-schema string holds one
# A page cursor: ``<version>.<offset>``, decimal without leading zeros, each at most 18 digits (< 2**62)
CURSOR_PATTERN = r"^(0|[1-9][0-9]{0,17})\.(0|[1-9][0-9]{0,17})$"
_CURSOR_RE = re.compile(CURSOR_PATTERN)


def check_board_id(raw: object, field: str = "board_id") -> str:
    if not isinstance(raw, str):
        raise ValidationFailed("board_id must be a string.", field)
    # fullmatch on the ASCII pattern; '$' would also accept a trailing newline
    if not BOARD_ID_RE.fullmatch(raw) or raw.endswith("\n"):
        raise ValidationFailed(
            "board_id must be game:mode:season:scope, each part matching [A-Za-z0-9][A-Za-z0-9_.-]{0,63}.",
            field,
        )
    return raw


def id_problem(raw: object) -> str | None:
    """Why ``raw`` is not a valid player/event id, or None when it is.

    Valid: a str of 1-128 code points, none in Unicode category Cc and no
    lone surrogates (which JSON ``\\ud800`` escapes can produce). O(len).
    """
    if not isinstance(raw, str):
        return "must be a string"
    if not 1 <= len(raw) <= MAX_ID_CHARS:
        return f"must be 1-{MAX_ID_CHARS} characters long"
    bad = _BAD_ID_CHAR.search(raw)  # one C-level scan instead of a Python loop per character
    if bad is None:
        return None
    if 0xD800 <= ord(bad.group()) <= 0xDFFF:
        return "must not contain lone surrogates"
    return "must not contain control characters"


def check_id(raw: object, field: str, what: str = "id") -> str:
    problem = id_problem(raw)
    if problem is not None:
        raise ValidationFailed(f"{what} {problem}.", field)
    return raw  # type: ignore[return-value]


def check_int64(raw: object, field: str, what: str = "value") -> int:
    """A JSON integer in the signed 64-bit range: no bool, no float (even 5.0), no str."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValidationFailed(f"{what} must be a JSON integer (not a float, string or boolean).", field)
    if not INT64_MIN <= raw <= INT64_MAX:
        raise ValidationFailed(f"{what} must fit in a signed 64-bit integer.", field)
    return raw


MAX_METADATA_BYTES = 1024
_META_FLOAT_LIMIT = 2.0**63  # orjson parses an integer past 64 bits as a float: refuse both alike


def encode_metadata(raw: object, field: str) -> bytes:
    """An event's ``metadata`` → its canonical encoding (docs/api.md §13), or
    b"" when absent (None). Canonical: compact UTF-8 JSON with the keys of
    every object sorted (``orjson`` ``OPT_SORT_KEYS``), so the same object
    sent twice with its keys in another order is the same content. 422 when
    it is not an object, when the encoding is over 1,024 bytes, or when it
    holds a number that is not an integer within 64 bits or a finite float
    of magnitude below 2**63, or a string with a lone surrogate. O(size).

    >>> encode_metadata({"b": 1, "a": [True, None, "x"]}, "m")
    b'{"a":[true,null,"x"],"b":1}'
    >>> encode_metadata(None, "m")
    b''
    """
    if raw is None:
        return b""
    return _json_object(raw, field, "metadata", orjson.OPT_SORT_KEYS)


def check_reward(raw: object, field: str) -> str:
    """A prize's ``reward`` (docs/api.md §16) → the text the engine keeps
    (:func:`engine.core.records.canonical_json`: compact, keys in the order
    given). 422 by the rules of :func:`encode_metadata` (a JSON object of at
    most 1,024 bytes, 64-bit integers, finite floats, no lone surrogates), so
    every reward can be written back as JSON. O(size).

    >>> check_reward({"coins": 500, "badge": "gold"}, "r")
    '{"coins":500,"badge":"gold"}'
    """
    _json_object(raw, field, "reward")
    return canonical_json(raw)


def _json_object(raw: object, field: str, what: str, option: int = 0) -> bytes:
    """``raw``'s compact orjson encoding, or ValidationFailed (``field``) unless it is a JSON object
    that holds what JSON can say exactly and encodes to at most :data:`MAX_METADATA_BYTES`."""
    if type(raw) is not dict:
        raise ValidationFailed(f"{what} must be a JSON object.", field)
    try:
        enc = orjson.dumps(raw, option=option)
    except (TypeError, orjson.JSONEncodeError):
        raise ValidationFailed(
            f"{what} must hold integers within 64 bits and strings without lone surrogates.", field) from None
    if len(enc) > MAX_METADATA_BYTES:
        raise ValidationFailed(
            f"{what} must be at most {MAX_METADATA_BYTES} bytes as compact JSON; this is {len(enc)}.", field)
    if (b"." in enc or b"e" in enc or b"E" in enc or b"null" in enc) and not _floats_ok(raw):
        raise ValidationFailed(f"{what} numbers must be finite, and floats below {_META_FLOAT_LIMIT:.0f} in "
                               "magnitude.", field)
    return enc


def _floats_ok(x: object) -> bool:
    """No float in ``x`` is infinite, NaN or of magnitude >= 2**63."""
    if type(x) is float:
        return abs(x) < _META_FLOAT_LIMIT  # False for inf and nan
    if type(x) is dict:
        return all(_floats_ok(v) for v in x.values())
    if type(x) is list:
        return all(_floats_ok(v) for v in x)
    return True


_EVENT_REQUIRED = ("event_id", "board_id", "player_id", "value", "achieved_at")
MAX_FANOUT_BOARDS = 16  # an event's board_ids (docs/api.md §15)


def fanout_boards(raw: dict, field: str) -> list[str] | None:
    """An event's ``board_ids`` (docs/api.md §15): 1-16 distinct valid board
    ids, given instead of ``board_id``; None when the event has none. 422 when
    it has both, or a bad list."""
    if "board_ids" not in raw:
        return None
    ids = raw["board_ids"]
    if "board_id" in raw:
        raise ValidationFailed("An event has board_id or board_ids, not both.", f"{field}.board_ids")
    if type(ids) is not list or not 1 <= len(ids) <= MAX_FANOUT_BOARDS:
        raise ValidationFailed(f"board_ids must be an array of 1 to {MAX_FANOUT_BOARDS} board ids.",
                               f"{field}.board_ids")
    for k, b in enumerate(ids):
        check_board_id(b, f"{field}.board_ids[{k}]")
    if len(set(ids)) != len(ids):
        raise ValidationFailed("board_ids must be distinct.", f"{field}.board_ids")
    return ids


def event_from_json(raw: object, field: str) -> ScoreEvent:
    """One docs/api.md §7 event object → :class:`ScoreEvent`; unknown keys are ignored.

    A fast path accepts the common shape (string ids, integer value and epoch-ms
    times) with the same checks and no per-field strings; anything else, and
    every error, goes through the field-by-field path that names the field.
    """
    ev = _fast_event(raw)
    return ev if ev is not None else _event_from_json_checked(raw, field)


def _fast_event(raw: object) -> ScoreEvent | None:
    """The common, valid shape → ScoreEvent; None sends the caller to the checked path."""
    if type(raw) is dict:
        eid, bid, pid = raw.get("event_id"), raw.get("board_id"), raw.get("player_id")
        value, at, sub = raw.get("value"), raw.get("achieved_at"), raw.get("submitted_at")
        meta = raw.get("metadata")
        if meta is not None or "board_ids" in raw:
            return None  # the checked path encodes it, naming the field on errors (and fans an event out)
        subs = raw.get("subscores")
        if subs is not None and subs != []:
            return None  # the checked path reads them, naming the field on errors
        if (type(eid) is str and type(pid) is str and type(bid) is str and type(value) is int and type(at) is int
                and (sub is None or type(sub) is int)
                and 0 < len(eid) <= MAX_ID_CHARS and 0 < len(pid) <= MAX_ID_CHARS
                and _BAD_ID_CHAR.search(eid) is None and _BAD_ID_CHAR.search(pid) is None
                and BOARD_ID_RE.fullmatch(bid) is not None and not bid.endswith("\n")
                and INT64_MIN <= value <= INT64_MAX and MIN_MS <= at <= MAX_MS
                and (sub is None or MIN_MS <= sub <= MAX_MS)):
            return ScoreEvent(board_id=bid, event_id=eid, player_id=pid, value=value, achieved_at=at,
                              submitted_at=at if sub is None else sub)
    return None


def _event_from_json_checked(raw: object, field: str) -> ScoreEvent:
    if not isinstance(raw, dict):
        raise ValidationFailed("Each event must be a JSON object.", field)
    for key in _EVENT_REQUIRED:
        if key not in raw:
            raise ValidationFailed(f"{key} is required.", f"{field}.{key}")
    event_id = check_id(raw["event_id"], f"{field}.event_id", "event_id")
    board_id = check_board_id(raw["board_id"], f"{field}.board_id")
    player_id = check_id(raw["player_id"], f"{field}.player_id", "player_id")
    value = check_int64(raw["value"], f"{field}.value")
    achieved_at = parse_timestamp(raw["achieved_at"], f"{field}.achieved_at")
    submitted_raw = raw.get("submitted_at")
    submitted_at = achieved_at if submitted_raw is None else parse_timestamp(submitted_raw, f"{field}.submitted_at")
    metadata = encode_metadata(raw.get("metadata"), f"{field}.metadata")
    subscores = check_subscores(raw.get("subscores"), f"{field}.subscores")
    return ScoreEvent(
        board_id=board_id,
        event_id=event_id,
        player_id=player_id,
        value=value,
        achieved_at=achieved_at,
        submitted_at=submitted_at,
        metadata=metadata,
        subscores=subscores,
    )


def check_subscores(raw: object, field: str) -> tuple[int, ...]:
    """An event's ``subscores`` (docs/api.md §14): null or a list of at most
    MAX_SUBSCORES signed 64-bit integers, as a tuple (() for none). Whether
    the count is the board's is checked against the board, before the log
    (:func:`engine.core.subscores.check_batch`).

    >>> check_subscores(None, "s"), check_subscores([1, -2], "s")
    ((), (1, -2))
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValidationFailed("subscores must be a list of signed 64-bit integers (or null).", field)
    if len(raw) > MAX_SUBSCORES:
        raise ValidationFailed(f"An event carries at most {MAX_SUBSCORES} subscores; this one has {len(raw)}.", field)
    for x in raw:
        if type(x) is not int or not INT64_MIN <= x <= INT64_MAX:
            raise ValidationFailed("subscores must be a list of signed 64-bit integers (or null).", field)
    return tuple(raw)


def events_from_body(body: object, max_events: int) -> list[ScoreEvent]:
    """The whole batch or nothing: 413 past ``max_events``, else the first bad field's 422.
    An event with ``board_ids`` is that event once per board, in order."""
    return expand_events(body, max_events)[0]


def expand_events(body: object, max_events: int) -> tuple[list[ScoreEvent], list[int] | None]:
    """:func:`events_from_body`, and for a batch where some event fans out to
    several boards (``board_ids``, docs/api.md §15) the request index of each
    resulting (event, board) row (None: no event fans out). Such an event
    counts as that many events towards ``max_events`` (413 beyond)."""
    if not isinstance(body, dict):
        raise ValidationFailed("The body must be a JSON object with an events array.", None)
    events = body.get("events")
    if "events" not in body:
        raise ValidationFailed("events is required.", "events")
    if not isinstance(events, list):
        raise ValidationFailed("events must be an array.", "events")
    if len(events) > max_events:
        raise BatchTooLarge(f"A batch holds at most {max_events} events; this one has {len(events)}.", "events")
    if not events:
        raise ValidationFailed("events must hold at least one event.", "events")
    out: list[ScoreEvent] = []
    append = out.append
    origin: list[int] | None = None
    for i, e in enumerate(events):
        ev = _fast_event(e)
        if ev is not None:
            append(ev)
            if origin is not None:
                origin.append(i)
            continue
        boards = fanout_boards(e, f"events[{i}]") if type(e) is dict else None
        if boards is None:
            append(_event_from_json_checked(e, f"events[{i}]"))
            if origin is not None:
                origin.append(i)
            continue
        if origin is None:
            origin = list(range(len(out)))
        one = _event_from_json_checked({**e, "board_id": boards[0]}, f"events[{i}]")
        for b in boards:
            append(one._replace(board_id=b))
            origin.append(i)
    if len(out) > max_events:
        raise BatchTooLarge(f"A batch holds at most {max_events} events, an event with board_ids counting once per "
                            f"board; this one has {len(out)}.", "events")
    return out, origin


def decode_events(raw: bytes, max_events: int) -> list[ScoreEvent]:
    """A ``POST /v1/events`` body → its :class:`ScoreEvent` list, or the 413/422 of
    :func:`events_from_body` / :func:`parse_json_body`.

    orjson parses valid bodies (no pydantic object per event); any error is
    re-derived from the stdlib parse, whose messages the API has always given
    (orjson turns an integer past 64 bits into a float, and rejects lone
    surrogates that ``json`` lets the id rules name). O(len(raw)).
    """
    return decode_expanded(raw, max_events)[0]


def decode_expanded(raw: bytes, max_events: int) -> tuple[list[ScoreEvent], list[int] | None]:
    """:func:`decode_events` with :func:`expand_events`' request indexes."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = _NOT_PARSED
    if doc is not _NOT_PARSED:
        try:
            return expand_events(doc, max_events)
        except (ValidationFailed, BatchTooLarge):
            pass
    return expand_events(parse_json_body(raw), max_events)


def decode_batch(raw: bytes, max_events: int) -> ScoreBatch:
    """A ``POST /v1/events`` body → a :class:`ScoreBatch` (per-board columns),
    with exactly the 413/422 answers of :func:`decode_events`.

    The one place the HTTP write path decodes a batch. A batch of the common
    shape (every event an object with string ids, known-good board ids,
    integer value and epoch-ms times, no metadata) is checked column by
    column and never becomes one record per event; anything else goes
    through :func:`decode_events`, so errors name the same field. O(len(raw)).
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    events = doc.get("events") if type(doc) is dict else None
    if type(events) is list and 0 < len(events) <= max_events:
        batch = _batch_columns(events, max_events)
        if batch is not None:
            return batch
    got, origin = decode_expanded(raw, max_events)
    batch = ScoreBatch.from_events(got)
    return batch if origin is None else ScoreBatch(batch.event_ids, batch.boards, batch.positions, np.array(origin, np.int64))


def _batch_columns(events: list, max_events: int = 10_000) -> ScoreBatch | None:
    """The common, valid shape of a batch → ScoreBatch; None sends the caller to the checked path.
    The rules of :func:`_fast_event`, one C-level pass per column (``map`` over ``dict.get``).
    A batch where every event names its boards with ``board_ids`` (docs/api.md §15) is expanded
    to one row per (event, board) here too, as columns (:func:`_fanout_boards`)."""
    n = len(events)
    if set(map(type, events)) != {dict}:
        return None
    get = dict.get
    if list(map(get, events, repeat("metadata", n))).count(None) != n:
        return None
    if list(map(get, events, repeat("subscores", n))).count(None) != n:  # subscores: the checked path
        return None
    origin = None
    if any(map(dict.__contains__, events, repeat("board_ids", n))):
        got = _fanout_boards(events, max_events)  # an event for several boards (docs/api.md §15)
        if got is None:
            return None
        bids, origin = got
    else:
        bids = list(map(get, events, repeat("board_id", n)))
    eids = list(map(get, events, repeat("event_id", n)))
    pids = list(map(get, events, repeat("player_id", n)))
    if set(map(type, eids)) | set(map(type, pids)) | set(map(type, bids)) != {str}:
        return None
    for ids in (eids, pids):
        lens = list(map(len, ids))
        if min(lens) < 1 or max(lens) > MAX_ID_CHARS or _BAD_ID_CHAR.search("".join(ids)) is not None:
            return None
    boards = dict.fromkeys(bids)  # distinct board ids, in order of first appearance
    for b in boards:
        if BOARD_ID_RE.fullmatch(b) is None or b.endswith("\n"):
            return None
    values_raw = list(map(get, events, repeat("value", n)))
    at_raw = list(map(get, events, repeat("achieved_at", n)))
    sub_raw = list(map(get, events, repeat("submitted_at", n)))
    if set(map(type, values_raw)) | set(map(type, at_raw)) != {int}:
        return None
    try:
        values = np.array(values_raw, np.int64)
        achieved = np.array(at_raw, np.int64)
        sub_types = set(map(type, sub_raw))
        if sub_types == {type(None)}:
            submitted = achieved
        elif sub_types <= {type(None), int}:
            submitted = np.array([a if x is None else x for a, x in zip(at_raw, sub_raw)], np.int64)
        else:
            return None
    except OverflowError:  # past 64 bits: the checked path names the field
        return None
    for col in (achieved, submitted):
        if int(col.min()) < MIN_MS or int(col.max()) > MAX_MS:
            return None
    if origin is not None:  # one row per (event, board): the event's columns repeated
        rows = origin.tolist()
        eids, pids = [eids[i] for i in rows], [pids[i] for i in rows]
        values, achieved, submitted = values[origin], achieved[origin], submitted[origin]
    if len(boards) == 1:
        cols = ScoreColumns(bids[0], eids, pids, values, achieved, submitted)
        return ScoreBatch(eids, [cols], [np.arange(len(eids), dtype=np.int64)], origin)
    index = {b: i for i, b in enumerate(boards)}
    which = np.fromiter(map(index.__getitem__, bids), np.int64, len(bids))
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(boards) + 1)).tolist()
    out, positions = [], []
    for i, b in enumerate(boards):
        rows = order[bounds[i]:bounds[i + 1]]
        idx = rows.tolist()
        out.append(ScoreColumns(b, [eids[k] for k in idx], [pids[k] for k in idx], values[rows], achieved[rows],
                                submitted[rows]))
        positions.append(rows)
    return ScoreBatch(eids, out, positions, origin)


def _fanout_boards(events: list, max_events: int) -> tuple[list, np.ndarray] | None:
    """For a batch where every event has ``board_ids`` (and none ``board_id``):
    the board of every (event, board) row in request order, and each row's
    request index; None for any other shape or a bad list (the checked path
    then names the field), or past ``max_events`` rows (its 413)."""
    n = len(events)
    if any(map(dict.__contains__, events, repeat("board_id", n))):
        return None
    lists = list(map(dict.get, events, repeat("board_ids", n)))
    if set(map(type, lists)) != {list}:
        return None
    counts = np.fromiter(map(len, lists), np.int64, n)
    if int(counts.min()) < 1 or int(counts.max()) > MAX_FANOUT_BOARDS or int(counts.sum()) > max_events:
        return None
    flat = [b for one in lists for b in one]
    if set(map(type, flat)) != {str}:
        return None
    if not all(map(int.__eq__, map(len, map(set, lists)), counts.tolist())):  # distinct within each event
        return None
    return flat, np.repeat(np.arange(n, dtype=np.int64), counts)


_NOT_PARSED = object()


def parse_json_body(raw: bytes) -> Any:
    """Strict JSON (no NaN/Infinity) or 422 with field null."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("The body is not valid UTF-8.", None) from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise ValidationFailed("The body is not valid JSON.", None) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loc_to_field(loc: Sequence[Any]) -> str | None:
    """pydantic/FastAPI loc tuple → API path: ('body','events',3,'value') → 'events[3].value'."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif isinstance(p, str):
            if p.startswith(("function-", "constrained-", "lax-", "strict-")) or "[" in p:
                continue  # pydantic's internal validator tags
            out += f".{p}" if out else p
    return out or None


# ---- cursor codec ------------------------------------------------------------


def encode_cursor(version: int, offset: int) -> str:
    """Page token pinning ``version``: ``"<version>.<offset>"`` (:data:`CURSOR_PATTERN`, what /openapi.json
    states, so a client or a schema-driven test can tell a well-formed cursor from a bad one)."""
    return f"{version}.{offset}"


def decode_cursor(token: str) -> tuple[int, int]:
    """(version, offset) or 422 naming ``cursor``: exactly :data:`CURSOR_PATTERN` (no sign, no spaces,
    no leading zeros, no trailing newline)."""
    m = _CURSOR_RE.fullmatch(token) if isinstance(token, str) else None
    if m is None:
        raise ValidationFailed("cursor is not a cursor this server issued.", "cursor")
    return int(m.group(1)), int(m.group(2))
