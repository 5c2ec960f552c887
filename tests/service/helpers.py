"""Shared helpers for the service-level recovery tests.

``Workload`` drives a LocalService through a deterministic mix of score
events (heavy ties, redeliveries, id conflicts), invalidations, a freeze and
quarantine decisions. ``state_of`` captures everything a reader can see of a
board (checksum, version, info, full top list, every player's view and
history, the quarantine) so two services can be compared exactly.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from dataclasses import dataclass, field

from engine.core.errors import FlowRankError, PlayerNotFound
from engine.core.model import (
    BoardSpec,
    BoardState,
    Invalidation,
    Outcome,
    Policy,
    QuarantineDecision,
    ScoreEvent,
)
from engine.runtime.local import LocalService

APPLIED = {Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED_NEW_BEST, Outcome.APPLIED, Outcome.APPLIED_NEW_BEST_TIME,
           Outcome.APPLIED_LATEST}

#: board id -> spec used by the recovery tests: every policy, 1 and 3 partitions,
#: one board with review holds.
SPECS = [
    BoardSpec("g:best:s1", Policy.BEST_SCORE, shards=3),
    BoardSpec("g:cum:s1", Policy.CUMULATIVE, shards=1, review_above=8),
    BoardSpec("g:fast:s1", Policy.FASTEST_TIME, shards=3, max_plausible_time_ms=9),
    BoardSpec("g:best1:s1", Policy.BEST_SCORE, shards=1),
    BoardSpec("g:latest:s1", Policy.LATEST, shards=3),
]


def run(coro):
    return asyncio.run(coro)


async def open_service(data_dir, n_shards=3, **kw) -> LocalService:
    kw.setdefault("snapshot_every_events", 10**9)
    kw.setdefault("snapshot_every_seconds", 10**9)
    kw.setdefault("journal_tail_rows", 8)  # nearly every journal row goes through the files on disk
    kw.setdefault("erasure_snapshot_wait_s", 0.0)  # an erasure's job snapshots at once (no periodic ones here)
    return await LocalService.open(data_dir=str(data_dir), n_shards=n_shards, **kw)


async def crash(svc: LocalService) -> None:
    """Abandon ``svc`` as a SIGKILL would: no drain, no final snapshot, no
    log close; only the lock is released so the same process can reopen."""
    tasks = [t for t in svc.router._tasks] + ([svc._snapshot_task] if svc._snapshot_task else [])
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for core in svc.cores:  # the kernel closes a killed process's files: its journals' here (writes nothing)
        core.close()
    if svc._lock_fd is not None:
        os.close(svc._lock_fd)
        svc._lock_fd = None


def drop_snapshots(data_dir) -> None:
    shutil.rmtree(os.path.join(str(data_dir), "snapshots"), ignore_errors=True)


def copy_dir(src, dst) -> None:
    shutil.copytree(str(src), str(dst), ignore=shutil.ignore_patterns("LOCK"))


@dataclass
class Workload:
    """A deterministic script of operations against the SPECS boards."""

    seed: int
    players: int = 12
    applied: dict = field(default_factory=dict)  # board -> [event ids that applied]
    sent: dict = field(default_factory=dict)  # board -> [events sent]
    counter: int = 0

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    async def create(self, svc, specs=SPECS):
        for spec in specs:
            await svc.create_board(spec)
            self.applied[spec.board_id] = []
            self.sent[spec.board_id] = []

    def event(self, board_id: str) -> ScoreEvent:
        rng = self.rng
        sent = self.sent[board_id]
        roll = rng.random()
        if sent and roll < 0.12:  # redelivery: same id, same content
            return rng.choice(sent)
        if sent and roll < 0.17:  # conflict: same id, other content
            old = rng.choice(sent)
            return ScoreEvent(board_id, old.event_id, old.player_id, old.value + 1, old.achieved_at, old.submitted_at)
        self.counter += 1
        t = rng.randrange(4)
        ev = ScoreEvent(board_id, f"e{self.counter}", f"p{rng.randrange(self.players)}", rng.randrange(-1, 10),
                        t, t + rng.randrange(2),
                        b'{"n":%d}' % self.counter if self.counter % 2 else b"")  # metadata on every other event
        sent.append(ev)
        return ev

    async def batch(self, svc, n: int, boards=None):
        boards = boards or list(self.sent)
        events = [self.event(self.rng.choice(boards)) for _ in range(n)]
        results = await svc.submit(events)
        for ev, res in zip(events, results):
            if res.outcome in APPLIED:
                self.applied[ev.board_id].append(ev.event_id)
        return events, results

    async def invalidate_some(self, svc, k: int):
        done = []
        for _ in range(k):
            board_id = self.rng.choice(list(self.applied))
            if not self.applied[board_id]:
                continue
            eid = self.rng.choice(self.applied[board_id])
            try:
                done.append(await svc.invalidate(Invalidation(board_id, eid, "cheat", "mod")))
            except FlowRankError:
                pass  # already invalidated rows are fine to retry
        return done

    async def decide_some(self, svc, k: int):
        done = []
        for board_id in list(self.sent):
            held = await svc.quarantine(board_id)
            for h in held[:k]:
                decision = "apply" if self.rng.random() < 0.6 else "reject"
                done.append(await svc.decide(QuarantineDecision(board_id, h.event_id, decision, "ok", "mod")))
        return done

    async def full(self, svc, rounds: int = 6, batch: int = 40, freeze_after: int = 3):
        """create + ``rounds`` of (batch, invalidations, decisions); freezes
        one board after ``freeze_after`` rounds."""
        await self.create(svc)
        for r in range(rounds):
            await self.round(svc, r, batch, freeze_after)

    async def round(self, svc, r: int, batch: int = 40, freeze_after: int = 3):
        await self.batch(svc, batch)
        await self.invalidate_some(svc, 3)
        await self.decide_some(svc, 2)
        if r == freeze_after:
            await svc.set_state("g:best1:s1", BoardState.FROZEN)


async def state_of(svc, board_ids=None) -> dict:
    """Everything a reader sees of each board, as plain comparable data."""
    out = {}
    for board_id in board_ids or sorted(svc.router.boards):
        info = await svc.board(board_id)
        page = await svc.top(board_id, 0, 10_000)
        players = sorted({f"p{i}" for i in range(64)})
        views, hist = {}, {}
        for pid in players:
            try:
                views[pid] = await svc.player(board_id, pid)
            except PlayerNotFound:
                pass  # no row (e.g. only invalid timings): the history may still hold events
            items = await svc.history(board_id, pid)
            if items:
                hist[pid] = items
        out[board_id] = {
            "checksum": await svc.checksum(board_id),
            "info": info,
            "top": page,
            "views": views,
            "history": hist,
            "quarantine": await svc.quarantine(board_id),
        }
    return out


def checksums(state: dict) -> dict:
    return {b: s["checksum"] for b, s in state.items()}


def track_appends(svc) -> list[int]:
    """Wrap the sequencer's log port (a LocalService or a ClusterEngine); returns
    ``[in flight now, most in flight at once]``, kept up to date."""
    port = svc.router.sequencer.log
    inner = port.append
    seen = [0, 0]  # in flight now, most at once

    async def append(payloads, at=None):
        seen[0] += 1
        seen[1] = max(seen[1], seen[0])
        try:
            return await inner(payloads, at)
        finally:
            seen[0] -= 1

    port.append = append
    return seen
