"""Engine records → the exact JSON shapes of docs/api.md §5-10 (plain dicts).

Every timestamp leaves as ``YYYY-MM-DDTHH:MM:SS.sssZ``. Each function is
O(size of the record).

A row's ``metadata`` (docs/api.md §13) is there only when the row has some,
as an :class:`orjson.Fragment` of the canonical compact JSON the engine
keeps: it is written into the response as is, never parsed again, so these
dicts are serialised with orjson (every route that returns them does).
"""

from __future__ import annotations

import functools

import numpy as np
import orjson
from orjson import Fragment

from engine.core.model import (
    AwardsPage,
    BoardInfo,
    BulkJoinResult,
    Changes,
    Checksum,
    CohortsPage,
    CohortView,
    DecisionResult,
    ErasureAccepted,
    ErasureStatus,
    EventResult,
    HeldEvent,
    HistoryEntry,
    InstanceInfo,
    InvalidationResult,
    JoinResult,
    PlayerData,
    PlayerTier,
    PlayerView,
    RankedEntry,
    RowChange,
    RowStatus,
)
from engine.core.records import OUTCOME_NAMES
from engine.core.timefmt import format_timestamp as _format_timestamp


@functools.lru_cache(maxsize=1 << 16)
def format_timestamp(ms: int) -> str:
    """:func:`engine.core.timefmt.format_timestamp`, memoised: a top window renders
    the same rows' timestamps on every read (~10 µs each uncached, O(1) hit)."""
    return _format_timestamp(ms)


def _v(x) -> str | None:
    return None if x is None else getattr(x, "value", x)


def board(b: BoardInfo) -> dict:
    return {
        "board_id": b.board_id,
        "policy": _v(b.policy),
        "state": _v(b.state),
        "version": b.version,
        "size": b.size,
        "shards": b.shards,
        "max_plausible_time_ms": b.max_plausible_time_ms,
        "review_above": b.review_above,
        "closes_at": None if b.closes_at is None else format_timestamp(b.closes_at),
        "finalize_after_s": b.finalize_after_s,
        "subscores": list(b.subscores),
        **({"entry": b.entry.to_json()} if b.entry is not None else {}),
        **({"league": b.league.to_json()} if b.league is not None else {}),
        **({"prizes": [p.to_json() for p in b.prizes]} if b.prizes else {}),
        **series_fields(b),
    }


def series_fields(b: BoardInfo) -> dict:
    """A series' ``recurrence`` and ``current``, an instance's ``series`` and
    ``window`` (docs/api.md §15); nothing for other boards."""
    if b.recurrence is not None:
        return {"recurrence": b.recurrence, "current": b.current}
    if b.series is not None and b.window is not None:
        return {"series": b.series, "window": {"starts_at": format_timestamp(b.window[0]),
                                               "ends_at": format_timestamp(b.window[1])}}
    return {}


def instances(items: list[InstanceInfo]) -> dict:
    """``GET /v1/boards/{series}/instances`` (docs/api.md §15), latest window first."""
    return {"instances": [{"board_id": i.board_id, "starts_at": format_timestamp(i.starts_at),
                           "ends_at": format_timestamp(i.ends_at), "state": _v(i.state), "size": i.size}
                          for i in items]}


def result(r: EventResult) -> dict:
    return {"event_id": r.event_id, "outcome": _v(r.outcome), "version": r.version}


def results(event_ids: list[str], codes: np.ndarray, versions: np.ndarray, board_ids: list[str]) -> bytes:
    """The ``POST /v1/events`` body (docs/api.md §7, §15) from a batch's result
    columns: one ``{"event_id", "board_id", "outcome", "version"}`` per
    (event, board), in order. One orjson call; O(n) with one small dict per
    event (as fast here as building the bytes by hand, and escaping stays orjson's)."""
    names = OUTCOME_NAMES
    return orjson.dumps({"results": [{"event_id": e, "board_id": b, "outcome": names[c], "version": v}
                                     for e, b, c, v in zip(event_ids, board_ids, codes.tolist(), versions.tolist())]})


def entry(e: RankedEntry) -> dict:
    out = {"rank": e.rank, "player_id": e.player_id, "value": e.value, "achieved_at": format_timestamp(e.achieved_at)}
    if e.tied_rank is not None:
        out["tied_rank"] = e.tied_rank
    if e.metadata:
        out["metadata"] = Fragment(e.metadata)
    if e.subscores is not None:
        out["subscores"] = list(e.subscores)
    return out


def entries(es) -> list[dict]:
    """Entries as JSON objects; ``tied_rank`` is there when the read asked
    for it, ``metadata`` when the row has some."""
    fmt = format_timestamp
    if es and es[0].tied_rank is not None:
        out = [{"rank": e.rank, "tied_rank": e.tied_rank, "player_id": e.player_id, "value": e.value,
                "achieved_at": fmt(e.achieved_at)} for e in es]
    else:
        out = [{"rank": e.rank, "player_id": e.player_id, "value": e.value, "achieved_at": fmt(e.achieved_at)}
               for e in es]
    for d, e in zip(out, es):
        if e.metadata:
            d["metadata"] = Fragment(e.metadata)
    if es and es[0].subscores is not None:  # a board with subscores (docs/api.md §14): every entry has them
        for d, e in zip(out, es):
            d["subscores"] = list(e.subscores)
    return out


def cohort(v: CohortView) -> dict:
    """A league cohort (docs/api.md §16): its ranked members as :func:`entries`
    (ranks local to the cohort), each with its ``zone`` (null outside both)."""
    out = entries(v.entries)
    for d, z in zip(out, v.zones):
        d["zone"] = z
    return {"board_id": v.board_id, "version": v.version, "tier": v.tier, "cohort": v.cohort, "members": v.members,
            "entries": out}


def awards(page: AwardsPage, next_cursor: str | None) -> dict:
    """A page of awards (docs/api.md §16); each ``reward`` is the object as
    the board keeps it (a :class:`Fragment` of its compact JSON)."""
    return {"awards": [{**a._asdict(), "reward": Fragment(a.reward)} for a in page.awards],
            "next_cursor": next_cursor}


def player_data(d: PlayerData) -> dict:
    """``GET /v1/players/{id}/data`` (docs/api.md §17): per board the §8 player view (null: no row), the §10
    history and held events, the §16 awards; ``joined`` and ``cohort`` where the player has them."""
    boards = []
    for b in d.boards:
        out = {"board_id": b.board_id, "row": None if b.row is None else player(b.row),
               "history": [history(h) for h in b.history], "held": [held(h) for h in b.held],
               "awards": [{**a._asdict(), "reward": Fragment(a.reward)} for a in b.awards]}
        if b.joined is not None:
            out["joined"] = b.joined
        if b.cohort is not None:
            out["cohort"] = b.cohort
        boards.append(out)
    return {"player_id": d.player_id, "boards": boards}


def erasure(e: ErasureAccepted) -> dict:
    return {"erasure_id": e.erasure_id, "player_id": e.player_id, "boards": list(e.boards)}


def erasure_status(e: ErasureStatus) -> dict:
    return {"erasure_id": e.erasure_id, "status": e.status, "requested_at": format_timestamp(e.requested_at),
            "completed_at": None if e.completed_at is None else format_timestamp(e.completed_at)}


def change(c: RowChange) -> dict:
    if c.status is RowStatus.ERASED:  # docs/api.md §17: the erased player's id and nothing else
        return {"player_id": c.player_id, "status": "ERASED"}
    out = {
        "player_id": c.player_id,
        "value": c.value,
        "achieved_at": format_timestamp(c.achieved_at),
        "status": _v(c.status),
    }
    if c.metadata:
        out["metadata"] = Fragment(c.metadata)
    if c.subscores is not None:
        out["subscores"] = list(c.subscores)
    return out


def player(p: PlayerView) -> dict:
    return {
        "version": p.version,
        "player_id": p.player_id,
        "rank": p.rank,
        "value": p.value,
        "achieved_at": format_timestamp(p.achieved_at),
        "status": _v(p.status),
        "approximate": bool(p.approximate),
        "rank_error_bound": p.rank_error_bound if p.approximate else None,
        "row_version": p.row_version,
        **({"tied_rank": p.tied_rank} if p.tied_rank is not None else {}),
        **({"metadata": Fragment(p.metadata)} if p.metadata else {}),
        **({"subscores": list(p.subscores)} if p.subscores is not None else {}),
        **({"attempts": p.attempts} if p.attempts is not None else {}),
    }


def join(j: JoinResult) -> dict:
    """A join's body (docs/api.md §16); a join that named a series also names the instance (§18)."""
    out = {"player_id": j.player_id, "position": j.position}
    if j.board_id is not None:
        out["board_id"] = j.board_id
    return out


def joins(r: BulkJoinResult, player_ids) -> dict:
    """A bulk join's body (docs/api.md §18): per player, in request order, the status and body the single
    join would have answered (its error body's ``error`` on a 409)."""
    results = []
    for player_id, got in zip(player_ids, r.results):
        if isinstance(got, JoinResult):
            results.append({"player_id": got.player_id, "status": 201 if got.created else 200,
                            "position": got.position})
        else:
            results.append({"player_id": player_id, "status": got.status, **got.to_body()})
    return {"board_id": r.board_id, "results": results}


def cohorts(p: CohortsPage, next_cursor: str | None) -> dict:
    """A page of a league's cohorts (docs/api.md §18)."""
    return {"board_id": p.board_id, "version": p.version,
            "cohorts": [{"cohort": c.cohort, "tier": c.tier, "members": c.members} for c in p.cohorts],
            "next_cursor": next_cursor}


def tier(t: PlayerTier) -> dict:
    """A player's tier on a league board (docs/api.md §18)."""
    return {"board_id": t.board_id, "player_id": t.player_id, "tier": t.tier, "entered": t.entered}


def changes(c: Changes) -> dict:
    if c.kind == "deltas":
        return {
            "kind": "deltas",
            "from_version": c.from_version,
            "version": c.version,
            "deltas": [{"version": d.version, "changes": [change(x) for x in d.changes]} for d in c.deltas],
        }
    return {"kind": "snapshot", "version": c.version, "entries": entries(c.entries)}


def held(h: HeldEvent) -> dict:
    return {
        "event_id": h.event_id,
        "player_id": h.player_id,
        "value": h.value,
        "achieved_at": format_timestamp(h.achieved_at),
        "reason": _v(h.reason),
        **({"subscores": list(h.subscores)} if h.subscores else {}),
    }


def decision(d: DecisionResult) -> dict:
    return {"event_id": d.event_id, "decision": d.decision, "outcome": _v(d.outcome), "version": d.version}


def invalidation(r: InvalidationResult) -> dict:
    return {
        "correction_event_id": r.correction_event_id,
        "player_id": r.player_id,
        "status": _v(r.status),
        "value": r.value,
        "version": r.version,
    }


def history(h: HistoryEntry) -> dict:
    out = {
        "event_id": h.event_id,
        "kind": h.kind,
        "value": h.value,
        "achieved_at": None if h.achieved_at is None else format_timestamp(h.achieved_at),
        "outcome": _v(h.outcome),
        "invalidated": h.invalidated,
    }
    if h.metadata:
        out["metadata"] = Fragment(h.metadata)
    return out


def checksum(c: Checksum) -> dict:
    return {"version": c.version, "checksum": c.checksum}
