"""The admin commands of ``flowrank`` (gateway.admin_cli) against a real server on
loopback: boards, submit (whole-file validation, batches, retries with the same
event ids, exact outcome counts), top, player, export; one-line errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from engine.core.timefmt import format_timestamp
from gateway import admin_cli
from gateway.cli import build_parser, main
from tests.gateway.conftest import ROLE_KEYS, thread_server

BOARD = "cli-test:solo:S1:global"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with thread_server(n_shards=3) as url:
        yield url


@pytest.fixture
def env(server, monkeypatch):
    monkeypatch.setenv("FLOWRANK_URL", server)
    monkeypatch.setenv("FLOWRANK_KEY", ROLE_KEYS["admin"])
    return server


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _events(board: str, n: int, seed: int = 7) -> list[dict]:
    """n best_score events on ``board`` over n // 3 players: improvements,
    non-improvements, ties broken by achieved_at, and exact repeats."""
    import random

    rnd = random.Random(seed)
    players = max(1, n // 3)
    out: list[dict] = []
    while len(out) < n:
        if out and rnd.random() < 0.05:
            out.append(dict(out[rnd.randrange(len(out))]))  # the same event again: DUPLICATE_IGNORED
            continue
        out.append({"event_id": f"{board}-e{len(out)}", "board_id": board, "player_id": f"p{rnd.randrange(players)}",
                    "value": rnd.randrange(200), "achieved_at": 1_793_527_500_000 + rnd.randrange(10_000)})
    return out


def _expected(events: list[dict]) -> tuple[Counter, list[tuple[str, int, int]]]:
    """Outcomes (in file order) and the final ranking of a best_score board: the oracle."""
    seen: set[str] = set()
    rows: dict[str, tuple[int, int]] = {}
    outcomes: Counter = Counter()
    for e in events:
        if e["event_id"] in seen:
            outcomes["DUPLICATE_IGNORED"] += 1
            continue
        seen.add(e["event_id"])
        pid, new = e["player_id"], (e["value"], e["achieved_at"])
        old = rows.get(pid)
        if old is None:
            outcomes["APPLIED_FIRST_SCORE"] += 1
            rows[pid] = new
        elif (-new[0], new[1]) < (-old[0], old[1]):
            outcomes["APPLIED_NEW_BEST"] += 1
            rows[pid] = new
        else:
            outcomes["REJECTED_NOT_AN_IMPROVEMENT"] += 1
    ranking = sorted(((p, v, t) for p, (v, t) in rows.items()), key=lambda r: (-r[1], r[2], r[0]))
    return outcomes, ranking


def _write_jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _create(capsys, board: str, shards: int = 3) -> None:
    code, out, err = _run(capsys, "boards", "create", board, "--policy", "best_score", "--shards", str(shards))
    assert code == 0, err
    assert json.loads(out)["board_id"] == board


def test_boards_create_list_show_state(env, capsys):
    _create(capsys, "cli-a:solo:S1:global")
    code, out, err = _run(capsys, "boards", "list")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["board_id", "policy", "state", "version", "size", "shards"]
    assert any(r.split()[:3] == ["cli-a:solo:S1:global", "best_score", "OPEN"] for r in rows)
    code, out, _ = _run(capsys, "boards", "list", "--json")
    assert "cli-a:solo:S1:global" in {b["board_id"] for b in json.loads(out)}
    code, out, _ = _run(capsys, "boards", "show", "cli-a:solo:S1:global")
    assert code == 0 and json.loads(out)["shards"] == 3
    code, out, _ = _run(capsys, "boards", "state", "cli-a:solo:S1:global", "frozen")
    assert code == 0 and json.loads(out)["state"] == "FROZEN"

    code, out, err = _run(capsys, "boards", "create", "cli-a:solo:S1:global", "--policy", "best_score")
    assert code == admin_cli.EXIT_REFUSED and out == ""
    assert err.count("\n") == 1 and err.startswith("flowrank: error: create cli-a:solo:S1:global: HTTP 409 BOARD_EXISTS")
    code, _, err = _run(capsys, "boards", "state", "cli-a:solo:S1:global", "OPEN")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 409 INVALID_TRANSITION" in err
    code, _, err = _run(capsys, "boards", "show", "no:such:board:x")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 BOARD_NOT_FOUND" in err


def test_boards_create_with_subscores(env, capsys):
    code, out, err = _run(capsys, "boards", "create", "cli-u:solo:S1:global", "--policy", "fastest_time",
                          "--subscores", "desc,asc")
    assert code == 0, err
    assert json.loads(out)["subscores"] == ["desc", "asc"]
    code, out, _ = _run(capsys, "boards", "show", "cli-u:solo:S1:global")
    assert json.loads(out)["subscores"] == ["desc", "asc"]
    code, _, err = _run(capsys, "boards", "create", "cli-v:solo:S1:global", "--policy", "cumulative",
                        "--subscores", "desc")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 422 VALIDATION_FAILED" in err
    with pytest.raises(SystemExit):  # not a direction: argparse refuses it before any request
        _run(capsys, "boards", "create", "cli-w:solo:S1:global", "--policy", "best_score", "--subscores", "up")
def test_boards_create_a_latest_board(env, capsys):
    code, out, err = _run(capsys, "boards", "create", "cli-l:ladder:S1:global", "--policy", "latest", "--shards", "2")
    assert code == 0, err
    got = json.loads(out)
    assert (got["board_id"], got["policy"], got["shards"]) == ("cli-l:ladder:S1:global", "latest", 2)
    code, out, _ = _run(capsys, "boards", "show", "cli-l:ladder:S1:global")
    assert code == 0 and json.loads(out)["policy"] == "latest"


def test_boards_create_with_a_schedule_and_next_season(env, capsys):
    code, out, err = _run(capsys, "boards", "create", "cli-s:solo:S1:global", "--policy", "cumulative", "--shards", "2",
                          "--closes-at", "2999-01-01T00:00:00Z", "--finalize-after-s", "0")
    assert code == 0, err
    got = json.loads(out)
    assert (got["closes_at"], got["finalize_after_s"], got["state"]) == ("2999-01-01T00:00:00.000Z", 0, "OPEN")
    code, out, err = _run(capsys, "boards", "next-season", "cli-s:solo:S1:global", "S2", "--closes-at", "32503680000000")
    assert code == 0, err
    got = json.loads(out)
    assert (got["board_id"], got["policy"], got["shards"], got["closes_at"], got["finalize_after_s"]) == (
        "cli-s:solo:S2:global", "cumulative", 2, "3000-01-01T00:00:00.000Z", 0)
    code, _, err = _run(capsys, "boards", "next-season", "cli-s:solo:S1:global", "S2")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 409 BOARD_EXISTS" in err
    code, _, err = _run(capsys, "boards", "next-season", "cli-s:solo:S1:global", "S 3")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 422 VALIDATION_FAILED" in err
    for flag, value in (("--closes-at", "tomorrow"), ("--finalize-after-s", "-1")):
        with pytest.raises(SystemExit) as ei:
            main(["boards", "create", "cli-t:solo:S1:global", "--policy", "cumulative", flag, value])
        assert ei.value.code == 2
        capsys.readouterr()


def test_boards_create_a_recurring_board(env, capsys):
    code, out, err = _run(capsys, "boards", "create", "cli-r:solo:daily:global", "--policy", "best_score",
                          "--recurrence", "day", "--timezone", "Europe/Berlin", "--at", "04:00", "--keep", "30")
    assert code == 0, err
    got = json.loads(out)
    assert got["board_id"] == "cli-r:solo:daily:global"
    assert got["recurrence"] == {"every": "day", "timezone": "Europe/Berlin", "at": "04:00", "keep": 30}
    current = got["current"]
    assert current.startswith("cli-r:solo:daily.") and current.endswith(":global")
    code, out, err = _run(capsys, "boards", "instances", "cli-r:solo:daily:global")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["board_id", "starts_at", "ends_at", "state", "size"]
    assert [r.split()[0] for r in rows] == [current] and rows[0].split()[3:] == ["OPEN", "0"]
    code, out, err = _run(capsys, "boards", "instances", "cli-r:solo:daily:global", "--json")
    assert [i["board_id"] for i in json.loads(out)] == [current]
    code, out, err = _run(capsys, "boards", "show", current)
    assert json.loads(out)["series"] == "cli-r:solo:daily:global" and json.loads(out)["window"]["starts_at"]
    code, _, err = _run(capsys, "boards", "instances", "cli-a:solo:none:global")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 BOARD_NOT_FOUND" in err
    code, _, err = _run(capsys, "boards", "create", "cli-r:solo:" + "d" * 56 + ":global", "--policy", "best_score",
                        "--recurrence", "week")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 422 VALIDATION_FAILED" in err and "(field board_id)" in err
    code, _, err = _run(capsys, "boards", "create", "cli-r:solo:x:global", "--policy", "best_score", "--at", "04:00",
                        "--keep", "3")
    assert code == admin_cli.EXIT_USAGE and "--at/--keep" in err and "--recurrence day|week|month" in err
    for flag, value in (("--recurrence", "hour"), ("--timezone", "Mars/Olympus"), ("--at", "4:00"),
                        ("--at", "24:00"), ("--keep", "0"), ("--keep", "1001")):
        with pytest.raises(SystemExit) as ei:
            main(["boards", "create", "cli-r:solo:y:global", "--policy", "best_score", "--recurrence", "day",
                  flag, value])
        assert ei.value.code == 2, (flag, value)


@pytest.mark.parametrize("flags, recurrence", [
    (["--recurrence", "month"], {"every": "month"}),
    (["--recurrence", "week", "--timezone", "Australia/Lord_Howe", "--at", "23:59", "--keep", "1000"],
     {"every": "week", "timezone": "Australia/Lord_Howe", "at": "23:59", "keep": 1000}),
    ([], None),
])
def test_boards_create_sends_only_the_recurrence_it_was_given(capsys, flags, recurrence):
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"board_id": "g:m:s:x"})

    args = build_parser().parse_args(["boards", "create", "g:m:s:x", "--policy", "cumulative", *flags,
                                      "--url", "http://x", "--key", "k"])
    assert admin_cli.run(args, env={}, out=io.StringIO(), transport=httpx.MockTransport(handler)) == 0
    assert bodies == [{"board_id": "g:m:s:x", "policy": "cumulative",
                       **({"recurrence": recurrence} if recurrence else {})}]


def test_errors_are_one_line_with_an_exit_code(env, capsys, monkeypatch):
    code, _, err = _run(capsys, "boards", "list", "--key", ROLE_KEYS["reader"])
    assert code == 0, err
    code, _, err = _run(capsys, "boards", "create", "cli-b:solo:S1:global", "--policy", "best_score",
                        "--key", ROLE_KEYS["reader"])
    assert code == admin_cli.EXIT_REFUSED and "HTTP 403 FORBIDDEN" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "boards", "list", "--key", "wrong")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 401 UNAUTHENTICATED" in err
    monkeypatch.delenv("FLOWRANK_KEY")
    code, _, err = _run(capsys, "boards", "list")
    assert code == admin_cli.EXIT_USAGE and err.startswith("flowrank: error: no key")
    monkeypatch.delenv("FLOWRANK_URL")
    code, _, err = _run(capsys, "boards", "list", "--key", "k")
    assert code == admin_cli.EXIT_USAGE and err.startswith("flowrank: error: no server")
    code, _, err = _run(capsys, "top", "x:y:z:w", "--url", "http://127.0.0.1:1", "--key", "k")
    assert code == admin_cli.EXIT_UNREACHABLE and "cannot reach http://127.0.0.1:1" in err
    with pytest.raises(SystemExit) as ei:
        main(["submit", "f.jsonl", "--batch-size", "501"])
    assert ei.value.code == 2
    assert "at most 500 events per batch" in capsys.readouterr().err


def test_submit_then_export_round_trip_counts_every_outcome_exactly(env, capsys, tmp_path):
    board = "cli-rt:solo:S1:global"
    _create(capsys, board)
    events = _events(board, 3_000)
    events.append({"event_id": "x-1", "board_id": "cli-none:solo:S1:global", "player_id": "p0", "value": 1,
                   "achieved_at": "2026-11-01T10:00:00Z"})  # no such board
    expected, ranking = _expected(events[:-1])
    expected["REJECTED_UNKNOWN_SEASON"] += 1
    path = _write_jsonl(tmp_path / "events.jsonl", events)
    with open(path, "a") as fh:
        fh.write("\n   \n")  # blank lines are skipped

    code, out, err = _run(capsys, "submit", str(path), "--json", "--progress")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["events"] == len(events) and summary["batches"] == 7  # 3,001 events in batches of 500
    assert summary["outcomes"] == dict(expected) and summary["retried"] == 0
    assert "3,001/3,001 events" in err and "100.0%" in err  # the bar, on stderr

    code, out, err = _run(capsys, "submit", str(path))  # again: every event is a duplicate now
    assert code == 0, err
    assert out.splitlines()[0].startswith("submitted 3,001 events in 7 batches")
    assert "DUPLICATE_IGNORED" in out and f"{3_000:>12,}" in out

    board_info = json.loads(_run(capsys, "boards", "show", board)[1])
    for fmt in ("csv", "jsonl"):
        target = tmp_path / f"board.{fmt}"
        code, out, err = _run(capsys, "export", board, "--format", fmt, "-o", str(target))
        assert code == 0, err
        assert err.strip() == (f"flowrank: exported {len(ranking):,} rows of {board} "
                               f"at version {board_info['version']} to {target}")
        assert not (tmp_path / f"board.{fmt}.partial").exists()
        if fmt == "csv":
            rows = [(r["player_id"], int(r["value"]), r["achieved_at"], int(r["rank"]))
                    for r in csv.DictReader(io.StringIO(target.read_text(), newline=""))]
        else:
            rows = [(r["player_id"], r["value"], r["achieved_at"], r["rank"])
                    for r in map(json.loads, target.read_text().splitlines())]
        assert rows == [(p, v, format_timestamp(t), i) for i, (p, v, t) in enumerate(ranking, 1)]

    code, out, err = _run(capsys, "export", board, "--format", "jsonl")  # to stdout
    assert code == 0 and len(out.splitlines()) == len(ranking)
    code, out, err = _run(capsys, "export", board, "--format", "jsonl", "--ties")
    assert code == 0 and all("tied_rank" in json.loads(line) for line in out.splitlines())
    code, _, err = _run(capsys, "export", board, "--key", ROLE_KEYS["reader"], "-o", str(tmp_path / "no.csv"))
    assert code == admin_cli.EXIT_REFUSED and "HTTP 403 FORBIDDEN" in err
    assert not (tmp_path / "no.csv").exists()


def test_submit_with_batches_in_flight_ends_in_the_same_board(env, capsys, tmp_path):
    board = "cli-conc:solo:S1:global"
    _create(capsys, board)
    events = _events(board, 4_000, seed=11)
    expected, ranking = _expected(events)
    code, out, err = _run(capsys, "submit", str(_write_jsonl(tmp_path / "e.jsonl", events)), "--json",
                          "--concurrency", "4", "--batch-size", "250")
    assert code == 0, err
    got = json.loads(out)
    assert got["events"] == 4_000 and got["batches"] == 16 and sum(got["outcomes"].values()) == 4_000
    # order-independent counts: one first score per player, the same duplicates
    assert got["outcomes"]["APPLIED_FIRST_SCORE"] == expected["APPLIED_FIRST_SCORE"] == len(ranking)
    assert got["outcomes"]["DUPLICATE_IGNORED"] == expected["DUPLICATE_IGNORED"]
    code, out, err = _run(capsys, "export", board, "--format", "jsonl")
    assert code == 0, err
    rows = [(r["player_id"], r["value"], r["achieved_at"]) for r in map(json.loads, out.splitlines())]
    assert rows == [(p, v, format_timestamp(t)) for p, v, t in ranking]


def test_a_bad_line_is_named_and_nothing_is_sent(env, capsys, tmp_path):
    board = "cli-bad:solo:S1:global"
    _create(capsys, board)
    events = _events(board, 1_200)
    lines = [json.dumps(e) for e in events]
    lines[1_100] = lines[1_100].replace('"value": ', '"value": 1.5, "x": ')  # a float value, after 2 batches' worth
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, "submit", str(tmp_path / "bad.jsonl"))
    assert code == admin_cli.EXIT_INPUT and out == ""
    assert err.startswith(f"flowrank: error: {tmp_path / 'bad.jsonl'}:1101: invalid event (event.value)")
    assert err.rstrip().endswith("Nothing was sent.") and err.count("\n") == 1

    (tmp_path / "notjson.jsonl").write_text(json.dumps(events[0]) + "\n{oops\n")
    code, _, err = _run(capsys, "submit", str(tmp_path / "notjson.jsonl"))
    assert code == admin_cli.EXIT_INPUT and ":2: not a JSON object" in err and "nothing was sent" in err
    code, _, err = _run(capsys, "submit", str(tmp_path / "missing.jsonl"))
    assert code == admin_cli.EXIT_INPUT and "cannot read the events file" in err

    assert json.loads(_run(capsys, "boards", "show", board)[1])["version"] == 0  # nothing reached the board


def test_top_and_player(env, capsys, tmp_path):
    board = "cli-read:solo:S1:global"
    _create(capsys, board)
    events = [{"event_id": f"r{i}", "board_id": board, "player_id": f"p-{i}", "value": 100 - i,
               "achieved_at": "2026-11-01T10:00:00Z"} for i in range(5)]
    assert _run(capsys, "submit", str(_write_jsonl(tmp_path / "e.jsonl", events)))[0] == 0
    code, out, err = _run(capsys, "top", board, "--limit", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{board} at version 5"
    assert lines[2].split() == ["1", "p-0", "100", "2026-11-01T10:00:00.000Z"] and len(lines) == 5
    code, out, _ = _run(capsys, "top", board, "--json")
    assert [e["player_id"] for e in json.loads(out)["entries"]] == [f"p-{i}" for i in range(5)]
    code, out, _ = _run(capsys, "player", board, "p-3")
    assert code == 0 and "rank         4" in out and "status       ACTIVE" in out
    code, out, _ = _run(capsys, "player", board, "p-3", "--json")
    assert json.loads(out)["rank"] == 4
    code, _, err = _run(capsys, "player", board, "nobody")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 PLAYER_NOT_FOUND" in err


def test_the_console_entry_point_reads_the_environment(server, tmp_path):
    env = {**os.environ, "FLOWRANK_URL": server, "FLOWRANK_KEY": ROLE_KEYS["reader"], "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "gateway", "boards", "list", "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)
    r = subprocess.run([sys.executable, "-m", "gateway", "boards", "show", "no:such:board:x"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == admin_cli.EXIT_REFUSED and r.stderr.startswith("flowrank: error: board no:such:board:x")
    assert "Traceback" not in r.stderr


# ------------------------------------------------------- retries (no server)


def test_submit_retries_resend_the_same_batch_and_count_the_answers(tmp_path, capsys):
    events = _events("g:m:s:x", 1_200)
    path = _write_jsonl(tmp_path / "e.jsonl", events)
    bodies: list[bytes] = []
    calls = Counter()

    def handler(request: httpx.Request) -> httpx.Response:
        batch = json.loads(request.content)["events"]
        calls[batch[0]["event_id"]] += 1
        bodies.append(request.content)
        n = calls[batch[0]["event_id"]]
        if batch[0] is not None and batch[0]["event_id"] == events[500]["event_id"]:  # the second batch
            if n == 1:
                return httpx.Response(503, headers={"Retry-After": "0"},
                                      json={"error": {"code": "OVERLOADED", "message": "busy", "field": None}})
            if n == 2:
                raise httpx.ReadError("connection reset")
            if n == 3:
                return httpx.Response(500, text="oops")
        outcome = "DUPLICATE_IGNORED" if n > 1 else "APPLIED"
        return httpx.Response(200, json={"results": [{"event_id": e["event_id"], "outcome": outcome, "version": 0}
                                                     for e in batch]})

    args = build_parser().parse_args(["submit", str(path), "--json", "--url", "http://x", "--key", "k"])
    out = io.StringIO()
    assert admin_cli.run(args, env={}, out=out, transport=httpx.MockTransport(handler)) == 0
    summary = json.loads(out.getvalue())
    assert summary == {**summary, "events": 1_200, "batches": 3, "retried": 3,
                       "outcomes": {"APPLIED": 700, "DUPLICATE_IGNORED": 500}}
    second = [b for b in bodies if json.loads(b)["events"][0]["event_id"] == events[500]["event_id"]]
    assert len(second) == 4 and len(set(second)) == 1  # the identical body: the same event ids
    assert [json.loads(line) for line in path.read_text().splitlines()[500:1000]] == json.loads(second[0])["events"]


def test_submit_that_gives_up_says_what_was_sent(tmp_path, capsys):
    events = _events("g:m:s:x", 1_200)
    path = _write_jsonl(tmp_path / "e.jsonl", events)

    def handler(request: httpx.Request) -> httpx.Response:
        batch = json.loads(request.content)["events"]
        if batch[0]["event_id"] == events[1000]["event_id"]:
            return httpx.Response(422, json={"error": {"code": "VALIDATION_FAILED", "message": "events[7].value: no.",
                                                       "field": "events[7].value"}})
        return httpx.Response(200, json={"results": [{"event_id": e["event_id"], "outcome": "APPLIED", "version": 0}
                                                     for e in batch]})

    args = build_parser().parse_args(["submit", str(path), "--url", "http://x", "--key", "k"])
    assert admin_cli.run(args, env={}, transport=httpx.MockTransport(handler)) == admin_cli.EXIT_REFUSED
    err = capsys.readouterr().err
    assert "batch of lines 1001-1200: HTTP 422 VALIDATION_FAILED" in err
    assert "(file line 1008)" in err and "lines before 1001 were sent and answered (1,000 events)" in err


def test_a_file_changed_between_check_and_send_sends_nothing(tmp_path, capsys, monkeypatch):
    path = _write_jsonl(tmp_path / "e.jsonl", _events("g:m:s:x", 10))
    real = admin_cli.check_events
    monkeypatch.setattr(admin_cli, "check_events", lambda p: (real(p)[0], (0, 0)))  # as if it changed since
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    args = build_parser().parse_args(["submit", str(path), "--url", "http://x", "--key", "k"])
    assert admin_cli.run(args, env={}, transport=httpx.MockTransport(handler)) == admin_cli.EXIT_INPUT
    assert "the file changed after it was checked; nothing was sent" in capsys.readouterr().err and sent == []


def test_a_batch_without_an_answer_says_a_resend_is_safe(tmp_path, capsys):
    events = _events("g:m:s:x", 700)
    path = _write_jsonl(tmp_path / "e.jsonl", events)

    def handler(request: httpx.Request) -> httpx.Response:
        batch = json.loads(request.content)["events"]
        if batch[0]["event_id"] == events[500]["event_id"]:
            raise httpx.ReadTimeout("no answer")
        return httpx.Response(200, json={"results": [{"event_id": e["event_id"], "outcome": "APPLIED", "version": 0}
                                                     for e in batch]})

    args = build_parser().parse_args(["submit", str(path), "--url", "http://x", "--key", "k", "--retries", "1"])
    assert admin_cli.run(args, env={}, transport=httpx.MockTransport(handler)) == admin_cli.EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "batch of lines 501-700: cannot reach http://x" in err
    assert "lines before 501 were sent and answered (500 events)" in err and "sending the file again is safe" in err


@pytest.mark.parametrize("flags, entry", [
    (["--join-required", "--max-players", "100", "--max-attempts", "3"],
     {"join_required": True, "max_players": 100, "max_attempts": 3}),
    (["--max-attempts", "1"], {"join_required": False, "max_players": None, "max_attempts": 1}),
    (["--join-required"], {"join_required": True, "max_players": None, "max_attempts": None}),
    ([], None),
])
def test_boards_create_sends_the_entry_rules_it_was_given(capsys, flags, entry):
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"board_id": "g:m:s:x"})

    args = build_parser().parse_args(["boards", "create", "g:m:s:x", "--policy", "cumulative", *flags,
                                      "--url", "http://x", "--key", "k"])
    assert admin_cli.run(args, env={}, out=io.StringIO(), transport=httpx.MockTransport(handler)) == 0
    assert bodies == [{"board_id": "g:m:s:x", "policy": "cumulative", **({"entry": entry} if entry else {})}]


def test_boards_create_with_entry_rules_against_the_server(env, capsys):
    code, out, err = _run(capsys, "boards", "create", "cli-e:solo:S1:global", "--policy", "best_score",
                          "--join-required", "--max-players", "100", "--max-attempts", "3")
    assert code == 0, err
    assert json.loads(out)["entry"] == {"join_required": True, "max_players": 100, "max_attempts": 3}
    for flag, value in (("--max-players", "0"), ("--max-attempts", "x")):
        with pytest.raises(SystemExit) as ei:
            main(["boards", "create", "cli-e:solo:S2:global", "--policy", "best_score", flag, value])
        assert ei.value.code == 2
        capsys.readouterr()


@pytest.mark.parametrize("flags, extra", [
    (["--league", "50:5:10:10"], {"league": {"cohort_size": 50, "tiers": 5, "promote": 10, "demote": 10}}),
    (["--league", "8"], {"league": {"cohort_size": 8}}),
    (["--league", "8:3"], {"league": {"cohort_size": 8, "tiers": 3}}),
    (["--prizes", "PRIZES"], {"prizes": [{"ranks": [1, 1], "reward": {"coins": 5}}]}),
])
def test_boards_create_sends_the_league_and_prizes_it_was_given(capsys, tmp_path, flags, extra):
    bodies: list[dict] = []
    prizes = tmp_path / "prizes.json"
    prizes.write_text(json.dumps([{"ranks": [1, 1], "reward": {"coins": 5}}]))

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"board_id": "g:m:s:x"})

    flags = [str(prizes) if f == "PRIZES" else f for f in flags]
    args = build_parser().parse_args(["boards", "create", "g:m:s:x", "--policy", "best_score", *flags,
                                      "--url", "http://x", "--key", "k"])
    assert admin_cli.run(args, env={}, out=io.StringIO(), transport=httpx.MockTransport(handler)) == 0
    assert bodies == [{"board_id": "g:m:s:x", "policy": "best_score", **extra}]


def test_bad_league_or_prizes_flags_are_usage_errors(capsys, tmp_path):
    (tmp_path / "obj.json").write_text('{"ranks": [1, 1]}')
    (tmp_path / "bad.json").write_text("[{")
    for flag, value, says in (("--league", "50:5:x", "not cohort_size:tiers:promote:demote"),
                              ("--league", "1:2:3:4:5", "not cohort_size"), ("--league", "", "not cohort_size"),
                              ("--prizes", str(tmp_path / "none.json"), "cannot read"),
                              ("--prizes", str(tmp_path / "bad.json"), "is not JSON"),
                              ("--prizes", str(tmp_path / "obj.json"), "must hold a JSON list")):
        with pytest.raises(SystemExit) as ei:
            main(["boards", "create", "g:m:s:x", "--policy", "best_score", flag, value])
        assert ei.value.code == 2, (flag, value)
        assert says in capsys.readouterr().err, (flag, value)


def test_a_league_with_prizes_its_cohorts_and_awards(env, capsys, tmp_path):
    board = "cli-l:league:S1:global"
    prizes = tmp_path / "prizes.json"
    prizes.write_text(json.dumps([{"ranks": [1, 1], "reward": {"coins": 500, "badge": "gold ✓"}},
                                  {"ranks": [2, 2], "reward": {"coins": 50}}]))
    code, out, err = _run(capsys, "boards", "create", board, "--policy", "best_score", "--league", "2:2:1:0",
                          "--prizes", str(prizes))
    assert code == 0, err
    assert json.loads(out)["league"] == {"cohort_size": 2, "tiers": 2, "promote": 1, "demote": 0}
    code, _, err = _run(capsys, "boards", "create", "cli-l:league:S2:global", "--policy", "best_score",
                        "--league", "2:2:2:1")
    assert code == admin_cli.EXIT_REFUSED and "VALIDATION_FAILED" in err and "(field league.promote)" in err
    for i, (player, value) in enumerate((("p-a", 10), ("p-b", 30), ("p-c", 20), ("p-c", 25))):
        ev = {"event_id": f"l{i}", "board_id": board, "player_id": player, "value": value, "achieved_at": 1_793_527_500_000}
        r = httpx.post(f"{env}/v1/events", json={"events": [ev]}, headers={"Authorization": f"Bearer {ROLE_KEYS['admin']}"})
        assert r.status_code == 200, r.text
    code, out, err = _run(capsys, "cohort", board, "--player", "p-a")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{board} cohort 1-1 (tier 1, 2 members) at version 4"
    assert lines[1].split() == ["rank", "player_id", "value", "achieved_at", "zone"]
    assert lines[2].split()[:2] + lines[2].split()[3:] == ["1", "p-b", "2026-11-01T10:05:00.000Z", "promote"]
    assert lines[3].split()[-1] == "-"  # no zone
    code, out, err = _run(capsys, "cohort", board, "--cohort", "1-2", "--ties", "--json")
    assert code == 0, err
    view = json.loads(out)
    assert [(e["player_id"], e["tied_rank"], e["zone"]) for e in view["entries"]] == [("p-c", 1, "promote")]
    code, _, err = _run(capsys, "cohort", board, "--cohort", "9-9")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 COHORT_NOT_FOUND" in err
    with pytest.raises(SystemExit):
        main(["cohort", board])  # --player or --cohort
    capsys.readouterr()
    for state in ("FROZEN", "FINALIZED"):
        assert _run(capsys, "boards", "state", board, state)[0] == 0
    code, out, err = _run(capsys, "awards", board, "--page-size", "1")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["cohort", "rank", "player_id", "reward", "delivery", "attempts"]
    assert rows[1:4] == [["1-1", "1", "p-b", '{"coins":500,"badge":"gold', '✓"}', "pending", "0"],
                         ["1-1", "2", "p-a", '{"coins":50}', "pending", "0"],
                         ["1-2", "1", "p-c", '{"coins":500,"badge":"gold', '✓"}', "pending", "0"]]
    assert rows[4] == ["3", "awards"]
    code, out, err = _run(capsys, "awards", board, "--json")
    assert code == 0, err
    assert [(a["award_id"], a["reward"]) for a in json.loads(out)][:2] == [
        (f"{board}/p-b", {"coins": 500, "badge": "gold ✓"}), (f"{board}/p-a", {"coins": 50})]
    code, _, err = _run(capsys, "awards", board, "--key", ROLE_KEYS["reader"])
    assert code == admin_cli.EXIT_REFUSED and "HTTP 403 FORBIDDEN" in err
    # a player's data across boards (docs/api.md §17)
    code, out, err = _run(capsys, "players", "data", "p-c")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert rows == [["board_id", "rank", "value", "events", "held", "awards", "cohort"],
                    [board, "2", "25", "2", "0", "1", "1-2"]]  # its board rank (its award: cohort rank 1)
    code, out, err = _run(capsys, "players", "data", "p-a", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["player_id"] == "p-a" and [b["awards"][0]["rank"] for b in got["boards"]] == [2]
    code, _, err = _run(capsys, "players", "data", "p-nobody")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 PLAYER_NOT_FOUND" in err
    # erasure (docs/api.md §17): accepted, then complete on disk within --wait
    code, out, err = _run(capsys, "players", "erase", "p-c", "--wait", "60", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["player_id"] == "p-c" and got["boards"] == [board] and got["status"] == "complete"
    assert got["completed_at"] >= got["requested_at"]
    code, out, err = _run(capsys, "erasure", got["erasure_id"])
    assert code == 0, err
    assert out.split()[:2] == [got["erasure_id"], "complete"]
    code, _, err = _run(capsys, "players", "data", "p-c")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 PLAYER_NOT_FOUND" in err
    code, _, err = _run(capsys, "players", "erase", "p-c")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 PLAYER_NOT_FOUND" in err
    code, out, err = _run(capsys, "players", "erase", "p-a")
    assert code == 0 and out.startswith("erasure ") and "accepted on 1 board(s)" in out, err
    code, _, err = _run(capsys, "erasure", "nope")
    assert code == admin_cli.EXIT_REFUSED and "HTTP 404 ERASURE_NOT_FOUND" in err


def test_submit_accepts_events_with_board_ids(env, capsys, tmp_path):
    """docs/api.md §7/§15: an event with board_ids is checked and sent as is; one outcome per (event, board)."""
    a, b = "cli-fan:solo:S1:global", "cli-fan:solo:S1:eu"
    for board in (a, b):
        _create(capsys, board, shards=1)
    events = [{"event_id": "f1", "board_ids": [a, b], "player_id": "p-a", "value": 5, "achieved_at": 1_793_527_500_000},
              {"event_id": "f2", "board_id": a, "player_id": "p-b", "value": 7, "achieved_at": 1_793_527_500_000},
              {"event_id": "f1", "board_ids": [a, b], "player_id": "p-a", "value": 5, "achieved_at": 1_793_527_500_000}]
    code, out, err = _run(capsys, "submit", str(_write_jsonl(tmp_path / "fan.jsonl", events)), "--json")
    assert code == 0, err
    assert json.loads(out)["outcomes"] == {"APPLIED_FIRST_SCORE": 3, "DUPLICATE_IGNORED": 2}
    bad = [{**events[0], "board_id": a}]  # both: the server's rule, named before anything is sent
    code, _, err = _run(capsys, "submit", str(_write_jsonl(tmp_path / "bad.jsonl", bad)))
    assert code == admin_cli.EXIT_INPUT and "(event.board_ids)" in err


def test_join_a_file_then_cohorts_and_tier(env, capsys, tmp_path):
    """`flowrank join` sends 1,000 ids per request (docs/api.md §18) and sums the statuses; `cohorts` reads
    every page; `tier` says entered or not."""
    board = "cli-j:league:S1:global"
    code, _, err = _run(capsys, "boards", "create", board, "--policy", "best_score", "--league", "2:2:1:0",
                        "--join-required", "--max-players", "2500")
    assert code == 0, err
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(f"p{i:04d}" for i in range(2400)) + "\n\n")
    code, out, err = _run(capsys, "join", board, "--file", str(ids))
    assert code == 0, err
    assert out.splitlines()[0] == f"2,400 players sent to {board} in 3 requests"
    ids.write_text("\n".join(f"p{i:04d}" for i in range(2300, 2600)))
    code, out, err = _run(capsys, "join", board, "--file", str(ids), "--json", "--chunk", "120")
    assert code == 0, err
    assert json.loads(out) == {"board_id": board, "players": 300, "already joined": 100, "joined": 100,
                               "refused BOARD_FULL": 100}
    code, out, err = _run(capsys, "cohorts", board, "--page-size", "300")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["cohort", "tier", "members"] and lines[1].split() == ["1-1", "1", "2"]
    assert lines[-1] == "1,250 cohorts, 2,500 players" and len(lines) == 1252
    code, out, err = _run(capsys, "cohorts", board, "--tier", "2", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, err = _run(capsys, "tier", board, "p0001")
    assert code == 0 and out.strip() == f"p0001 on {board}: entered tier 1"
    code, out, err = _run(capsys, "tier", board, "p-new", "--json")
    assert code == 0 and json.loads(out) == {"board_id": board, "player_id": "p-new", "tier": 1, "entered": False}
    code, _, err = _run(capsys, "tier", BOARD + "x", "p-new")
    assert code == admin_cli.EXIT_REFUSED and "BOARD_NOT_FOUND" in err


def test_join_refuses_a_bad_file_before_sending_anything(tmp_path, capsys):
    def handler(request):
        raise AssertionError("nothing may be sent")

    for text, says in (("p-a\np-b\np-a\n", "ids.txt:3: 'p-a' is already on line 1"),
                       ("p-a\nbad\x07id\n", "ids.txt:2: invalid player id")):
        (tmp_path / "ids.txt").write_text(text)
        args = build_parser().parse_args(["join", "g:m:s:x", "--file", str(tmp_path / "ids.txt"), "--url", "http://x",
                                          "--key", "k"])
        assert admin_cli.run(args, env={}, transport=httpx.MockTransport(handler)) == admin_cli.EXIT_INPUT
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["join", "g:m:s:x", "--file", "x", "--chunk", "1001"])
    capsys.readouterr()


def test_cluster_prints_the_node_as_a_table_or_json(env, capsys):
    code, out, err = _run(capsys, "cluster")
    assert code == 0, err
    got = dict(line.split(None, 1) for line in out.splitlines())  # "field  value"; None shows as "-"
    assert list(got)[:len(admin_cli.CLUSTER_FIELDS)] == list(admin_cli.CLUSTER_FIELDS)
    assert got["role"] == "active"  # the file log: the node is the active one of its own log
    code, out, err = _run(capsys, "cluster", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["role"] == "active" and {"node", "epoch", "leader", "log_end", "applied", "lag_records",
                                         "lag_s"} <= set(info)
    assert str(info["epoch"]) == got["epoch"] and str(info["lag_records"]) == got["lag_records"]
    code, _, err = _run(capsys, "cluster", "--key", ROLE_KEYS["reader"])  # admin only
    assert code == admin_cli.EXIT_REFUSED and "HTTP 403 FORBIDDEN" in err and err.count("\n") == 1


def test_cluster_of_a_standby_names_its_leader_and_lag(capsys):
    answer = {"role": "standby", "node": "b:8000", "epoch": 7, "leader": "http://a:8000", "log_end": 1200,
              "applied": 1180, "lag_records": 20, "lag_s": 0.0421, "takeovers": 2}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path} {request.headers['authorization']}")
        return httpx.Response(200, json=answer)

    args = build_parser().parse_args(["cluster", "--url", "http://b:8000", "--key", "k"])
    out = io.StringIO()
    assert admin_cli.run(args, env={}, out=out, transport=httpx.MockTransport(handler)) == 0
    assert seen == ["GET /v1/cluster Bearer k"]
    assert out.getvalue().splitlines() == [
        "role         standby",
        "node         b:8000",
        "epoch        7",
        "leader       http://a:8000",
        "log_end      1200",
        "applied      1180",
        "lag_records  20",
        "lag_s        0.042",
        "takeovers    2",
    ]
    args = build_parser().parse_args(["cluster", "--json", "--url", "http://b:8000", "--key", "k"])
    out = io.StringIO()
    assert admin_cli.run(args, env={}, out=out, transport=httpx.MockTransport(handler)) == 0
    assert json.loads(out.getvalue()) == answer
