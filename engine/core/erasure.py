"""Erasure of a player (docs/api.md §17): pseudonyms, keyed hashes, the erasure table, the log rewrite. Pure.

An erasure is decided and logged as an ``X`` record (:class:`engine.core.records.ErasureRecord`):
from its log position the router and every shard actor forget the player (the one fold, live and in
replay alike). Forgetting on disk comes after, in the background (:mod:`engine.runtime.erasure`):
every log record *before* the ``X`` record is rewritten at the same offset with the player's id and
their events' ids replaced by pseudonyms (:class:`Pseudonymizer`), and the ``X`` record itself loses
the player id and the key the pseudonyms were derived from. A replay of the rewritten log builds the
pseudonym's rows and the ``X`` record removes them, exactly as the live fold removed the player's, so
every other row, version and checksum is the same; and nothing left links the pseudonym to the player
once the key is gone.

Pseudonyms are made of control characters, which no player or event id may contain (docs/api.md
§4), so they never collide with a real id. A player's event ids keep their order among themselves
(the ``latest`` policy breaks a full timestamp tie on the event id), and metadata is replaced by a
placeholder per distinct value (so "same metadata" stays the same: a row whose only change is its
metadata still steps the version), so a replay takes the same decisions it took live.

What the router keeps of an erased player's events is a keyed hash (blake2b with the data
directory's secret, 96 bits) of each event id with the 32-bit fold of its content fingerprint, so a
redelivery is still ``DUPLICATE_IGNORED`` (or ``REJECTED_EVENT_ID_CONFLICT``) and never brings the
data back; without the secret the hashes link nothing to the ids.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple, Sequence

import numpy as np

from engine.core import records as R
from engine.core.dedup import content_fingerprint32

#: The first character of every pseudonym (a control character: never in a real id).
MARK = "\x01"
_ALPHABET = 30  # pseudonym characters: chr(2) .. chr(31)


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _chars(digest: bytes, n: int) -> str:
    v = int.from_bytes(digest, "little")
    out = []
    for _ in range(n):
        v, d = divmod(v, _ALPHABET)
        out.append(chr(2 + d))
    return "".join(out)


def _ordered(i: int, width: int) -> str:
    """``i`` in base 30 control characters, fixed width: the order of the ints is the order of the strings."""
    out = []
    for _ in range(width):
        i, d = divmod(i, _ALPHABET)
        out.append(chr(2 + d))
    return "".join(reversed(out))


def is_pseudonym(text: str) -> bool:
    return text.startswith(MARK)


def player_pseudonym(key: bytes) -> str:
    """The pseudonym an erasure's player id becomes in the rewritten log (16 characters)."""
    return MARK + _chars(hashlib.blake2b(b"player", key=key, digest_size=16).digest(), 15)


def keyed_words(secret: bytes, board_id: str, event_ids: Sequence[str]) -> np.ndarray:
    """The keyed 96-bit hash of each event id on ``board_id`` as (n, 3) uint32 words (a
    :class:`engine.core.dedup.DedupTable`'s identity words)."""
    out = np.empty((len(event_ids), 3), np.uint32)
    b = _utf8(board_id) + b"\x00"
    for i, e in enumerate(event_ids):
        out[i] = np.frombuffer(hashlib.blake2b(b + _utf8(e), key=secret, digest_size=12).digest(), np.uint32)
    return out


def subject_of(secret: bytes, player_id: str) -> str:
    """The keyed hash of a player id an erasure's audit keeps (32 hex digits)."""
    return hashlib.blake2b(b"subject\x00" + _utf8(player_id), key=secret, digest_size=16).hexdigest()


class ErasedEvents(NamedTuple):
    """One board's events of an erased player, as the ``X`` record lists them: their ids (pseudonyms
    once rewritten), keyed hashes (12 bytes each) and content folds (little-endian uint32)."""

    board_id: str
    event_ids: list
    keyed: bytes
    folds: bytes


def erased_events(secret: bytes, board_id: str, event_ids: Sequence[str], fps: Sequence[int]) -> ErasedEvents:
    """The :class:`ErasedEvents` of ``event_ids`` with content fingerprints ``fps`` (engine.core.dedup.fingerprint)."""
    folds = np.array([content_fingerprint32(int(f)) for f in fps], np.uint32)
    return ErasedEvents(board_id, list(event_ids), keyed_words(secret, board_id, event_ids).tobytes(),
                        folds.astype("<u4").tobytes())


def events_of(rec: R.ErasureRecord) -> list[ErasedEvents]:
    return [ErasedEvents(*b) for b in rec.boards]


def erasure_record(erasure_id: str, requested_at: int, subject: str, player_id: str, key: bytes,
                   events: Sequence[ErasedEvents]) -> R.ErasureRecord:
    return R.ErasureRecord(R.ERASE, erasure_id, requested_at, subject, player_id, player_pseudonym(key), key,
                           [list(e) for e in events])


# ----------------------------------------------------------------- the erasure table


class ErasureEntry(NamedTuple):
    """What the router keeps of one erasure (never the player id)."""

    erasure_id: str
    requested_at: int  # epoch ms
    offset: int  # the log offset of its X record
    subject: str
    completed_at: int | None = None  # epoch ms, from its Z record

    @property
    def pending(self) -> bool:
        return self.completed_at is None


class ErasureTable:
    """Every erasure the log holds, by id, in log order. ``to_state``/``from_state`` for router snapshots."""

    def __init__(self) -> None:
        self.entries: dict[str, ErasureEntry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def fold_erase(self, offset: int, rec: R.ErasureRecord) -> None:
        if rec.erasure_id not in self.entries:
            self.entries[rec.erasure_id] = ErasureEntry(rec.erasure_id, rec.requested_at, offset, rec.subject)

    def fold_complete(self, rec: R.ErasureDoneRecord) -> None:
        got = self.entries.get(rec.erasure_id)
        if got is not None and got.completed_at is None:
            self.entries[rec.erasure_id] = got._replace(completed_at=rec.completed_at)

    def get(self, erasure_id: str) -> ErasureEntry | None:
        return self.entries.get(erasure_id)

    def pending(self) -> list[ErasureEntry]:
        return [e for e in self.entries.values() if e.pending]

    def oldest_pending(self) -> ErasureEntry | None:
        got = self.pending()
        return min(got, key=lambda e: e.requested_at) if got else None

    def to_state(self) -> list:
        return [list(e) for e in self.entries.values()]

    @classmethod
    def from_state(cls, state: list) -> "ErasureTable":
        t = cls()
        for x in state:
            e = ErasureEntry(*x)
            t.entries[e.erasure_id] = e
        return t


# ----------------------------------------------------------------- the log rewrite


class _Subject:
    """One erasure's mapping (see :class:`LogEraser`)."""

    def __init__(self, offset: int, rec: R.ErasureRecord) -> None:
        assert rec.player_id is not None and rec.key is not None
        self.offset = offset
        self.rec = rec
        self.key = bytes(rec.key)
        self.found: dict[str, set] = {}
        for e in events_of(rec):
            self.found.setdefault(e.board_id, set()).update(e.event_ids)
        self.map: dict[str, dict[str, str]] = {}
        self.meta: dict[bytes, bytes] = {}

    def build(self) -> None:
        for board_id, ids in self.found.items():
            salt = _chars(hashlib.blake2b(_utf8(board_id), key=self.key, digest_size=16).digest(), 10)
            ordered = sorted(ids, key=_utf8)
            width = 1
            while _ALPHABET ** width < len(ordered):
                width += 1
            self.map[board_id] = {e: MARK + salt + _ordered(i, width) for i, e in enumerate(ordered)}

    def placeholder(self, meta: bytes) -> bytes:
        if not meta:
            return meta
        got = self.meta.get(meta)
        if got is None:
            got = self.meta[meta] = json.dumps({"erased": len(self.meta)}, separators=(",", ":")).encode()
        return got


class LogEraser:
    """Maps the records before erasures' ``X`` records to their rewritten form (docs/storage.md, "Erasure").

    Built from the ``X`` records as logged (with the player id and key, and their offsets); :meth:`collect`
    (a first pass over the log up to the last of them) finds each player's event ids board by board;
    :meth:`rewrite` then returns each record with the player id replaced by the pseudonym, the player's
    event ids (and the correction ids naming them) by order-keeping pseudonyms, and their metadata by a
    placeholder per distinct value, for records at or before that player's ``X`` (a later event with the
    same id is a new player's). The ``X`` record itself loses the player id and the key. A record it
    does not change is returned as is (``is``)."""

    def __init__(self, erasures: Sequence[tuple[int, R.ErasureRecord]]) -> None:
        self.subjects: dict[str, list[_Subject]] = {}
        self.by_id: dict[str, _Subject] = {}
        for offset, rec in sorted(erasures, key=lambda x: x[0]):
            sub = _Subject(offset, rec)
            self.subjects.setdefault(rec.player_id, []).append(sub)  # type: ignore[arg-type]
            self.by_id[rec.erasure_id] = sub
        self.players = frozenset(self.subjects)
        self.last = max((o for o, _ in erasures), default=-1)
        self._built = False

    def _subject(self, player_id: str, offset: int) -> _Subject | None:
        for sub in self.subjects.get(player_id, ()):
            if offset <= sub.offset:
                return sub
        return None

    # pass 1 ---------------------------------------------------------------
    def collect(self, offset: int, rec) -> None:
        """Note the erased players' event ids a record holds (call for every record up to :attr:`last`)."""
        rec = R.parse(rec)
        kind = rec.kind
        if kind in R.SCORE_BATCHES:
            if not self.players.isdisjoint(rec.player_ids):
                for e, p in zip(rec.event_ids, rec.player_ids):
                    if p in self.players and (sub := self._subject(p, offset)) is not None:
                        sub.found.setdefault(rec.board_id, set()).add(e)
        elif kind == R.GROUP:
            for part in R.group_parts(rec):
                self.collect(offset, part)
        elif kind == R.SCORE or kind in R.DECISIONS:
            if rec.player_id in self.players and (sub := self._subject(rec.player_id, offset)) is not None:
                sub.found.setdefault(rec.board_id, set()).add(rec.event_id)

    def _ready(self) -> None:
        if not self._built:
            for subs in self.subjects.values():
                for sub in subs:
                    sub.build()
            self._built = True

    # pass 2 ---------------------------------------------------------------
    def rewrite(self, offset: int, rec):
        """The record to keep at ``offset`` (``rec`` itself when unchanged)."""
        self._ready()
        p: Any = R.parse(rec)  # every kind's fields are read by name below, after its kind is known
        kind = p.kind
        if kind == R.ERASE:
            sub = self.by_id.get(p.erasure_id)
            if sub is not None and p.player_id is not None:
                boards = [[b[0], [sub.map.get(b[0], {}).get(e, e) for e in b[1]], b[2], b[3]] for b in p.boards]
                return list(p._replace(player_id=None, key=None, boards=boards))
            return rec
        if kind in R.SCORE_BATCHES:
            return self._scores(offset, p, rec)
        if kind == R.GROUP:
            parts = [self._scores(offset, R.parse(part), part) for part in p.parts]
            if all(a is b for a, b in zip(parts, p.parts)):
                return rec
            return list(p._replace(parts=parts))
        if kind == R.JOIN:
            sub = self._subject(p.player_id, offset) if p.player_id in self.players else None
            return rec if sub is None else list(p._replace(player_id=sub.rec.pseudonym))
        if kind in (R.ENTER, R.CARRY, R.SERIES_CARRY, R.AWARDS, R.JOINS):
            if self.players.isdisjoint(p.player_ids):
                return rec
            ids = []
            for x in p.player_ids:
                sub = self._subject(x, offset) if x in self.players else None
                ids.append(x if sub is None else sub.rec.pseudonym)
            return list(p._replace(player_ids=ids))
        if kind == R.SCORE or kind in R.DECISIONS:
            sub = self._subject(p.player_id, offset) if p.player_id in self.players else None
            if sub is None:
                return rec
            out = p._replace(player_id=sub.rec.pseudonym,
                             event_id=sub.map.get(p.board_id, {}).get(p.event_id, p.event_id))
            if kind in (R.DECIDE_META, R.DECIDE_SUBS):
                out = out._replace(metadata=sub.placeholder(bytes(p.metadata)))
            return list(out)
        if kind in (R.INVALIDATE, R.DEAD_LETTER):
            return self._by_event(offset, p, rec)
        return rec

    def _by_event(self, offset: int, p, rec):
        """An I or L record naming an erased player's event (found in any of the subjects' maps)."""
        if not isinstance(p.board_id, str) or p.event_id is None:
            return rec
        for subs in self.subjects.values():
            for sub in subs:
                new = sub.map.get(p.board_id, {}).get(p.event_id)
                if new is None or offset > sub.offset:
                    continue
                if p.kind == R.INVALIDATE:
                    cid = p.correction_id
                    prefix = f"correction:{p.event_id}:"
                    if cid.startswith(prefix):
                        cid = f"correction:{new}:" + cid[len(prefix):]
                    return list(p._replace(event_id=new, correction_id=cid))
                err = p.error.replace(p.event_id, new).replace(sub.rec.player_id, sub.rec.pseudonym)
                return list(p._replace(event_id=new, error=err))
        return rec

    def _scores(self, offset: int, p, rec):
        if self.players.isdisjoint(p.player_ids):
            return rec
        pids = list(p.player_ids)
        eids = list(p.event_ids)
        rows = []
        for i, x in enumerate(pids):
            sub = self._subject(x, offset) if x in self.players else None
            if sub is not None:
                rows.append((i, sub))
                pids[i] = sub.rec.pseudonym
                eids[i] = sub.map.get(p.board_id, {}).get(eids[i], eids[i])
        if not rows:
            return rec
        out = p._replace(player_ids=pids, event_ids=eids)
        if p.kind in (R.SCORES_META, R.SCORES_SUBS) and len(p.meta_offsets):
            offs = np.frombuffer(p.meta_offsets, "<i8")
            meta = bytes(p.meta)
            pieces = [meta[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
            for i, sub in rows:
                pieces[i] = sub.placeholder(pieces[i])
            new_offs = np.zeros(len(pieces) + 1, "<i8")
            new_offs[1:] = np.cumsum([len(x) for x in pieces])
            out = out._replace(meta=b"".join(pieces), meta_offsets=new_offs.tobytes())
        return list(out)
