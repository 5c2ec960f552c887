"""Paging a /changes snapshot while writes arrive, for any EngineClient
(LocalService in tests/engine, ClusterEngine in tests/cluster), checked
against the brute-force oracle at the snapshot's version."""

from __future__ import annotations

import random

from engine.core.model import BoardSpec, Invalidation, Policy, ScoreEvent
from tests.engine import oracle

POLICY = Policy.BEST_SCORE


class Writer:
    """Submits score events (new players, improvements, ties) and a few
    invalidations, remembering every acknowledged version so the board at
    any version can be recomputed by the oracle."""

    def __init__(self, engine, board: str, seed: int):
        self.engine, self.board = engine, board
        self.rnd = random.Random(seed)
        self.acked: list[tuple[int, ScoreEvent]] = []  # (acknowledged version, event)
        self.invalidated: list[tuple[int, str]] = []
        self.players = 0
        self.n = 0

    def _event(self, player: str) -> ScoreEvent:
        self.n += 1
        t = self.rnd.randrange(1_000)  # few distinct (value, achieved_at): many ties on the tie-breaks
        return ScoreEvent(self.board, f"e{self.n}", player, self.rnd.randrange(2_000), t, t)

    async def load(self, players: int, batch: int = 5_000) -> None:
        for start in range(0, players, batch):
            await self.submit([self._event(f"p{i}") for i in range(start, min(players, start + batch))])
        self.players = players

    async def submit(self, events: list[ScoreEvent]) -> None:
        results = await self.engine.submit(events)
        self.acked.extend((r.version, ev) for r, ev in zip(results, events, strict=True))

    async def step(self, events: int = 400) -> None:
        """New players, existing players moving up (rows that jump across
        page boundaries), and one invalidation."""
        batch = []
        for _ in range(events):
            if self.rnd.random() < 0.3:
                batch.append(self._event(f"p{self.players}"))
                self.players += 1
            else:
                ev = self._event(f"p{self.rnd.randrange(self.players)}")
                batch.append(ev._replace(value=ev.value + self.rnd.randrange(3_000)))
        await self.submit(batch)
        victim = self.acked[self.rnd.randrange(len(self.acked))][1].event_id
        r = await self.engine.invalidate(Invalidation(self.board, victim))
        self.invalidated.append((r.version, victim))

    def ranking_at(self, version: int) -> list[tuple[str, int, int]]:
        """(player, value, achieved_at) in rank order at ``version``."""
        events = [ev for v, ev in self.acked if v <= version]
        invalid = {eid for v, eid in self.invalidated if v <= version}
        rows = oracle.final_rows(POLICY, events, invalid)
        return [(pid, rows[pid][0], rows[pid][1]) for pid in oracle.ranking(POLICY, rows)]


async def open_board(engine, board: str, shards: int = 3) -> None:
    await engine.create_board(BoardSpec(board, POLICY, shards=shards))


async def page_while_writing(engine, writer: Writer, since: int, limit: int):
    """Follow a snapshot's cursors from page 1, one writer step before every
    later page. Returns (version, entries, pages)."""
    first = await engine.changes(writer.board, since, limit)
    assert first.kind == "snapshot", first.kind
    assert len(first.entries) <= limit
    entries, cursor, pages = list(first.entries), first.next_cursor, 1
    while cursor is not None:
        await writer.step()
        page = await engine.changes(writer.board, since, limit, cursor)
        assert page.kind == "snapshot" and page.version == first.version
        assert 0 < len(page.entries) <= limit
        entries.extend(page.entries)
        cursor, pages = page.next_cursor, pages + 1
    return first.version, entries, pages


def check_snapshot(writer: Writer, version: int, entries) -> None:
    """Every ranked row of ``version`` exactly once, ranks 1..N, equal to the oracle."""
    ids = [e.player_id for e in entries]
    assert len(set(ids)) == len(ids), "a row appeared twice"
    assert [e.rank for e in entries] == list(range(1, len(entries) + 1))
    expected = writer.ranking_at(version)
    assert len(entries) == len(expected)
    assert [(e.player_id, e.value, e.achieved_at) for e in entries] == expected
