"""Signed read-only tokens for browsers (docs/api.md §12).

A token is ``fr1.<payload>.<mac>``: the payload is compact JSON in base64url
(``{"k": minting key's name, "b": [board ids] | null, "e": expiry epoch ms}``)
and the mac is HMAC-SHA256 of the payload under a 32-byte secret. Nothing is
stored per token: the secret alone verifies every token, so tokens cost no
memory and survive a restart as long as the secret does. The secret lives in
``<data dir>/token_secret`` (mode 0600, created on first start); deleting that
file invalidates every token ever minted. With ``--log postgresql://…`` it lives
in the log's database instead, shared by every node (docs/api.md §19). Without a data directory a random
secret is drawn per process.

Pure apart from :func:`load_secret`: the clock comes in as ``now_ms``.

>>> s = TokenSigner(b"k" * 32)
>>> tok = s.mint("web", ("g:m:s:x",), expires_ms=2_000)
>>> s.verify(tok, now_ms=1_000)
TokenClaims(key_name='web', board_ids=('g:m:s:x',), expires_ms=2000)
>>> s.verify(tok, now_ms=2_000)
Traceback (most recent call last):
...
engine.core.errors.Unauthenticated: The token expired at 1970-01-01T00:00:02.000Z.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import Unauthenticated
from engine.core.timefmt import format_timestamp

PREFIX = "fr1."
SECRET_FILE = "token_secret"
_DOMAIN = b"flowrank token v1\x00"  # the mac covers this prefix too: the secret signs nothing else


@dataclass(frozen=True)
class TokenClaims:
    key_name: str  # the key that minted it: its role's rate limit and its revocation apply
    board_ids: tuple[str, ...] | None  # None: every board
    expires_ms: int


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def looks_like_token(credential: str) -> bool:
    return credential.startswith(PREFIX)


class TokenSigner:
    """Mints and verifies tokens under one secret; O(length of the token)."""

    def __init__(self, secret: bytes):
        if len(secret) < 32:
            raise ValueError("the token secret must be at least 32 bytes")
        self._secret = secret

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._secret, _DOMAIN + payload.encode("ascii"), hashlib.sha256).digest()

    def mint(self, key_name: str, board_ids: tuple[str, ...] | None, expires_ms: int) -> str:
        doc = {"k": key_name, "b": None if board_ids is None else list(board_ids), "e": int(expires_ms)}
        payload = _b64(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        return f"{PREFIX}{payload}.{_b64(self._mac(payload))}"

    def verify(self, token: str, now_ms: int) -> TokenClaims:
        """The claims of a genuine, unexpired token; otherwise 401 (:class:`Unauthenticated`)."""
        if not looks_like_token(token):
            raise Unauthenticated("Not a token from POST /v1/tokens.")
        payload, _, mac = token[len(PREFIX):].partition(".")
        try:
            presented = _unb64(mac)
            payload.encode("ascii")
        except (binascii.Error, ValueError, UnicodeError):
            raise Unauthenticated("The token is malformed.") from None
        if not payload or not hmac.compare_digest(self._mac(payload), presented):
            raise Unauthenticated("The token's signature does not match (forged, altered, or signed by a "
                                  "secret this server no longer has).")
        try:
            doc = json.loads(_unb64(payload))
            name, boards, expires = doc["k"], doc["b"], doc["e"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise Unauthenticated("The token is malformed.") from None
        if not isinstance(name, str) or not isinstance(expires, int) or not (
                boards is None or isinstance(boards, list) and all(isinstance(b, str) for b in boards)):
            raise Unauthenticated("The token is malformed.")
        if now_ms >= expires:
            raise Unauthenticated(f"The token expired at {format_timestamp(expires)}.")
        return TokenClaims(name, None if boards is None else tuple(boards), expires)


def load_secret(data_dir: str | os.PathLike | None, log_url: str | None = None) -> bytes:
    """The signing secret of ``<data_dir>/token_secret``, created (mode 0600) on
    first use; a fresh random one per process when there is no data directory.
    With a database log (``--log postgresql://…``): the log's, shared by every node
    (docs/api.md §19, :func:`engine.log.shared_settings.token_secret`)."""
    if log_url is not None:
        from engine.log import shared_settings  # noqa: PLC0415 - the log layer only for a database log
        from engine.log.places import is_database  # noqa: PLC0415

        if is_database(log_url):
            return shared_settings.token_secret(log_url, data_dir)
    if data_dir is None:
        return secrets.token_bytes(32)
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SECRET_FILE
    if not path.exists():
        # whole or absent, never half-written: write a private temp file, then link it into place
        # (a link fails if the name exists, so of two racing starts one secret wins, whole)
        tmp = directory / f".{SECRET_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            tmp.unlink(missing_ok=True)
    text = path.read_text("ascii").strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{path}: not a hex secret (delete it to make a new one; every token then dies)") from None
    if len(secret) < 32:
        raise ValueError(f"{path}: the secret is shorter than 32 bytes (delete it to make a new one)")
    return secret
