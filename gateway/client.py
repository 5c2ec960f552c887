"""A small typed client for game backends (sync, httpx).

Retries on 429, 503 and connection errors with exponential backoff (honouring
``Retry-After``). A retried ``submit`` re-sends the *same* body, so the same
event ids: a retry can only ever produce ``DUPLICATE_IGNORED``.

>>> # c = FlowRankClient("http://127.0.0.1:8000", key="…")
>>> # c.submit([{"event_id": "evt-101", "board_id": "arena-clash:solo:S7:global",
>>> #            "player_id": "p-dev", "value": 9700, "achieved_at": "2026-11-01T10:05:00Z"}])
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator
from urllib.parse import quote

import httpx

from engine.core import errors as E

_BY_CODE = {cls.code: cls for cls in (
    E.Unauthenticated, E.Forbidden, E.BoardNotFound, E.PlayerNotFound, E.PlayerNotRanked, E.EventNotFound,
    E.CohortNotFound, E.BoardExists, E.InvalidTransition, E.AlreadyDecided, E.BoardFull, E.BoardNotOpen, E.ViewExpired, E.BatchTooLarge,
    E.ValidationFailed, E.RateLimited, E.Overloaded)}


class ApiError(E.FlowRankError):
    """An error body whose code this client does not know."""

    def __init__(self, code: str, status: int, message: str, field: str | None = None, retry_after=None):
        super().__init__(message, field, retry_after)
        self.code, self.status = code, status


def _error_from(resp: httpx.Response) -> E.FlowRankError:
    try:
        err = resp.json()["error"]
        code, message, field = err["code"], err.get("message", ""), err.get("field")
    except (ValueError, KeyError, TypeError):
        code, message, field = f"HTTP_{resp.status_code}", resp.text[:200], None
    retry = resp.headers.get("Retry-After")
    retry_after = float(retry) if retry and retry.isdigit() else None
    cls = _BY_CODE.get(code)
    if cls is None:
        return ApiError(code, resp.status_code, message, field, retry_after)
    return cls(message, field, retry_after)


def _p(s: str) -> str:
    return quote(s, safe=":")


def follow_pages(fetch: Callable[[str | None], dict], key: str) -> Iterator[dict]:
    """The items under ``key`` of every page, following ``next_cursor`` from the first page to the last."""
    cursor = None
    while True:
        page = fetch(cursor)
        yield from page[key]
        cursor = page["next_cursor"]
        if not cursor:
            return


class FlowRankClient:
    def __init__(self, base_url: str, key: str, *, timeout: float = 10.0, retries: int = 5,
                 backoff_s: float = 0.1, max_backoff_s: float = 5.0, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {key}"})
        self.retries, self.backoff_s, self.max_backoff_s, self._sleep = retries, backoff_s, max_backoff_s, sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> Any:
        attempt = 0
        while True:
            try:
                resp = self._http.request(method, path, json=json, params=params)
            except httpx.TransportError:
                if attempt >= self.retries:
                    raise
                wait = None
            else:
                if resp.status_code < 400:
                    return resp.json() if resp.headers.get("content-type", "").startswith("application/json") \
                        else resp.text
                if resp.status_code not in (429, 503) or attempt >= self.retries:
                    raise _error_from(resp)
                ra = resp.headers.get("Retry-After")
                wait = float(ra) if ra and ra.isdigit() else None
            backoff = min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * (0.5 + random.random() / 2)
            self._sleep(max(backoff, wait or 0.0))
            attempt += 1

    # ---- boards
    def create_board(self, board_id: str, policy: str, **options) -> dict:
        return self._call("POST", "/v1/boards", json={"board_id": board_id, "policy": policy, **options})

    def list_boards(self) -> list[dict]:
        return self._call("GET", "/v1/boards")["boards"]

    def board(self, board_id: str) -> dict:
        return self._call("GET", f"/v1/boards/{_p(board_id)}")

    def set_state(self, board_id: str, state: str) -> dict:
        return self._call("POST", f"/v1/boards/{_p(board_id)}/state", json={"state": state})

    def join(self, board_id: str, player_id: str) -> dict:
        """POST .../players/{player_id}/join: ``{"player_id", "position"}`` (docs/api.md §16)."""
        return self._call("POST", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/join")

    # ---- events
    def submit(self, events: list[dict]) -> list[dict]:
        """POST /v1/events; retries resend the identical batch (same event ids)."""
        return self._call("POST", "/v1/events", json={"events": list(events)})["results"]

    # ---- reads
    def top(self, board_id: str, limit: int = 10, cursor: str | None = None, max_staleness_ms: int | None = None) -> dict:
        params: dict = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        if max_staleness_ms is not None:
            params["max_staleness_ms"] = max_staleness_ms
        return self._call("GET", f"/v1/boards/{_p(board_id)}/top", params=params)

    def iter_top(self, board_id: str, page_size: int = 100) -> Iterator[dict]:
        """Every entry, page by page, all from page 1's version (ViewExpired if it goes)."""
        return follow_pages(lambda cursor: self.top(board_id, page_size, cursor), "entries")

    def player(self, board_id: str, player_id: str, approximate: bool = False) -> dict:
        params = {"approximate": "true"} if approximate else None
        return self._call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}", params=params)

    def around(self, board_id: str, player_id: str, radius: int = 1) -> dict:
        return self._call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/around",
                          params={"radius": radius})

    def friends(self, board_id: str, player_id: str) -> dict:
        return self._call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/friends")

    def ranked_subset(self, board_id: str, player_ids: list[str]) -> dict:
        return self._call("POST", f"/v1/boards/{_p(board_id)}/ranked-subset", json={"player_ids": player_ids})

    def changes(self, board_id: str, since_version: int, limit: int | None = None, cursor: str | None = None) -> dict:
        """Deltas after ``since_version``, or one snapshot page (follow ``next_cursor``)."""
        params: dict = {"since_version": since_version}
        if limit is not None:
            params["limit"] = limit
        if cursor:
            params["cursor"] = cursor
        return self._call("GET", f"/v1/boards/{_p(board_id)}/changes", params=params)

    def reconcile(self, board_id: str, since_version: int, page_size: int | None = None) -> dict:
        """``changes`` with a snapshot's pages followed to the end: one answer
        whose ``entries`` are the whole board at ``version`` (ViewExpired if it goes)."""
        first = self.changes(board_id, since_version, page_size)
        if first["kind"] != "snapshot":
            return first
        entries, cursor = list(first["entries"]), first.get("next_cursor")
        while cursor:
            page = self.changes(board_id, since_version, page_size, cursor)
            entries.extend(page["entries"])
            cursor = page.get("next_cursor")
        return {**first, "entries": entries, "next_cursor": None}

    # ---- competitions (docs/api.md §16)
    def cohort(self, board_id: str, player_id: str | None = None, cohort: str | None = None,
               ties: bool = False) -> dict:
        """A league cohort, ``player_id``'s or the one named ``cohort`` (``"<tier>-<n>"``): its ranked
        members with local ranks and zones. Raises PlayerNotFound, CohortNotFound."""
        if (player_id is None) == (cohort is None):
            raise ValueError("give player_id or cohort, not both")
        path = (f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/cohort" if player_id is not None
                else f"/v1/boards/{_p(board_id)}/cohorts/{_p(cohort)}")  # type: ignore[arg-type]
        return self._call("GET", path, params={"ties": "competition"} if ties else None)

    def awards(self, board_id: str, limit: int = 100, cursor: str | None = None) -> dict:
        """One page of the board's awards (admin): ``{"awards", "next_cursor"}``."""
        params: dict = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self._call("GET", f"/v1/boards/{_p(board_id)}/awards", params=params)

    def iter_awards(self, board_id: str, page_size: int = 1000) -> Iterator[dict]:
        """Every award of the board, page by page, in award order."""
        return follow_pages(lambda cursor: self.awards(board_id, page_size, cursor), "awards")

    # ---- moderation and ops
    def quarantine(self, board_id: str) -> list[dict]:
        return self._call("GET", f"/v1/boards/{_p(board_id)}/quarantine")["events"]

    def decide(self, board_id: str, event_id: str, decision: str, reason: str = "", moderator: str | None = None) -> dict:
        return self._call("POST", f"/v1/boards/{_p(board_id)}/quarantine/{_p(event_id)}",
                          json={"decision": decision, "reason": reason, "moderator": moderator})

    def invalidate(self, board_id: str, event_id: str, reason: str = "", moderator: str | None = None) -> dict:
        return self._call("POST", f"/v1/boards/{_p(board_id)}/invalidations",
                          json={"event_id": event_id, "reason": reason, "moderator": moderator})

    def history(self, board_id: str, player_id: str) -> list[dict]:
        return self._call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/history")["events"]

    def checksum(self, board_id: str) -> dict:
        return self._call("GET", f"/v1/boards/{_p(board_id)}/checksum")

    def healthz(self) -> bool:
        return self._http.get("/healthz").status_code == 200

    def readyz(self) -> bool:
        return self._http.get("/readyz").status_code == 200
