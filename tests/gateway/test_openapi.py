"""The app's own /openapi.json: complete, and exact: schemathesis with every
check over every operation finds nothing, against the app over the real
LocalService served on a loopback socket (the engine lives on the server's
event loop)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.app import create_app
from tests.gateway.conftest import settings, thread_server


def _settings():
    return settings(read_rate_per_s=1e9, read_burst=1e9, write_rate_per_s=1e9, write_burst=1e9)


def _spec() -> dict:
    """The schema only: an app that is never served needs no engine."""
    return create_app(_settings(), engine_client=None).openapi()


SPEC = _spec()


def test_every_route_is_documented_with_error_bodies():
    spec = SPEC
    assert {"ErrorBody", "ErrorDetail", "EventBatchIn", "EventIn"} <= set(spec["components"]["schemas"])
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op.get("summary"), (method, path)
            if path.startswith("/v1/"):
                for status in ("401", "403", "422", "429"):
                    ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorBody"), (method, path, status)
    events = spec["paths"]["/v1/events"]["post"]
    assert events["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/EventBatchIn")
    assert "413" in events["responses"]
    history = spec["paths"]["/v1/boards/{board_id}/players/{player_id}/history"]["get"]
    assert "BOARD_ARCHIVED" in history["responses"]["410"]["description"]  # found by schemathesis (ST103)
    assert "format 1" in history["responses"]["410"]["description"]  # only an archive without history
    entry = spec["components"]["schemas"]["HistoryEntryOut"]
    assert {"invalidated", "metadata"} <= set(entry["properties"]) and "invalidated" in entry["required"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_a_recurrence_is_documented_as_exactly_as_the_server_checks_it():
    """Every zone name the server accepts is in the enum and nothing else; the season part of a
    series is bounded only when a recurrence is given (docs/api.md §15)."""
    import re as _re

    from engine.core.windows import AT_PATTERN, MAX_SERIES_SEASON, zone_names

    schemas = SPEC["components"]["schemas"]
    rec = schemas["RecurrenceIn"]
    assert rec["additionalProperties"] is False and rec["required"] == ["every"]
    assert rec["properties"]["every"]["enum"] == ["day", "week", "month"]
    assert rec["properties"]["timezone"]["enum"] == zone_names() and "Europe/Berlin" in zone_names()
    assert rec["properties"]["at"]["pattern"] == AT_PATTERN
    assert (rec["properties"]["keep"]["minimum"], rec["properties"]["keep"]["maximum"]) == (1, 1000)
    create = schemas["BoardCreate"]
    series_rule = next(c for c in create["allOf"] if c["if"].get("required") == ["recurrence"])
    assert series_rule["then"]["properties"]["entry"] == {"type": "null"}  # no entry rules on a series (yet)
    assert series_rule["then"]["properties"]["league"] == {"type": "null"}  # nor a league or prizes
    assert {"type": "array", "maxItems": 0} in series_rule["then"]["properties"]["prizes"]["anyOf"]
    season_rule = _re.compile(series_rule["then"]["properties"]["board_id"]["pattern"])
    assert season_rule.search("g:m:" + "s" * MAX_SERIES_SEASON + ":x")
    assert not season_rule.search("g:m:" + "s" * (MAX_SERIES_SEASON + 1) + ":x")


def test_competitions_are_documented_with_their_bounds_and_conditions():
    """League and prizes settings (docs/api.md §16): ranges as the engine checks them, no subscores beside
    them; boards show them only when they have them; the cohort path takes any text (404, never 422)."""
    schemas = SPEC["components"]["schemas"]
    league = schemas["LeagueIn"]
    assert league["additionalProperties"] is False and league["required"] == ["cohort_size"]
    bounds = {k: (v.get("minimum"), v.get("maximum")) for k, v in league["properties"].items()}
    assert bounds == {"cohort_size": (2, 1000), "tiers": (1, 20), "promote": (0, 1000), "demote": (0, 1000)}
    prize = schemas["PrizeIn"]
    assert prize["required"] == ["ranks", "reward"] and prize["properties"]["reward"]["type"] == "object"
    assert [r["minimum"] for r in prize["properties"]["ranks"]["prefixItems"]] == [1, 1]
    assert schemas["BoardCreate"]["properties"]["prizes"]["anyOf"][0]["maxItems"] == 100
    no_subscores = next(c for c in schemas["BoardCreate"]["allOf"] if "anyOf" in c["if"])
    assert [alt["required"] for alt in no_subscores["if"]["anyOf"]] == [["entry"], ["league"], ["prizes"]]
    assert {"type": "array", "maxItems": 0} in no_subscores["then"]["properties"]["subscores"]["anyOf"]
    out = schemas["BoardOut"]["properties"]
    assert "default" not in out["league"] and "default" not in out["prizes"]  # left out, never null
    cohort = SPEC["paths"]["/v1/boards/{board_id}/cohorts/{cohort}"]["get"]
    param = next(p for p in cohort["parameters"] if p["name"] == "cohort")
    assert param["schema"]["type"] == "string" and "pattern" not in param["schema"]
    assert "COHORT_NOT_FOUND" in cohort["responses"]["404"]["description"]
    zone = schemas["CohortEntryOut"]["properties"]["zone"]
    assert {"enum": ["promote", "demote"], "type": "string"} in zone["anyOf"] and "zone" in schemas["CohortEntryOut"]["required"]
    awards = SPEC["paths"]["/v1/boards/{board_id}/awards"]["get"]
    assert awards["security"] == [{"HTTPBearer": []}]  # admin only: no token
    assert [p["name"] for p in awards["parameters"]][1:] == ["limit", "cursor"]


@pytest.fixture(scope="module")
def base_url():
    with thread_server(_settings) as url:
        yield url


REPO = Path(__file__).resolve().parents[2]
MAX_EXAMPLES = 8  # per operation and phase: ~75 s for the whole run on the 2-core VM


def test_schemathesis_every_check_every_operation(base_url):
    """``st run --checks all`` (every phase: examples, coverage, fuzzing, stateful) against the app over the
    real LocalService, with the admin key; the repo's schemathesis.toml is the only configuration (it names
    the two statuses added to schemathesis's defaults and the hook for whole floats, and why). 0 failures."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{base_url}/openapi.json", "--checks", "all",
         "-H", "Authorization: Bearer admin-key", "--max-examples", str(MAX_EXAMPLES),
         # one worker: with 2 (threads), hypothesis's ast.parse of lambda sources in both at once tripped
         # CPython 3.11's shared AST recursion counter ("SystemError: AST constructor recursion depth
         # mismatch", python/cpython#106905) and schemathesis dropped its Coverage phase (a red CI run)
         "--workers", "1",
         # a request is answered in ms; 30 s (not 10) keeps a CI machine under heavy load from turning
         # scheduling delays into "Network Error" (seen once at load 13 on 2 cores)
         "--request-timeout", "30",
         # the same cases on every run (as the hypothesis profile of tests/conftest.py): a red CI run
         # reproduces from the commit; FLOWRANK_SCHEMATHESIS_SEED=<n> explores other cases locally
         "--seed", os.environ.get("FLOWRANK_SCHEMATHESIS_SEED", "1"), "--generation-deterministic"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    print(out[out.find("FAILURES"):] if "FAILURES" in out else out[-2000:])
    summary = _summary(out)
    print(f"schemathesis: {summary}")
    assert summary["operations"] == summary["tested"] == len([m for ops in SPEC["paths"].values() for m in ops])
    assert set(summary["phases"]) == {"Examples", "Coverage", "Fuzzing", "Stateful"}, summary
    assert summary["generated"] > 0 and summary["failures"] == 0, out[-6000:]
    assert proc.returncode == 0, out[-6000:]


def _admin_on_every_request(app):
    """The app with its authentication defeated: every request carries the admin key."""
    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
            scope = dict(scope, headers=[*headers, (b"authorization", b"Bearer admin-key")])
        await app(scope, receive, send)
    return asgi


def test_the_auth_check_fails_a_server_that_ignores_auth():
    """The run above passes its auth check (ST401: requests without or with a wrong credential must be
    401) because the server enforces auth, not because the check is inert: here it fails."""
    with thread_server(_settings, wrap=_admin_on_every_request) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json", "--checks", "ignored_auth",
             "-H", "Authorization: Bearer admin-key", "--max-examples", "1", "--phases", "examples",
             "--include-path-regex", "^/v1/boards$"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                           "NO_COLOR": "1"}, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "ST401" in out, out[-3000:]


def _summary(out: str) -> dict:
    """The counts st run prints at the end (its exit code alone would not say what ran)."""
    ops = re.search(r"Selected: (\d+)/(\d+)", out)
    tested = re.search(r"Tested: (\d+)", out)
    generated = re.search(r"(\d+) generated", out)
    failures = re.search(r"(\d+) found", out)
    return {
        "operations": int(ops.group(2)) if ops else None,
        "tested": int(tested.group(1)) if tested else None,
        "generated": int(generated.group(1)) if generated else 0,
        "failures": int(failures.group(1)) if failures else 0,
        "phases": re.findall(r"✅ (Examples|Coverage|Fuzzing|Stateful)\b", out.split("Test Phases:")[-1]),
        "seed": (re.search(r"Seed: (\d+)", out) or [None, None])[1],
    }
