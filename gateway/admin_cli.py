"""The operator's commands of ``flowrank``, over the HTTP API (issue 12 item 3).

``flowrank boards create|list|show|state|next-season``, ``flowrank submit FILE.jsonl``,
``flowrank top``, ``flowrank player``, ``flowrank cohort``, ``flowrank cohorts``, ``flowrank tier``,
``flowrank join``, ``flowrank awards``,
``flowrank players data``, ``flowrank cluster`` and ``flowrank export`` call a running
server at ``--url`` (or ``FLOWRANK_URL``) with ``--key`` (or ``FLOWRANK_KEY``).
They only use the public routes of docs/api.md, so any key that may call a
route may run its command.

* Errors are one line on stderr, ``flowrank: error: …``, and an exit code per
  kind (:data:`EXIT_CODES`), as ``flowrank serve`` reports its refusals.
* ``submit`` checks the whole file first and sends nothing if any line is not a
  valid event (the line number and field are named); then it reads it again
  and sends batches of at most 500 events in file order, each a body made of
  the file's own lines (memory: a few batches, whatever the file's size).
  A batch answered 429, 5xx or lost on the way is sent again, identical, so
  its event ids are the same and a retry can only add ``DUPLICATE_IGNORED``.
  The summary counts the outcomes of the answers, exactly.
* ``export`` streams ``GET /v1/boards/{id}/export`` to stdout or ``-o FILE``
  (written beside and renamed when complete: an interrupted export leaves no
  file that looks whole).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, Sequence
from urllib.parse import quote

from engine.core.errors import ValidationFailed
from engine.core.model import MAX_SUBSCORES, SUBSCORE_DIRECTIONS
from engine.core.timefmt import parse_timestamp
from engine.core.windows import AT_PATTERN, EVERY, MAX_KEEP, is_zone


if TYPE_CHECKING:
    import httpx

# Exit codes of the admin commands (README, "Admin CLI").
EXIT_OK = 0
EXIT_UNEXPECTED = 1   # a failure not foreseen below
EXIT_USAGE = 2        # bad command line, no --url/--key
EXIT_INPUT = 3        # submit: the file is unreadable or a line is not a valid event (nothing sent)
EXIT_REFUSED = 4      # the server answered an error (4xx, or 5xx after the retries)
EXIT_UNREACHABLE = 5  # no answer from the server after the retries
EXIT_PENDING = 6      # players erase --wait: the erasure was still pending when the wait ran out

EXIT_CODES = {
    EXIT_UNEXPECTED: "unexpected failure",
    EXIT_USAGE: "bad command line, or no server URL or key",
    EXIT_INPUT: "submit: the events file is unreadable or has an invalid line (nothing was sent)",
    EXIT_REFUSED: "the server refused the request (its error code is printed)",
    EXIT_UNREACHABLE: "the server could not be reached",
    EXIT_PENDING: "players erase --wait: the erasure was accepted but still pending when the wait ran out",
}

MAX_BATCH = 500
STATES = ("OPEN", "FROZEN", "FINALIZED", "ARCHIVED")
POLICIES = ("best_score", "cumulative", "fastest_time", "latest")


class CliError(Exception):
    """One line for the operator and the exit code of its kind."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def _p(s: str) -> str:
    return quote(s, safe=":")


def _refusal(resp: httpx.Response, what: str) -> CliError:
    try:
        err = resp.json()["error"]
        code, message, fld = err["code"], err.get("message", ""), err.get("field")
    except (ValueError, KeyError, TypeError):
        code, message, fld = "", resp.text[:200].strip(), None
    detail = f"{code}: {message}" if code else message
    if fld:
        detail += f" (field {fld})"
    return CliError(f"{what}: HTTP {resp.status_code} {detail}".rstrip(), EXIT_REFUSED)


class Api:
    """httpx with the CLI's retry rule: connection errors, 429 and 5xx are
    retried (``Retry-After`` honoured, else exponential backoff from 0.1 s to
    5 s) when the call is safe to repeat: a GET (``READ_RETRIES`` times) and an
    event batch (``retries`` times: same body, same ids)."""

    READ_RETRIES = 2

    def __init__(self, url: str, key: str, *, timeout: float = 30.0, retries: int = 8, backoff_s: float = 0.1,
                 max_backoff_s: float = 5.0, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        import httpx  # noqa: PLC0415 - `flowrank serve` parses these commands' flags too: it must not wait on httpx

        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                 headers={"Authorization": f"Bearer {key}"})
        self.retries, self.backoff_s, self.max_backoff_s, self.sleep = retries, backoff_s, max_backoff_s, sleep
        self.retried = 0  # requests sent again, over this client's life
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, what: str, retries: int, **kw) -> httpx.Response:
        import httpx  # noqa: PLC0415

        attempt = 0
        while True:
            try:
                resp = self.http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt >= retries:
                    raise CliError(f"{what}: cannot reach {self.url} ({type(exc).__name__}: {exc})",
                                   EXIT_UNREACHABLE) from None
                wait = 0.0
            else:
                if resp.status_code < 400:
                    return resp
                if not (resp.status_code == 429 or resp.status_code >= 500) or attempt >= retries:
                    raise _refusal(resp, what)
                ra = resp.headers.get("Retry-After", "")
                wait = float(ra) if ra.isdigit() else 0.0
            self.sleep(max(wait, min(self.max_backoff_s, self.backoff_s * 2 ** attempt)))
            attempt += 1
            with self._lock:
                self.retried += 1

    def json(self, method: str, path: str, *, what: str, **kw) -> Any:
        """A call's JSON answer; only a GET is retried (a repeated board creation
        or state change would answer 409 for what the first one did)."""
        return self.call(method, path, what=what, retries=self.READ_RETRIES if method == "GET" else 0, **kw).json()


# ------------------------------------------------------------------ output


def _table(rows: list[dict], columns: Sequence[str], out: IO[str]) -> None:
    cells = [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)


def _dump(obj: Any, out: IO[str]) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False), file=out)


# ----------------------------------------------------------------- boards


def cmd_boards_create(api: Api, args, out: IO[str]) -> int:
    body: dict = {"board_id": args.board, "policy": args.policy}
    for key in ("shards", "max_plausible_time_ms", "review_above", "closes_at", "finalize_after_s", "subscores"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    window = {key: getattr(args, key) for key in ("timezone", "at", "keep") if getattr(args, key) is not None}
    if args.recurrence is not None:  # a series of time windows (docs/api.md §15); the server fills the defaults
        body["recurrence"] = {"every": args.recurrence, **window}
    elif window:
        raise CliError(f"--{'/--'.join(window)} describe the windows of a recurring board: add --recurrence "
                       f"{'|'.join(EVERY)}", EXIT_USAGE)
    if args.join_required or args.max_players is not None or args.max_attempts is not None:  # docs/api.md §16
        body["entry"] = {"join_required": args.join_required, "max_players": args.max_players,
                         "max_attempts": args.max_attempts}
    if args.league is not None:  # docs/api.md §16; the server names a bad setting (league.promote, …)
        body["league"] = args.league
    if args.prizes is not None:
        body["prizes"] = args.prizes
    _dump(api.json("POST", "/v1/boards", json=body, what=f"create {args.board}"), out)
    return EXIT_OK


def cmd_boards_next_season(api: Api, args, out: IO[str]) -> int:
    body: dict = {"season": args.season}
    for key in ("closes_at", "finalize_after_s"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    _dump(api.json("POST", f"/v1/boards/{_p(args.board)}/next-season", json=body,
                   what=f"next season {args.season} of {args.board}"), out)
    return EXIT_OK


def cmd_boards_list(api: Api, args, out: IO[str]) -> int:
    boards = api.json("GET", "/v1/boards", what="list boards")["boards"]
    if args.json:
        _dump(boards, out)
    else:
        _table(boards, ("board_id", "policy", "state", "version", "size", "shards"), out)
    return EXIT_OK


def cmd_boards_show(api: Api, args, out: IO[str]) -> int:
    _dump(api.json("GET", f"/v1/boards/{_p(args.board)}", what=f"board {args.board}"), out)
    return EXIT_OK


def cmd_boards_instances(api: Api, args, out: IO[str]) -> int:
    """A series' instances, latest window first (docs/api.md §15)."""
    items = api.json("GET", f"/v1/boards/{_p(args.board)}/instances", what=f"instances of {args.board}")["instances"]
    if args.json:
        _dump(items, out)
    else:
        _table(items, ("board_id", "starts_at", "ends_at", "state", "size"), out)
    return EXIT_OK


def cmd_boards_state(api: Api, args, out: IO[str]) -> int:
    _dump(api.json("POST", f"/v1/boards/{_p(args.board)}/state", json={"state": args.state},
                   what=f"move {args.board} to {args.state}"), out)
    return EXIT_OK


# ------------------------------------------------------------------ reads


def cmd_top(api: Api, args, out: IO[str]) -> int:
    page = api.json("GET", f"/v1/boards/{_p(args.board)}/top", params={"limit": args.limit}, what=f"top of {args.board}")
    if args.json:
        _dump(page, out)
    else:
        print(f"{args.board} at version {page['version']}", file=out)
        _table(page["entries"], ("rank", "player_id", "value", "achieved_at"), out)
    return EXIT_OK


def cmd_player(api: Api, args, out: IO[str]) -> int:
    view = api.json("GET", f"/v1/boards/{_p(args.board)}/players/{_p(args.player)}",
                    what=f"player {args.player} on {args.board}")
    if args.json:
        _dump(view, out)
    else:
        for key in ("player_id", "rank", "value", "achieved_at", "status", "version"):
            print(f"{key:<12} {view.get(key) if view.get(key) is not None else '-'}", file=out)
    return EXIT_OK


def cmd_cohort(api: Api, args, out: IO[str]) -> int:
    """A league cohort (docs/api.md §16), a player's or one named by id: local ranks and zones."""
    params = {"ties": "competition"} if args.ties else None
    if args.player is not None:
        path, what = f"/players/{_p(args.player)}/cohort", f"cohort of {args.player} on {args.board}"
    else:
        path, what = f"/cohorts/{_p(args.cohort)}", f"cohort {args.cohort} of {args.board}"
    view = api.json("GET", f"/v1/boards/{_p(args.board)}{path}", params=params, what=what)
    if args.json:
        _dump(view, out)
    else:
        print(f"{args.board} cohort {view['cohort']} (tier {view['tier']}, {view['members']} members) "
              f"at version {view['version']}", file=out)
        columns = ("rank",) + (("tied_rank",) if args.ties else ()) + ("player_id", "value", "achieved_at", "zone")
        _table(view["entries"], columns, out)
    return EXIT_OK


def cmd_cohorts(api: Api, args, out: IO[str]) -> int:
    """Every cohort of a league (docs/api.md §18), all pages: id, tier, members; ``--tier N`` only that tier."""
    path = f"/v1/boards/{_p(args.board)}/cohorts"

    def page(cursor: str | None) -> dict:
        params = {"limit": args.page_size, **({"tier": args.tier} if args.tier is not None else {}),
                  **({"cursor": cursor} if cursor else {})}
        return api.json("GET", path, params=params, what=f"cohorts of {args.board}")

    from gateway.client import follow_pages  # noqa: PLC0415

    cohorts = list(follow_pages(page, "cohorts"))
    if args.json:
        _dump(cohorts, out)
    else:
        _table(cohorts, ("cohort", "tier", "members"), out)
        print(f"{len(cohorts):,} cohorts, {sum(c['members'] for c in cohorts):,} players", file=out)
    return EXIT_OK


def cmd_tier(api: Api, args, out: IO[str]) -> int:
    """A player's tier on a league (docs/api.md §18): the one they have, or would enter at."""
    got = api.json("GET", f"/v1/boards/{_p(args.board)}/players/{_p(args.player)}/tier",
                   what=f"tier of {args.player} on {args.board}")
    if args.json:
        _dump(got, out)
    else:
        how = "entered" if got["entered"] else "not entered yet: would enter at"
        print(f"{got['player_id']} on {got['board_id']}: {how} tier {got['tier']}", file=out)
    return EXIT_OK


#: Players per bulk join request (docs/api.md §18: at most 1,000).
JOIN_CHUNK = 1000


def read_player_ids(path: str) -> list[str]:
    """One player id per line (blank lines skipped, surrounding spaces trimmed), each once, in file order.
    Raises CliError (EXIT_INPUT) naming the first bad line or a repeated id: nothing is sent then."""
    from gateway.validation import check_id  # noqa: PLC0415

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read the ids file ({exc}); nothing was sent", EXIT_INPUT) from None
    ids: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        pid = line.strip()
        if not pid:
            continue
        try:
            check_id(pid, "player_id", "player_id")
        except ValidationFailed as exc:
            raise CliError(f"{path}:{number}: invalid player id: {exc.message} Nothing was sent.", EXIT_INPUT) from None
        if pid in seen:
            raise CliError(f"{path}:{number}: {pid!r} is already on line {seen[pid]}; nothing was sent", EXIT_INPUT)
        seen[pid] = number
        ids.append(pid)
    return ids


def cmd_join(api: Api, args, out: IO[str]) -> int:
    """Join every player of a file (docs/api.md §18), through the bulk route in requests of at most 1,000 ids;
    prints how many joined now (201), had joined (200) and were refused (409, by error code)."""
    ids = read_player_ids(args.file)
    counts: Counter = Counter()
    board_id = args.board
    for start in range(0, len(ids), args.chunk):
        chunk = ids[start:start + args.chunk]
        got = api.json("POST", f"/v1/boards/{_p(args.board)}/joins", json={"player_ids": chunk},
                       what=f"join of lines' ids {start + 1}-{start + len(chunk)} (of {len(ids)})")
        board_id = got["board_id"]
        for r in got["results"]:
            counts["joined" if r["status"] == 201 else "already joined" if r["status"] == 200
                   else f"refused {r['error']['code']}"] += 1
    summary = {"board_id": board_id, "players": len(ids), **dict(sorted(counts.items()))}
    if args.json:
        _dump(summary, out)
    else:
        print(f"{len(ids):,} players sent to {board_id} in {-(-len(ids) // args.chunk):,} requests", file=out)
        width = max((len(k) for k in counts), default=0)
        for k, v in sorted(counts.items()):
            print(f"  {k:<{width}}  {v:>10,}", file=out)
    return EXIT_OK


def cmd_awards(api: Api, args, out: IO[str]) -> int:
    """Every award of a board (docs/api.md §16, admin), all pages, in award order."""
    path = f"/v1/boards/{_p(args.board)}/awards"

    def page(cursor: str | None) -> dict:
        params = {"limit": args.page_size, **({"cursor": cursor} if cursor else {})}
        return api.json("GET", path, params=params, what=f"awards of {args.board}")

    from gateway.client import follow_pages  # noqa: PLC0415

    awards = list(follow_pages(page, "awards"))
    if args.json:
        _dump(awards, out)
    else:
        rows = [{**a, "reward": json.dumps(a["reward"], ensure_ascii=False, separators=(",", ":"))} for a in awards]
        _table(rows, ("cohort", "rank", "player_id", "reward", "delivery", "attempts"), out)
        print(f"{len(awards):,} awards", file=out)
    return EXIT_OK


def cmd_players_data(api: Api, args, out: IO[str]) -> int:
    """Everything FlowRank holds about a player (docs/api.md §17, admin): JSON, or a line per board."""
    data = api.json("GET", f"/v1/players/{_p(args.player)}/data", what=f"data of player {args.player}")
    if args.json:
        _dump(data, out)
        return EXIT_OK
    rows = [{"board_id": b["board_id"], "rank": "-" if b["row"] is None else b["row"].get("rank") or "-",
             "value": "-" if b["row"] is None else b["row"].get("value"), "events": len(b["history"]),
             "held": len(b["held"]), "awards": len(b["awards"]), "cohort": b.get("cohort") or "-"}
            for b in data["boards"]]
    _table(rows, ("board_id", "rank", "value", "events", "held", "awards", "cohort"), out)
    return EXIT_OK


def cmd_players_erase(api: Api, args, out: IO[str]) -> int:
    """Erase a player from every board (docs/api.md §17, admin); with --wait, until it is complete on disk."""
    got = api.json("DELETE", f"/v1/players/{_p(args.player)}", what=f"erasure of player {args.player}")
    if not args.wait:
        if args.json:
            _dump(got, out)
        else:
            print(f"erasure {got['erasure_id']} of {got['player_id']} accepted on {len(got['boards'])} board(s): "
                  f"{', '.join(got['boards'])}", file=out)
        return EXIT_OK
    deadline = time.monotonic() + args.wait
    while True:
        status = api.json("GET", f"/v1/erasures/{_p(got['erasure_id'])}", what=f"erasure {got['erasure_id']}")
        if status["status"] == "complete" or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    _print_erasure(got | status, args.json, out)
    return EXIT_OK if status["status"] == "complete" else EXIT_PENDING


def cmd_erasure(api: Api, args, out: IO[str]) -> int:
    """An erasure's status (docs/api.md §17, admin)."""
    _print_erasure(api.json("GET", f"/v1/erasures/{_p(args.erasure_id)}", what=f"erasure {args.erasure_id}"),
                   args.json, out)
    return EXIT_OK


def _print_erasure(status: dict, as_json: bool, out: IO[str]) -> None:
    if as_json:
        _dump(status, out)
    else:
        print(f"{status['erasure_id']}  {status['status']}  requested {status['requested_at']}  "
              f"completed {status['completed_at'] or '-'}", file=out)


# ----------------------------------------------------------------- cluster

CLUSTER_FIELDS = ("role", "node", "epoch", "leader", "log_end", "applied", "lag_records", "lag_s", "takeovers")


def cmd_cluster(api: Api, args, out: IO[str]) -> int:
    """This node's role on its log, epoch, leader and lag (docs/api.md §19, ``GET /v1/cluster``, admin):
    one ``field  value`` line each, or the answer as JSON."""
    info = api.json("GET", "/v1/cluster", what="cluster")
    if args.json:
        _dump(info, out)
        return EXIT_OK
    fields = list(CLUSTER_FIELDS) + sorted(k for k in info if k not in CLUSTER_FIELDS)
    width = max(len(f) for f in fields)
    for f in fields:
        v = info.get(f)
        text = "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
        print(f"{f:<{width}}  {text}", file=out)
    return EXIT_OK


# ----------------------------------------------------------------- submit


@dataclass
class SubmitSummary:
    events: int = 0
    batches: int = 0
    retried: int = 0
    outcomes: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        rate = self.events / self.seconds if self.seconds > 0 else 0.0
        head = (f"submitted {self.events:,} events in {self.batches:,} batches "
                f"({self.retried:,} requests retried) in {self.seconds:.1f} s ({rate:,.0f} events/s)")
        width = max((len(k) for k in self.outcomes), default=0)
        return [head] + [f"  {k:<{width}}  {v:>12,}" for k, v in sorted(self.outcomes.items())]

    def to_json(self) -> dict:
        return {"events": self.events, "batches": self.batches, "retried": self.retried,
                "seconds": round(self.seconds, 3), "outcomes": dict(sorted(self.outcomes.items()))}


def _event_lines(fh: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(fh, 1):
        raw = raw.strip()
        if raw:  # blank lines are skipped
            yield number, raw


def _stamp(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def check_events(path: str) -> tuple[int, tuple[int, int]]:
    """Check every event line of a JSON Lines file by the server's own rules
    (gateway.validation), keeping none of them: O(1) memory. Returns the number
    of events and the file's (size, mtime) when checked. Raises CliError
    (EXIT_INPUT) naming the first bad line."""
    from gateway.validation import event_from_json, fanout_boards  # noqa: PLC0415 - numba's import: not for `flowrank serve`

    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise CliError(f"{path}: cannot read the events file ({exc.strerror or exc})", EXIT_INPUT) from None
    n = 0
    with fh:
        stamp = _stamp(os.fstat(fh.fileno()))
        for number, raw in _event_lines(fh):
            where = f"{path}:{number}"
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise CliError(f"{where}: not a JSON object ({exc}); nothing was sent", EXIT_INPUT) from None
            try:
                boards = fanout_boards(obj, "event") if isinstance(obj, dict) else None
                event_from_json(obj if boards is None else {**obj, "board_id": boards[0]}, "event")
            except ValidationFailed as exc:
                fld = f" ({exc.field})" if exc.field else ""
                raise CliError(f"{where}: invalid event{fld}: {exc.message} Nothing was sent.", EXIT_INPUT) from None
            n += 1
    return n, stamp


def _batches(path: str, batch_size: int, stamp: tuple[int, int]) -> Iterator[list[tuple[int, bytes]]]:
    """The checked file again, ``batch_size`` lines at a time; refuses (before
    anything is sent) if the file changed since :func:`check_events`."""
    with open(path, "rb") as fh:
        if _stamp(os.fstat(fh.fileno())) != stamp:
            raise CliError(f"{path}: the file changed after it was checked; nothing was sent", EXIT_INPUT)
        chunk: list[tuple[int, bytes]] = []
        for item in _event_lines(fh):
            chunk.append(item)
            if len(chunk) == batch_size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


class Progress:
    """A one-line bar on stderr, redrawn at most every 0.2 s."""

    def __init__(self, total: int, stream: IO[str], enabled: bool, clock: Callable[[], float] = time.monotonic):
        self.total, self.stream, self.enabled, self.clock = total, stream, enabled, clock
        self.start = clock()
        self.drawn = 0.0

    def update(self, done: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not final and now - self.drawn < 0.2:
            return
        self.drawn = now
        frac = done / self.total if self.total else 1.0
        bar = "#" * int(frac * 30)
        rate = done / (now - self.start) if now > self.start else 0.0
        self.stream.write(f"\r[{bar:<30}] {frac:6.1%} {done:,}/{self.total:,} events {rate:,.0f}/s")
        if final:
            self.stream.write("\n")
        self.stream.flush()


def submit_file(api: Api, path: str, batch_size: int = MAX_BATCH, progress: IO[str] | None = None,
                clock: Callable[[], float] = time.monotonic, concurrency: int = 1) -> SubmitSummary:
    """Validate all of ``path``, then send it in batches of ``batch_size``, at most
    ``concurrency`` requests in flight (1: one after the other, in file order);
    the summary counts every answer's outcomes. A bar is drawn on ``progress``
    when given. Raises CliError: nothing was sent when the file is bad;
    otherwise the message names the batch refused and which lines were sent
    and answered.

    With ``concurrency`` > 1 the server may apply batches in another order than
    the file's, so an outcome can differ (an improvement arriving before the
    score it improves on is a first score, the other one a non-improvement);
    the board ends the same whatever the order (docs/api.md §6-7)."""
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    total, stamp = check_events(path)
    summary = SubmitSummary()
    t0 = clock()
    bar = Progress(total, progress or sys.stderr, progress is not None, clock)
    retried_before = api.retried
    chunks = _batches(path, batch_size, stamp)  # read lazily: at most `concurrency` batches held

    def send(chunk: list[tuple[int, bytes]]) -> list:
        body = b'{"events":[' + b",".join(raw for _, raw in chunk) + b"]}"
        first, last = chunk[0][0], chunk[-1][0]
        try:
            resp = api.call("POST", "/v1/events", content=body, headers={"content-type": "application/json"},
                            what=f"batch of lines {first}-{last}", retries=api.retries)
        except CliError as err:
            err.message += _line_of(err.message, chunk)
            raise
        try:
            results = resp.json()["results"]
        except (ValueError, KeyError, TypeError):
            raise CliError(f"batch of lines {first}-{last}: HTTP {resp.status_code} with a body that is not "
                           "the documented results", EXIT_UNEXPECTED) from None
        rows = sum(_boards_of_line(raw) for _, raw in chunk)
        if len(results) != rows:
            raise CliError(f"batch of lines {first}-{last}: {len(results)} results for {rows} (event, board) pairs",
                           EXIT_UNEXPECTED)
        return results

    def count(chunk, results) -> None:
        summary.outcomes.update(r["outcome"] for r in results)
        summary.events += len(chunk)
        summary.batches += 1
        bar.update(summary.events)

    pending: deque[tuple[list, Future]] = deque()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for chunk in chunks:
            pending.append((chunk, pool.submit(send, chunk)))
            while len(pending) >= max(1, concurrency) or (pending and pending[0][1].done()):
                chunk0, fut = pending.popleft()
                try:
                    count(chunk0, fut.result())
                except CliError as err:
                    raise _gave_up(err, chunk0, summary, pending) from None
        while pending:
            chunk0, fut = pending.popleft()
            try:
                count(chunk0, fut.result())
            except CliError as err:
                raise _gave_up(err, chunk0, summary, pending) from None
    bar.update(summary.events, final=True)
    summary.retried = api.retried - retried_before
    summary.seconds = clock() - t0
    return summary


def _gave_up(err: CliError, chunk: list, summary: SubmitSummary, pending) -> CliError:
    """The error of the first batch (in file order) that failed, saying what was
    sent and answered: every line before it, and any later batch in flight
    that was answered (their outcomes are not in a summary)."""
    before = (f"lines before {chunk[0][0]} were sent and answered ({summary.events:,} events)"
              if summary.events else "nothing before it was sent")
    later = []
    while pending:
        c, fut = pending.popleft()
        try:
            fut.result()
            later.append(f"{c[0][0]}-{c[-1][0]}")
        except CliError:
            pass
    note = f"; {before}" + (f"; lines {', '.join(later)} were sent and answered too" if later else "")
    if err.exit_code == EXIT_UNREACHABLE:
        note += ("; that batch may have been applied without its answer arriving: sending the file again is "
                 "safe (the same event ids answer DUPLICATE_IGNORED)")
    err.message += note
    return err


def _boards_of_line(raw: bytes) -> int:
    """How many results a checked event line gets: one per board of its ``board_ids`` (docs/api.md §15), else 1."""
    if b'"board_ids"' not in raw:
        return 1
    obj = json.loads(raw)
    return len(obj["board_ids"]) if "board_ids" in obj else 1


def _line_of(message: str, chunk: list[tuple[int, bytes]]) -> str:
    """``events[3].value`` in a refusal → the file line of that event."""
    m = re.search(r"events\[(\d+)\]", message)
    if m and int(m.group(1)) < len(chunk):
        return f" (file line {chunk[int(m.group(1))][0]})"
    return ""


def cmd_submit(api: Api, args, out: IO[str]) -> int:
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    summary = submit_file(api, args.file, args.batch_size, sys.stderr if show else None,
                          concurrency=args.concurrency)
    if args.json:
        _dump(summary.to_json(), out)
    else:
        for line in summary.lines():
            print(line, file=out)
    return EXIT_OK


# ----------------------------------------------------------------- export


def export_board(api: Api, board: str, fmt: str, out: IO[bytes], ties: bool = False) -> tuple[int, int]:
    """Stream the export into ``out``; returns (rows, version)."""
    import httpx  # noqa: PLC0415

    what = f"export of {board}"
    params = {"format": fmt, **({"ties": "competition"} if ties else {})}
    try:
        with api.http.stream("GET", f"/v1/boards/{_p(board)}/export", params=params) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise _refusal(resp, what)
            version = int(resp.headers.get("X-Board-Version", "-1"))
            newlines = 0
            for chunk in resp.iter_bytes():
                out.write(chunk)
                newlines += chunk.count(b"\n")
    except httpx.TransportError as exc:
        raise CliError(f"{what}: the transfer failed ({type(exc).__name__}: {exc}); the output is incomplete",
                       EXIT_UNREACHABLE) from None
    return newlines - (1 if fmt == "csv" else 0), version


class _TextSink:
    """Bytes into a text stream that has no ``buffer`` (tests' StringIO)."""

    def __init__(self, out: IO[str]):
        import codecs

        self.out = out
        self.decoder = codecs.getincrementaldecoder("utf-8")()  # a chunk may end inside a character

    def write(self, data: bytes) -> int:
        return self.out.write(self.decoder.decode(data))

    def flush(self) -> None:
        self.out.flush()


def cmd_export(api: Api, args, out: IO[str]) -> int:
    if args.output in (None, "-"):
        sink = getattr(out, "buffer", None) or _TextSink(out)
        rows, version = export_board(api, args.board, args.format, sink, args.ties)
        sink.flush()
    else:
        tmp = f"{args.output}.partial"
        try:
            with open(tmp, "wb") as fh:
                rows, version = export_board(api, args.board, args.format, fh, args.ties)
            os.replace(tmp, args.output)
        except OSError as exc:
            raise CliError(f"-o {args.output}: cannot write ({exc.strerror or exc})", EXIT_UNEXPECTED) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    print(f"flowrank: exported {rows:,} rows of {args.board} at version {version}"
          + ("" if args.output in (None, "-") else f" to {args.output}"), file=sys.stderr)
    return EXIT_OK


# ----------------------------------------------------------------- parser


def _int_at_least(text: str, minimum: int, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < minimum:
        raise argparse.ArgumentTypeError(what)
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (also the serve flags' type, gateway.cli)."""
    return _int_at_least(text, 1, "must be a positive integer")


def _join_chunk(text: str) -> int:
    """argparse type of ``join --chunk``: 1 to 1,000 ids per request."""
    n = positive_int(text)
    if n > JOIN_CHUNK:
        raise argparse.ArgumentTypeError(f"must be at most {JOIN_CHUNK} (the bulk join's limit)")
    return n


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (gateway.cli: --rank-mirror-rows)."""
    return _int_at_least(text, 0, "must be 0 or more")


def _non_negative(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError("must be an integer >= 0")
    return v


def _timestamp(text: str) -> int | str:
    """argparse type: epoch ms (sent as an integer) or an RFC 3339 string with a zone (sent as is)."""
    raw: int | str = int(text) if re.fullmatch(r"-?[0-9]+", text) else text
    try:
        parse_timestamp(raw)
    except ValidationFailed as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return raw


def _timezone(text: str) -> str:
    if not is_zone(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an IANA time zone name (such as Europe/Berlin)")
    return text


def _at(text: str) -> str:
    if re.fullmatch(AT_PATTERN, text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a local time HH:MM (00:00 to 23:59)")
    return text


def _keep(text: str) -> int:
    v = positive_int(text)
    if v > MAX_KEEP:
        raise argparse.ArgumentTypeError(f"at most {MAX_KEEP} instances")
    return v


def _batch(text: str) -> int:
    v = positive_int(text)
    if v > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"at most {MAX_BATCH} events per batch")
    return v


def _directions(text: str) -> list[str]:
    """``desc,asc`` -> ["desc", "asc"]; an empty text is no subscores."""
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    for t in items:
        if t not in SUBSCORE_DIRECTIONS:
            raise argparse.ArgumentTypeError(f"{t!r} is not a direction: use desc or asc, comma-separated")
    if len(items) > MAX_SUBSCORES:
        raise argparse.ArgumentTypeError(f"at most {MAX_SUBSCORES} subscores")
    return items


def _league(text: str) -> dict:
    """``cohort_size[:tiers[:promote[:demote]]]`` → the league settings (docs/api.md §16); the server
    fills what is left out and checks the ranges."""
    names = ("cohort_size", "tiers", "promote", "demote")
    parts = text.split(":")
    if not 1 <= len(parts) <= len(names) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not cohort_size:tiers:promote:demote (e.g. 50:5:10:10)")
    return {name: int(p) for name, p in zip(names, parts)}


def _prizes(path: str) -> list:
    """A JSON file holding the prizes list (docs/api.md §16): ``[{"ranks": [1, 1], "reward": {…}}, …]``."""
    try:
        with open(path, encoding="utf-8") as fh:
            prizes = json.load(fh)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not JSON ({exc})") from None
    if not isinstance(prizes, list):
        raise argparse.ArgumentTypeError(f'{path} must hold a JSON list of {{"ranks": [from, to], "reward": {{…}}}}')
    return prizes


def _int64(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def register(sub) -> None:
    """Add the admin subcommands to ``flowrank``'s subparsers (gateway.cli)."""
    conn = argparse.ArgumentParser(add_help=False)
    g = conn.add_argument_group("server")
    g.add_argument("--url", default=None, help="the server (default: $FLOWRANK_URL)")
    g.add_argument("--key", default=None, help="an API key (default: $FLOWRANK_KEY)")
    g.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")

    boards = sub.add_parser("boards", help="create, list, show boards, change their state, open the next season")
    bsub = boards.add_subparsers(dest="boards_command", required=True)
    c = bsub.add_parser("create", parents=[conn], help="create a board (admin)")
    c.add_argument("board")
    c.add_argument("--policy", required=True, choices=POLICIES)
    c.add_argument("--shards", type=positive_int, default=None)
    c.add_argument("--max-plausible-time-ms", type=positive_int, default=None)
    c.add_argument("--review-above", type=_int64, default=None)
    c.add_argument("--closes-at", type=_timestamp, default=None,
                   help="scheduled close: RFC 3339 with a zone, or epoch ms (the board freezes then)")
    c.add_argument("--finalize-after-s", type=_non_negative, default=None,
                   help="seconds from --closes-at to FINALIZED (server default 3600)")
    c.add_argument("--subscores", type=_directions, default=None,
                   help="subscores' directions, compared after the value: e.g. desc,asc (at most 3; "
                        "best_score, fastest_time and latest boards)")
    w = c.add_argument_group("recurring board (a series of time windows, one board per window)")
    w.add_argument("--recurrence", "--every", dest="recurrence", choices=EVERY, default=None,
                   help="windows start every day, every Monday or on the 1st of every month; with --league, "
                        "--prizes or the entry options every window's instance has them, and tiers carry from "
                        "one window to the next (docs/api.md §18)")
    w.add_argument("--timezone", type=_timezone, default=None, help="IANA time zone of --at (server default UTC)")
    w.add_argument("--at", type=_at, default=None, help="local start time HH:MM (server default 00:00)")
    w.add_argument("--keep", type=_keep, default=None,
                   help=f"instances kept unarchived, 1-{MAX_KEEP} (server default 30)")
    e = c.add_argument_group("competition entry (docs/api.md §16)")
    e.add_argument("--join-required", action="store_true",
                   help="only players who joined may submit (POST .../players/ID/join)")
    e.add_argument("--max-players", type=positive_int, default=None,
                   help="at most this many players join (or, without --join-required, get a row)")
    e.add_argument("--max-attempts", type=positive_int, default=None,
                   help="a player's admitted score events beyond this many are rejected")
    lg = c.add_argument_group("league and prizes (docs/api.md §16)")
    lg.add_argument("--league", type=_league, default=None, metavar="S[:T[:P[:D]]]",
                    help="cohorts of at most S players in T tiers (default 1); the top P of a cohort promote and "
                         "the last D demote at next-season, or at each window's end on a series (default 0), "
                         "e.g. 50:5:10:10")
    lg.add_argument("--prizes", type=_prizes, default=None, metavar="FILE",
                    help='a JSON file with the prizes list, [{"ranks": [1, 1], "reward": {...}}, ...]: awarded '
                         "when the board becomes FINALIZED (ranks local to each cohort on a league)")
    c.set_defaults(admin=cmd_boards_create)
    c = bsub.add_parser("next-season", parents=[conn],
                        help="create game:mode:SEASON:scope with the board's settings (admin)")
    c.add_argument("board")
    c.add_argument("season")
    c.add_argument("--closes-at", type=_timestamp, default=None, help="the new season's scheduled close")
    c.add_argument("--finalize-after-s", type=_non_negative, default=None,
                   help="default: the board's own")
    c.set_defaults(admin=cmd_boards_next_season)
    c = bsub.add_parser("list", parents=[conn], help="list the boards")
    c.add_argument("--json", action="store_true", help="print the JSON answer")
    c.set_defaults(admin=cmd_boards_list)
    c = bsub.add_parser("show", parents=[conn], help="one board (JSON)")
    c.add_argument("board")
    c.set_defaults(admin=cmd_boards_show)
    c = bsub.add_parser("instances", parents=[conn],
                        help="a recurring board's instances, one per window, latest first (docs/api.md §15)")
    c.add_argument("board", help="the series' board id")
    c.add_argument("--json", action="store_true", help="print the JSON answer")
    c.set_defaults(admin=cmd_boards_instances)
    c = bsub.add_parser("state", parents=[conn], help="move a board forward: FROZEN, FINALIZED, ARCHIVED (admin)")
    c.add_argument("board")
    c.add_argument("state", type=str.upper, choices=STATES)
    c.set_defaults(admin=cmd_boards_state)

    c = sub.add_parser("submit", parents=[conn], help="send a JSON Lines file of score events")
    c.add_argument("file", help="one docs/api.md §7 event object per line")
    c.add_argument("--batch-size", type=_batch, default=MAX_BATCH, help=f"events per request (1-{MAX_BATCH})")
    c.add_argument("--retries", type=int, default=8, help="times a batch is sent again on 429/5xx/no answer")
    c.add_argument("--concurrency", type=positive_int, default=1,
                   help="batches in flight (default 1: one after the other, in file order)")
    c.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.set_defaults(admin=cmd_submit)

    c = sub.add_parser("top", parents=[conn], help="the top of a board")
    c.add_argument("board")
    c.add_argument("--limit", type=positive_int, default=10, help="entries (1-1000, default 10)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(admin=cmd_top)

    c = sub.add_parser("player", parents=[conn], help="one player's rank and row")
    c.add_argument("board")
    c.add_argument("player")
    c.add_argument("--json", action="store_true")
    c.set_defaults(admin=cmd_player)

    c = sub.add_parser("cohort", parents=[conn], help="a league cohort: local ranks and zones (docs/api.md §16)")
    c.add_argument("board")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--player", default=None, help="the cohort this player was placed in")
    which.add_argument("--cohort", default=None, help="a cohort id, <tier>-<n> (e.g. 1-3)")
    c.add_argument("--ties", action="store_true", help="add tied_rank, the competition rank (1, 1, 3)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(admin=cmd_cohort)

    c = sub.add_parser("cohorts", parents=[conn], help="every cohort of a league: id, tier, members (docs/api.md §18)")
    c.add_argument("board", help="a league board, or a series (its current instance)")
    c.add_argument("--tier", type=positive_int, default=None, help="only this tier's cohorts")
    c.add_argument("--page-size", type=positive_int, default=1000, help="cohorts per request (1-1000, default 1000)")
    c.add_argument("--json", action="store_true", help="print the cohorts as a JSON list")
    c.set_defaults(admin=cmd_cohorts)

    c = sub.add_parser("tier", parents=[conn], help="a player's tier on a league: the one they have, or would "
                                                    "enter at (docs/api.md §18)")
    c.add_argument("board", help="a league board, or a series (its current instance)")
    c.add_argument("player")
    c.add_argument("--json", action="store_true")
    c.set_defaults(admin=cmd_tier)

    c = sub.add_parser("join", parents=[conn], help="join the players of a file to a competition, 1,000 per "
                                                    "request (game_server, admin; docs/api.md §18)")
    c.add_argument("board", help="a board, or a series (joins its current instance)")
    c.add_argument("--file", required=True, help="player ids, one per line (blank lines skipped; a repeated id "
                                                 "or a bad one is refused before anything is sent)")
    c.add_argument("--chunk", type=_join_chunk, default=JOIN_CHUNK, help="ids per request (1-1000, default 1000)")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.set_defaults(admin=cmd_join)

    c = sub.add_parser("awards", parents=[conn], help="every award of a FINALIZED board with prizes (admin)")
    c.add_argument("board")
    c.add_argument("--page-size", type=positive_int, default=1000, help="awards per request (1-1000, default 1000)")
    c.add_argument("--json", action="store_true", help="print the awards as a JSON list")
    c.set_defaults(admin=cmd_awards)

    c = sub.add_parser("players", help="a player's data across boards (docs/api.md §17)")
    psub = c.add_subparsers(dest="players_command", required=True)
    c = psub.add_parser("data", parents=[conn], help="everything held about a player: rows, history, held "
                                                     "events, awards (admin)")
    c.add_argument("player")
    c.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    c.set_defaults(admin=cmd_players_data)
    c = psub.add_parser("erase", parents=[conn], help="erase a player from every board; their ids leave the data "
                                                      "directory within --erasure-deadline-s (admin)")
    c.add_argument("player")
    c.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                   help="then wait up to this long until the erasure is complete on disk (exit 6 if not)")
    c.add_argument("--json", action="store_true", help="print the answer as JSON")
    c.set_defaults(admin=cmd_players_erase)

    c = sub.add_parser("erasure", parents=[conn], help="an erasure's status: pending or complete (admin)")
    c.add_argument("erasure_id")
    c.add_argument("--json", action="store_true", help="print the answer as JSON")
    c.set_defaults(admin=cmd_erasure)

    c = sub.add_parser("cluster", parents=[conn], help="this node's role on its log (active or standby), epoch, "
                                                      "leader and lag (admin; docs/api.md §19)")
    c.add_argument("--json", action="store_true", help="print the answer as JSON")
    c.set_defaults(admin=cmd_cluster)

    c = sub.add_parser("export", parents=[conn], help="every ranked row at one version (admin, moderator)")
    c.add_argument("board")
    c.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    c.add_argument("-o", "--output", default=None, help="write to FILE (default: stdout)")
    c.add_argument("--ties", action="store_true", help="add tied_rank, the competition rank (1, 1, 3)")
    c.set_defaults(admin=cmd_export)


def run(args: argparse.Namespace, env: dict | None = None, out: IO[str] | None = None,
        transport: httpx.BaseTransport | None = None) -> int:
    """Run a parsed admin command; every failure is one ``flowrank: error:`` line."""
    env = os.environ if env is None else env
    out = sys.stdout if out is None else out
    try:
        url = args.url or env.get("FLOWRANK_URL")
        key = args.key or env.get("FLOWRANK_KEY")
        if not url:
            raise CliError("no server: give --url or set FLOWRANK_URL (e.g. http://127.0.0.1:8000)", EXIT_USAGE)
        if not key:
            raise CliError("no key: give --key or set FLOWRANK_KEY (flowrank serve prints where keys.json is)",
                           EXIT_USAGE)
        if not url.startswith(("http://", "https://")):
            raise CliError(f"--url {url!r}: must start with http:// or https://", EXIT_USAGE)
        api = Api(url, key, timeout=args.timeout, retries=getattr(args, "retries", 8), transport=transport)
        try:
            return args.admin(api, args, out)
        finally:
            api.close()
    except CliError as err:
        print(f"flowrank: error: {' '.join(err.message.split())}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        print("flowrank: error: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        return EXIT_OK  # `flowrank export … | head`: the reader left
    except Exception as exc:  # noqa: BLE001  one line, not a traceback
        print(f"flowrank: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNEXPECTED
