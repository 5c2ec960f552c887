"""Bearer keys and roles (docs/api.md §2).

A :class:`KeyStore` holds the sha256 digest of every key, never the key
itself after loading. :meth:`KeyStore.authenticate` hashes the presented key
and compares it against *every* entry with :func:`hmac.compare_digest`, so
the time taken does not depend on which entry (if any) matched.
Keys are never logged, echoed or put in error messages.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import parse_qsl

from engine.core.errors import Forbidden, Unauthenticated

from gateway.tokens import PREFIX as TOKEN_PREFIX, TokenSigner, looks_like_token


class Role(str, enum.Enum):
    READER = "reader"
    GAME_SERVER = "game_server"
    MODERATOR = "moderator"
    ADMIN = "admin"


class Permission(str, enum.Enum):
    """What a route needs; :data:`GRANTS` is the docs/api.md §2 table as data."""

    READ = "read"  # every GET except quarantine and history (+ ranked-subset)
    SUBMIT = "submit"  # POST /v1/events
    MODERATE = "moderate"  # quarantine list/decisions, history, invalidations, export
    ADMIN = "admin"  # board creation, state changes, checksum


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.GAME_SERVER: frozenset({Permission.READ, Permission.SUBMIT}),
    Role.MODERATOR: frozenset({Permission.READ, Permission.MODERATE}),
    Role.ADMIN: frozenset(Permission),
}


@dataclass(frozen=True)
class Principal:
    """An authenticated credential. ``name`` is safe to log; the key is not kept.

    A token (docs/api.md §12) authenticates as the principal of the key that
    minted it, with ``via_token`` set, the ``reader`` role and its boards in
    ``board_ids`` (None: every board); sharing the name, it shares that key's
    rate-limit bucket.
    """

    name: str
    role: Role
    rate_per_s: float | None = None
    burst: float | None = None
    via_token: bool = False
    board_ids: frozenset[str] | None = None
    expires_ms: int | None = None  # a token's expiry (epoch ms): a live stream ends there

    def may(self, permission: Permission) -> bool:
        return permission in GRANTS[self.role]


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    principal: Principal
    revoked: bool


class KeyFileError(ValueError):
    """The keys file is malformed; the message never contains a key."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class KeyStore:
    def __init__(self, entries: Iterable[dict]):
        self._entries: list[_Entry] = []
        names: set[str] = set()
        for i, raw in enumerate(entries):
            if not isinstance(raw, dict):
                raise KeyFileError(f"keys[{i}] must be an object")
            name = raw.get("name") or f"key-{i}"
            try:
                role = Role(raw.get("role"))
            except ValueError:
                raise KeyFileError(f"keys[{i}] ({name}): role must be one of {[r.value for r in Role]}") from None
            if "key" in raw and isinstance(raw["key"], str) and raw["key"]:
                digest = _digest(raw["key"])
            elif "key_sha256" in raw and isinstance(raw["key_sha256"], str):
                try:
                    digest = bytes.fromhex(raw["key_sha256"])
                except ValueError:
                    raise KeyFileError(f"keys[{i}] ({name}): key_sha256 must be hex") from None
                if len(digest) != 32:
                    raise KeyFileError(f"keys[{i}] ({name}): key_sha256 must be 64 hex digits")
            else:
                raise KeyFileError(f"keys[{i}] ({name}): needs 'key' or 'key_sha256'")
            rate = raw.get("rate_per_s")
            burst = raw.get("burst")
            for label, v in (("rate_per_s", rate), ("burst", burst)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
                    raise KeyFileError(f"keys[{i}] ({name}): {label} must be a positive number")
            if name in names:
                raise KeyFileError(f"keys[{i}]: duplicate name {name!r}")
            names.add(name)
            principal = Principal(name=name, role=role, rate_per_s=rate, burst=burst)
            self._entries.append(_Entry(digest, principal, bool(raw.get("revoked", False))))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "KeyStore":
        try:
            data = json.loads(Path(path).read_text("utf-8"))
        except OSError as e:
            raise KeyFileError(f"keys file {path}: cannot read it ({e.strerror or type(e).__name__})") from None
        except ValueError as e:
            raise KeyFileError(f"keys file {path}: not valid JSON ({e})") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise KeyFileError(f'keys file {path} must be {{"keys": [...]}}')
        try:
            return cls(data["keys"])
        except KeyFileError as e:
            raise KeyFileError(f"keys file {path}: {e}") from None

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal for an ``Authorization`` header value, or 401.

        O(number of keys): every entry is compared, match or not.
        """
        if not authorization:
            raise Unauthenticated("Missing Authorization: Bearer <key> header.")
        scheme, _, key = authorization.strip().partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise Unauthenticated("The Authorization header must be 'Bearer <key>'.")
        presented = _digest(key)
        found: _Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, presented) and found is None:
                found = entry
        if found is None or found.revoked:
            raise Unauthenticated("Unknown or revoked key.")
        return found.principal

    def named(self, name: str) -> Principal | None:
        """The principal of the unrevoked key called ``name``, or None. O(number of keys)."""
        for entry in self._entries:
            if entry.principal.name == name:
                return None if entry.revoked else entry.principal
        return None

    @staticmethod
    def authorize(principal: Principal, permission: Permission) -> None:
        if not principal.may(permission):
            raise Forbidden(f"The {principal.role.value} role may not do this ({permission.value} needed).")


SEEN_TOKENS = 4096  # verified tokens remembered by Credentials


def token_accepted(permission: Permission | None, method: str) -> bool:
    """Whether a token (docs/api.md §12) may call a route: the GET routes open to a reader."""
    return permission is not None and permission in GRANTS[Role.READER] and method in ("GET", "HEAD")


def _access_token(query_string: bytes) -> str | None:
    """``?access_token=`` of a raw query string, or None when absent. O(len(query))."""
    if b"access_token" not in query_string:  # the common request: one bytes search
        return None
    found = [v for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True) if k == "access_token"]
    if not found:
        return None
    if len(found) > 1:
        raise Unauthenticated("Give ?access_token= once.")
    return found[0]


class Credentials:
    """The one door from a request's credential to a :class:`Principal` and a verdict.

    A credential is a key (``Authorization: Bearer <key>``, §2) or a token
    from ``POST /v1/tokens`` (§12), in that header or in ``?access_token=``.
    :mod:`gateway.guard` (FastAPI routes) and :mod:`gateway.hot` (the lean
    dispatcher) both call :meth:`authenticate` then :meth:`authorize`. A
    request with neither ``access_token`` in its query nor a token-shaped
    bearer costs one bytes search more than the key check alone.
    """

    def __init__(self, keys: KeyStore, signer: TokenSigner, wall_clock: Callable[[], float] = time.time):
        self.keys = keys
        self.signer = signer
        self._clock = wall_clock
        self._seen: dict[str, tuple[Principal, int]] = {}  # verified token -> (principal, expires_ms)

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def authenticate(self, authorization: str | None, query_string: bytes = b"") -> Principal:
        """The principal of the request, or 401. ``?access_token=`` only ever takes a
        token (a key there is 401: long-lived keys never go in URLs), and not
        together with an ``Authorization`` header."""
        in_url = _access_token(query_string) if query_string and b"access_token" in query_string else None
        if in_url is not None:
            if authorization:
                raise Unauthenticated("Send one credential: an Authorization header or ?access_token=, not both.")
            if not looks_like_token(in_url):
                raise Unauthenticated("?access_token= takes a token from POST /v1/tokens, never a key "
                                      "(keys do not go in URLs).")
            return self._token(in_url)
        if authorization and TOKEN_PREFIX in authorization:  # a plain key skips the parsing below
            scheme, _, bearer = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and looks_like_token(bearer.strip()):
                try:
                    return self._token(bearer.strip())
                except Unauthenticated:
                    try:  # a configured key may begin like a token: then it is that key
                        return self.keys.authenticate(authorization)
                    except Unauthenticated:
                        pass
                    raise
        return self.keys.authenticate(authorization)

    def _token(self, token: str) -> Principal:
        """O(1) for a token seen before (the keys never change while the process runs),
        else a signature check (~10 µs) and a key lookup; the expiry is checked every time."""
        now = self.now_ms()
        hit = self._seen.get(token)
        if hit is not None and now < hit[1]:
            return hit[0]
        claims = self.signer.verify(token, now)
        minter = self.keys.named(claims.key_name)
        if minter is None:
            raise Unauthenticated("The key that minted this token is revoked or no longer configured.")
        boards = None if claims.board_ids is None else frozenset(claims.board_ids)
        principal = Principal(minter.name, Role.READER, minter.rate_per_s, minter.burst, via_token=True,
                              board_ids=boards, expires_ms=claims.expires_ms)
        if len(self._seen) >= SEEN_TOKENS:
            self._seen.clear()  # bounded memory; the busy tokens come straight back
        self._seen[token] = (principal, claims.expires_ms)
        return principal

    @staticmethod
    def authorize(principal: Principal, permission: Permission, method: str, board_id: str | None) -> None:
        """403 unless the role grants ``permission``; a token also only reads
        (GET), and only its own boards."""
        if not principal.may(permission):
            raise Forbidden(f"The {principal.role.value} role may not do this ({permission.value} needed).")
        if principal.via_token:
            if not token_accepted(permission, method):
                raise Forbidden("A token only reads: it is accepted on the GET routes open to a reader.")
            if board_id is not None and principal.board_ids is not None and board_id not in principal.board_ids:
                raise Forbidden("This token is not valid for this board.")

    def mint(self, principal: Principal, board_ids: tuple[str, ...] | None, ttl_s: int) -> tuple[str, int]:
        """A token for ``board_ids`` (None: every board) living ``ttl_s`` seconds,
        and its expiry in epoch ms. A token cannot mint tokens."""
        if principal.via_token:
            raise Forbidden("A token cannot mint tokens; use a key.")
        expires_ms = self.now_ms() + int(ttl_s) * 1000
        return self.signer.mint(principal.name, board_ids, expires_ms), expires_ms


def ensure_keys_file(data_dir: str | os.PathLike) -> tuple[Path, bool]:
    """Path of ``<data_dir>/keys.json``, creating it (mode 0600) on first use.

    Returns (path, created). A new file holds one random key per role,
    named after the role.
    """
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "keys.json"
    if path.exists():
        return path, False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "wb") as f:
        f.write(new_keys_document())
    os.chmod(path, 0o600)
    return path, True


def new_keys_document() -> bytes:
    """A keys.json with one random key per role, named after the role (docs/api.md §2)."""
    doc = {"keys": [{"name": r.value, "role": r.value, "key": secrets.token_urlsafe(32)} for r in Role]}
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def load_keystore(keys: tuple[dict, ...] | None, keys_file: str | None, data_dir: str | None,
                  log_url: str | None = None) -> tuple[KeyStore, Path | None]:
    """Resolve credentials: inline entries, else ``--keys``, else the data dir's keys.json. With a
    database log (``log_url``), that keys.json is the log's, shared by every node and written into the
    data dir too (docs/api.md §19, :func:`engine.log.shared_settings.keys_file`)."""
    if keys is not None:
        return KeyStore(keys), None
    if keys_file:
        return KeyStore.from_file(keys_file), Path(keys_file)
    if data_dir is None:
        raise KeyFileError("no keys: pass --keys, inline keys or a data dir for keys.json")
    if log_url is not None:
        from engine.log import shared_settings  # noqa: PLC0415 - the log layer only for a database log
        from engine.log.places import is_database  # noqa: PLC0415

        if is_database(log_url):
            path = shared_settings.keys_file(log_url, data_dir, new_keys_document, KeyStore.from_file)
            return KeyStore.from_file(path), path
    path, _ = ensure_keys_file(data_dir)
    return KeyStore.from_file(path), path
