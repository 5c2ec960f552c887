"""engine.log.shared_settings (docs/api.md §19 "Every node of one log answers alike"): the keys, the token
secret, the webhook secret and the erasure key of a database log are made once, atomically, and every
node (here: every data directory) gets the same ones; the file log keeps its files as before."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from engine.core.errors import StorageUnavailable, Unauthenticated
from engine.log import secret as erasure_secret
from engine.log import shared_settings as ss
from engine.runtime.webhooks import load_or_create_secret
from gateway import tokens
from gateway.auth import KeyFileError, KeyStore, load_keystore, new_keys_document


def _rows(url: str) -> dict[str, bytes]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {n: bytes(v) for n, v in conn.execute("SELECT name, value FROM flowrank_settings").fetchall()}


def test_settle_proposes_once_then_every_caller_reads_the_stored_value(pg_url):
    calls = []

    def propose(value: bytes):
        def make() -> bytes:
            calls.append(value)
            return value
        return make

    assert ss.settle(pg_url, "x", propose(b"first")) == b"first"
    assert ss.settle(pg_url, "x", propose(b"second")) == b"first"
    assert calls == [b"first"]  # the second caller found the row: nothing proposed
    assert _rows(pg_url) == {"x": b"first"}


def test_nodes_starting_at_once_agree_on_one_value(pg_url):
    n = 8
    barrier = threading.Barrier(n)
    got: list[bytes] = [b""] * n
    errors: list[BaseException] = []

    def node(i: int) -> None:
        def propose() -> bytes:
            barrier.wait(timeout=30)  # every node found no row: all of them insert at once
            return f"node-{i}".encode()
        try:
            got[i] = ss.settle(pg_url, "race", propose)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(set(got)) == 1 and got[0] in {f"node-{i}".encode() for i in range(n)}, got
    assert _rows(pg_url) == {"race": got[0]}


def test_an_unreachable_database_is_storage_unavailable(tmp_path):
    url = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    with pytest.raises(StorageUnavailable):
        ss.token_secret(url, tmp_path)


def test_the_token_secret_is_shared_and_tokens_verify_on_every_node(pg_url, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    secret_a = tokens.load_secret(a, pg_url)
    secret_b = tokens.load_secret(b, pg_url)
    assert secret_a == secret_b and len(secret_a) == 32
    assert not (a / tokens.SECRET_FILE).exists() and not (b / tokens.SECRET_FILE).exists()  # the database's
    token = tokens.TokenSigner(secret_a).mint("web", None, expires_ms=10_000)
    assert tokens.TokenSigner(secret_b).verify(token, now_ms=1).key_name == "web"


def test_a_node_that_had_a_token_secret_seeds_the_log_with_it(pg_url, tmp_path):
    old = tmp_path / "old"
    before = tokens.load_secret(old)  # a file-log start made <data-dir>/token_secret
    assert tokens.load_secret(old, pg_url) == before  # its tokens stay valid on the shared log
    assert tokens.load_secret(tmp_path / "new", pg_url) == before
    other = tmp_path / "other"
    tokens.load_secret(other)  # another secret of its own: the log's wins, the file is left alone
    assert tokens.load_secret(other, pg_url) == before
    with pytest.raises(ValueError, match="not a hex secret"):
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / tokens.SECRET_FILE).write_text("zz\n")
        tokens.load_secret(bad, ss_url_with_fresh_setting(pg_url))


def ss_url_with_fresh_setting(url: str) -> str:
    """The same database with its token_secret row removed (so the next node proposes again)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM flowrank_settings WHERE name = %s", (ss.TOKEN_SECRET,))
    return url


def test_the_erasure_key_is_shared_and_seeded_from_an_existing_key(pg_url, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    before = erasure_secret.load_secret(old)  # the file log's <data-dir>/erasure.key
    assert erasure_secret.load_secret(old, pg_url) == before
    fresh = tmp_path / "fresh"
    assert erasure_secret.load_secret(fresh, pg_url) == before and not (fresh / "erasure.key").exists()
    assert _rows(pg_url)[ss.ERASURE_KEY] == before


def test_the_webhook_secret_is_shared_unless_a_file_is_given(pg_url, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "webhook_secret").write_bytes(b"s3cret\r\n")
    assert load_or_create_secret(old, None, pg_url) == b"s3cret"  # seeded from the node's file, less its newline
    assert load_or_create_secret(tmp_path / "new", None, pg_url) == b"s3cret"
    given = tmp_path / "given"
    given.write_bytes(b"mine\n")
    assert load_or_create_secret(tmp_path / "new", given, pg_url) == b"mine"  # --webhook-secret-file wins
    fresh_url = pg_url
    with psycopg.connect(fresh_url, autocommit=True) as conn:
        conn.execute("DELETE FROM flowrank_settings")
    made = load_or_create_secret(tmp_path / "empty", None, fresh_url)
    assert len(made) == 64 and bytes.fromhex(made.decode())  # 32 random bytes, hex, as the file log makes


def test_generated_keys_are_shared_and_written_into_every_data_dir(pg_url, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    store_a, path_a = load_keystore(None, None, str(a), pg_url)
    store_b, path_b = load_keystore(None, None, str(b), pg_url)
    assert path_a == a / "keys.json" and path_b == b / "keys.json"
    assert path_a.read_bytes() == path_b.read_bytes() == _rows(pg_url)[ss.KEYS]
    assert oct(path_b.stat().st_mode & 0o777) == "0o600"
    admin = next(e["key"] for e in json.loads(path_a.read_text())["keys"] if e["role"] == "admin")
    assert store_a.authenticate(f"Bearer {admin}").name == store_b.authenticate(f"Bearer {admin}").name == "admin"
    # a node whose keys.json differs (a stale copy) gets the log's written over it
    c = tmp_path / "c"
    c.mkdir()
    (c / "keys.json").write_bytes(new_keys_document())
    _, path_c = load_keystore(None, None, str(c), pg_url)
    assert path_c.read_bytes() == path_a.read_bytes()
    # explicit --keys still wins, and is left as it is
    explicit = tmp_path / "explicit.json"
    explicit.write_bytes(new_keys_document())
    store, path = load_keystore(None, str(explicit), str(b), pg_url)
    assert path == explicit
    with pytest.raises(Unauthenticated):
        store.authenticate(f"Bearer {admin}")


def test_the_first_node_proposes_its_own_keys_and_a_broken_one_is_refused(pg_url, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "keys.json").write_text("{not json")
    with pytest.raises(KeyFileError, match="not valid JSON"):
        load_keystore(None, None, str(bad), pg_url)
    assert ss.KEYS not in _rows(pg_url)  # nothing stored from a broken file
    mine = tmp_path / "mine"
    mine.mkdir()
    doc = new_keys_document()
    (mine / "keys.json").write_bytes(doc)
    store, _ = load_keystore(None, None, str(mine), pg_url)
    assert _rows(pg_url)[ss.KEYS] == doc and len(store) == 4
    _, path = load_keystore(None, None, str(bad), pg_url)  # the log has keys now: the broken copy is replaced
    assert path.read_bytes() == doc


def test_without_a_database_log_the_files_stay_as_before(tmp_path):
    secret = tokens.load_secret(tmp_path, None)
    assert (tmp_path / tokens.SECRET_FILE).exists() and tokens.load_secret(tmp_path) == secret
    key = erasure_secret.load_secret(tmp_path, None)
    assert (tmp_path / "erasure.key").read_bytes() == key
    assert load_or_create_secret(tmp_path, None, None) == (tmp_path / "webhook_secret").read_bytes()
    store, path = load_keystore(None, None, str(tmp_path), None)
    assert path == tmp_path / "keys.json" and len(store) == len(KeyStore.from_file(path))


def test_mirror_writes_only_when_different(tmp_path):
    path = tmp_path / "d" / "f"
    ss.mirror(path, b"one")
    assert path.read_bytes() == b"one"
    before = path.stat().st_mtime_ns, path.stat().st_ino
    ss.mirror(path, b"one")
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before
    ss.mirror(path, b"two")
    assert path.read_bytes() == b"two" and list(path.parent.iterdir()) == [path]  # no temp file left
