"""The live board page (docs/api.md §12) as HTTP: served without credentials,
self-contained, locked down by its CSP; and how /openapi.json documents
tokens and the page. The page in a real browser: test_ui_browser.py."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from gateway.app import create_app
from gateway.routes.ui import CSP, PAGE
from tests.gateway.conftest import BOARD, settings


@pytest.mark.anyio
async def test_page_needs_no_credentials(harness):
    r = await harness.client.get(f"/ui/boards/{BOARD}")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.content == PAGE
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    # the same page for a board that does not exist: the page itself reveals nothing
    r = await harness.client.get("/ui/boards/no:such:board:here")
    assert r.status_code == 200 and r.content == PAGE


@pytest.mark.anyio
async def test_not_a_board_id_is_422(harness):
    r = await harness.client.get("/ui/boards/not-a-board")
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "VALIDATION_FAILED"


def test_page_loads_nothing_from_other_hosts():
    html = PAGE.decode("utf-8")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?(?:https?:)?//""", html, re.I)
    assert not re.search(r"<script[^>]*\bsrc\b", html, re.I)
    assert not re.search(r"<link[^>]*stylesheet", html, re.I)
    assert not re.search(r"@import|url\(", html, re.I)
    assert not re.search(r"<(?:iframe|img|object|embed)\b", html, re.I)
    assert html.count("<script>") == 1 and html.count("<style>") == 1


def test_csp_allows_exactly_the_inline_blocks():
    for tag in ("script", "style"):
        body = re.search(rb"<" + tag.encode() + rb">(.*?)</" + tag.encode() + rb">", PAGE, re.S).group(1)
        digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in CSP
    assert "default-src 'none'" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP


def test_page_reads_the_token_from_the_fragment_and_streams_with_access_token():
    html = PAGE.decode("utf-8")
    assert "location.hash" in html and 'frag.get("token")' in html
    assert "new EventSource(" in html and "access_token=" in html
    assert "/players/" in html and "/around?radius=" in html  # player search: exact rank and around
    assert '"/cohort"' in html and "b.league" in html  # on a league board (§16): the player's cohort


def test_openapi_documents_tokens_and_the_page():
    spec = create_app(settings(), engine_client=None).openapi()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["AccessToken"] == {**schemes["AccessToken"], "type": "apiKey", "in": "query",
                                      "name": "access_token"}
    tokens = spec["paths"]["/v1/tokens"]["post"]
    assert set(tokens["responses"]) >= {"201", "401", "422"}
    assert tokens["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/TokenIn")
    assert tokens["security"] == [{"HTTPBearer": []}]
    token_ok = {(p, m) for p, ops in spec["paths"].items() for m, op in ops.items()
                if {"AccessToken": []} in op.get("security", [])}
    assert ("/v1/boards/{board_id}/top", "get") in token_ok
    assert ("/v1/boards/{board_id}/live", "get") in token_ok
    assert ("/v1/boards", "get") in token_ok
    for path, method in [("/v1/boards/{board_id}/ranked-subset", "post"), ("/v1/events", "post"),
                         ("/v1/boards/{board_id}/quarantine", "get"), ("/v1/boards/{board_id}/checksum", "get"),
                         ("/v1/boards/{board_id}/export", "get"),
                         ("/v1/boards/{board_id}/players/{player_id}/history", "get")]:
        assert (path, method) not in token_ok, path
    page = spec["paths"]["/ui/boards/{board_id}"]["get"]
    assert "security" not in page and "text/html" in page["responses"]["200"]["content"]
