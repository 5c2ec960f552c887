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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from engine.errors import Forbidden, Unauthenticated


class Role(str, enum.Enum):
    READER = "reader"
    GAME_SERVER = "game_server"
    MODERATOR = "moderator"
    ADMIN = "admin"


class Permission(str, enum.Enum):
    """What a route needs; :data:`GRANTS` is the docs/api.md §2 table as data."""

    READ = "read"  # every GET except quarantine and history (+ ranked-subset)
    SUBMIT = "submit"  # POST /v1/events
    MODERATE = "moderate"  # quarantine list/decisions, history, invalidations
    ADMIN = "admin"  # board creation, state changes, checksum


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.GAME_SERVER: frozenset({Permission.READ, Permission.SUBMIT}),
    Role.MODERATOR: frozenset({Permission.READ, Permission.MODERATE}),
    Role.ADMIN: frozenset(Permission),
}


@dataclass(frozen=True)
class Principal:
    """An authenticated credential. ``name`` is safe to log; the key is not kept."""

    name: str
    role: Role
    rate_per_s: float | None = None
    burst: float | None = None

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

    @staticmethod
    def authorize(principal: Principal, permission: Permission) -> None:
        if not principal.may(permission):
            raise Forbidden(f"The {principal.role.value} role may not do this ({permission.value} needed).")


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
    doc = {"keys": [{"name": r.value, "role": r.value, "key": secrets.token_urlsafe(32)} for r in Role]}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.chmod(path, 0o600)
    return path, True


def load_keystore(keys: tuple[dict, ...] | None, keys_file: str | None, data_dir: str | None) -> tuple[KeyStore, Path | None]:
    """Resolve credentials: inline entries, else ``--keys``, else the data dir's keys.json."""
    if keys is not None:
        return KeyStore(keys), None
    if keys_file:
        return KeyStore.from_file(keys_file), Path(keys_file)
    if data_dir is None:
        raise KeyFileError("no keys: pass --keys, inline keys or a data dir for keys.json")
    path, _ = ensure_keys_file(data_dir)
    return KeyStore.from_file(path), path
