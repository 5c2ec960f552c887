"""Erasure requests and their status (docs/api.md §17): the router's part of forgetting a player.

:meth:`Erasures.erase_player` finds what is held about the player (the read fan-out's ``player_data``),
asks each board's shard actors for the ids and content fingerprints of the player's events (``EFPS``),
and logs one ``X`` record (:mod:`engine.core.erasure`) through the sequencer: from its log position the
one fold forgets the player everywhere (:meth:`engine.router.registry.BoardRegistry.apply`, the shard
actors' ``ShardCore._erase``). An ARCHIVED board's archive is rewritten without them before the answer
(the shard actors no longer hold its rows). The rest of the forgetting on disk (log segments, snapshots,
journal runs, the webhook outbox) is the background job of :mod:`engine.runtime.erasure`, which logs a
``Z`` record when it is done.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from concurrent.futures import Executor
from typing import Callable, Protocol

import numpy as np

from engine.core import records as R
from engine.core import wire as W
from engine.core.dedup import fingerprint
from engine.core.erasure import erased_events, erasure_record, subject_of
from engine.core.errors import ErasureNotFound
from engine.core.model import ErasureAccepted, ErasureStatus, PlayerData
from engine.core.placement import part_of
from engine.log.archives import ArchiveStore, FileArchiveStore, erase_file
from engine.router.registry import BoardRegistry


class ErasureWrites(Protocol):
    async def erase(self, rec: R.ErasureRecord) -> ErasureAccepted: ...


class ErasureReads(Protocol):
    reads: object

    async def player_data(self, player_id: str) -> PlayerData: ...


class Erasures:
    """``erase_player`` and ``erasure`` of the engine's API; ``kick`` wakes the disk job."""

    def __init__(self, registry: BoardRegistry, sequencer: ErasureWrites, fanout: ErasureReads,
                 archives: Callable[[], ArchiveStore], wall_clock: Callable[[], int],
                 helper: Callable[[], Executor]):
        self.registry = registry
        self.sequencer = sequencer
        self.fanout = fanout
        self.archives = archives
        self.wall_clock = wall_clock
        self.helper = helper  # blocking: the (started) process big archives are rewritten in
        self.kick: Callable[[], None] = lambda: None  # set by the runtime: wake the job that forgets on disk
        self._lock = asyncio.Lock()  # archive rewrites, one at a time
        self._archive_wait: dict[str, set] = {}  # board -> players whose archive rewrite has not started

    async def erase_player(self, player_id: str) -> ErasureAccepted:
        """Erase a player (docs/api.md §17); PlayerNotFound when nothing is held about them. Durable (and
        applied by every shard actor) before it returns."""
        self.kick()  # a request in flight holds the job back (a burst shares one run), as its end does
        data = await self.fanout.player_data(player_id)  # raises PlayerNotFound
        secret = self.registry.cfg.erasure_secret
        events = []
        for b in data.boards:
            ids, fps = await self._fingerprints(b.board_id, player_id)
            for h in b.held:
                if h.event_id not in ids:
                    ids.append(h.event_id)
                    fps.append(fingerprint(h.player_id, h.value, h.achieved_at, h.submitted_at, h.metadata,
                                           h.subscores))
            events.append(erased_events(secret, b.board_id, ids, fps))
        rec = erasure_record(uuid.uuid4().hex, self.wall_clock(), subject_of(secret, player_id), player_id,
                             os.urandom(16), events)
        accepted = await self.sequencer.erase(rec)
        await self._rewrite_archives([b.board_id for b in data.boards], [player_id])
        self.kick()
        return accepted

    async def _fingerprints(self, board_id: str, player_id: str) -> tuple[list, list]:
        """The player's event ids on a board and their content fingerprints, from the shard actor owning
        their partition (none on an ARCHIVED board: its archive holds no submitted_at; a redelivery there
        is judged by the dedup window as before)."""
        ctl = self.registry.boards.get(board_id)
        if ctl is None or ctl.archive is not None:
            return [], []
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        _, got = await self.fanout.reads.ask(owner, W.Hist(W.EFPS, board_id, player_id))  # type: ignore[attr-defined]
        ids, fps = got.value
        return list(ids), np.frombuffer(fps, "<u8").tolist()

    async def _rewrite_archives(self, board_ids: list, player_ids: list) -> None:
        """Rewrite the archive of each ARCHIVED board among ``board_ids`` without the players (ranks close
        up, one version step per ranked row). Idempotent: an archive without them is left as it is. Group
        commit: the players of requests that arrive while one rewrite runs go into the next one together,
        so a burst of erasures rewrites each archive about twice, not once per player."""
        mine = [b for b in board_ids if (c := self.registry.boards.get(b)) is not None and c.archive is not None]
        for b in mine:
            self._archive_wait.setdefault(b, set()).update(player_ids)
        async with self._lock:
            for board_id in mine:
                players = self._archive_wait.pop(board_id, set())
                ctl = self.registry.boards.get(board_id)
                if not players or ctl is None or ctl.archive is None:
                    continue
                store = self.archives()
                if isinstance(store, FileArchiveStore) and ctl.archive.info.rows >= self.registry.cfg.awards_process_rows:
                    # a big archive is rewritten in the helper process: its CPU and GIL stay out of this one
                    helper = await asyncio.to_thread(self.helper)
                    changed = await asyncio.get_running_loop().run_in_executor(
                        helper, erase_file, str(store.dir), board_id, sorted(players))
                    if changed:
                        ctl.archive = await asyncio.to_thread(store.open, board_id)
                    continue
                got = await asyncio.to_thread(store.erase, board_id, sorted(players))
                if got is not None:
                    ctl.archive = got[0]

    async def rewrite_archives(self, player_ids: list) -> None:
        """The job's step: every archive without the players."""
        await self._rewrite_archives([b for b, c in self.registry.boards.items() if c.archive is not None],
                                     player_ids)

    async def erasure(self, erasure_id: str) -> ErasureStatus:
        """An erasure's status (docs/api.md §17); ErasureNotFound for an unknown id."""
        got = self.registry.erasures.get(erasure_id)
        if got is None:
            raise ErasureNotFound(f"No erasure {erasure_id!r}.", "erasure_id")
        return ErasureStatus(got.erasure_id, "pending" if got.pending else "complete", got.requested_at,
                             got.completed_at)

