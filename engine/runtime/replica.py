"""``ReadReplica``: a gateway worker's hot reads, straight to the shard actors.

With ``flowrank serve --workers N`` the engine host sequences every write;
reads need no sequencer. A worker answers the hot reads (top pages, exact
rank, around, ranked subsets) with a read fan-out of its own
(:class:`engine.router.reads.ReadFanOut` over a :class:`engine.router.control.BoardRegistry`
of the boards it learned) over the same shard actors: the router's read code,
the same merges, one parallel round per read, no hop through the host
(docs/http.md, "Several gateways"). It has no sequencer and no board control.
Everything else goes to the host.

Why the answers are the host's answers:

* **Cuts.** Every batch goes to every shard actor, and every shard answer
  carries the log offset it has applied; a fan-out whose answers carry
  different offsets is retried (``ReadFanOut.consistent``). So a replica's answer
  is a consistent cut even though its calls and the host's interleave.
* **Fresh.** The host acknowledges a write once the shards applied it, so a
  read that starts after an acknowledgement (through any gateway) sees it. A
  top page is served from a cached view only at the version a ``size`` round
  just read (one round, shared by every top read of that turn).
* **Cursors.** A page-1 view a replica builds is also given to the host
  before the page is answered, so a cursor from it pages on any gateway (a
  replica without the view asks the host).
* **Archives.** When a board is archived the host tells every gateway in its
  feed and drops the shards' rows only once each gateway has stopped reading
  them (:meth:`forget` waits for this replica's reads in flight); from then on
  the board's reads go to the host, which answers from the archive.
* **Boards** are learned from the host on first read (spec and placement);
  one the host does not know, or already archived, is the host's to answer.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from engine.core import records as R
from engine.core import wire as W
from engine.router.registry import BoardRegistry, RouterConfig
from engine.router.reads import ReadFanOut
from engine.core.model import BoardState, Page, PlayerView
from engine.runtime.version_table import VersionTable

#: ``lookup(board_id)`` -> ``(board record, state, version table place)`` or None (unknown board).
BoardLookup = Callable[[str], Awaitable[tuple | None]]
#: ``share_view(board_id, version, entries, complete)``: the host keeps a page-1 view too.
ShareView = Callable[[str, int, list, bool], Awaitable[None]]


class ReadReplica:
    def __init__(self, transport, lookup: BoardLookup, share_view: ShareView, config: RouterConfig | None = None):
        self.fanout = ReadFanOut(transport, BoardRegistry(transport.n, config))  # reads only
        # no rank mirrors here: a replica never sees a board's changes (no delta ring to follow);
        # its exact ranks ask the shard actors (docs/http.md "Reads")
        self.fanout.mirroring = False
        self.lookup = lookup
        self.share_view = share_view
        self._host_only: set[str] = set()  # archived, or unknown at the last lookup
        self._learning: dict[str, asyncio.Future] = {}
        self._shared: dict[tuple[str, int], asyncio.Future] = {}
        self._tables: dict[str, VersionTable | None] = {}  # path -> the host's version table, if on this machine
        self._slot: dict[str, tuple[VersionTable, int]] = {}  # board -> where its version is read
        self._newest: dict[str, int] = {}  # board -> version of the newest view built here
        self.reads = 0  # reads answered here (tests, metrics)
        self.version_rounds = 0  # top reads that asked the shards for the version

    async def serves(self, board_id: str) -> bool:
        """True when this replica answers ``board_id``'s hot reads (learning it from the host first)."""
        if board_id in self.fanout.boards:
            return True
        if board_id in self._host_only:
            return False
        fut = self._learning.get(board_id)
        if fut is None:
            fut = self._learning[board_id] = asyncio.ensure_future(self._learn(board_id))
            fut.add_done_callback(lambda _: self._learning.pop(board_id, None))
        return await asyncio.shield(fut)

    def counts_attempts(self, board_id: str) -> bool:
        """The board's player views carry ``attempts`` (docs/api.md §16): the
        host's router counts them, so its player reads are the host's to answer."""
        ctl = self.fanout.boards.get(board_id)
        return ctl is not None and ctl.spec.entry is not None and ctl.spec.entry.max_attempts is not None

    async def _learn(self, board_id: str) -> bool:
        got = await self.lookup(board_id)
        if got is None:
            return False  # unknown now; it may be created later: ask again next time
        rec, state, where = got
        if BoardState(state) is BoardState.ARCHIVED or R.parse(rec).kind == R.SERIES:
            # archived, or a series (its reads answer from the instance of the host's current window)
            self._host_only.add(board_id)
            return False
        if board_id not in self._host_only:
            self.fanout.boards.setdefault(board_id, self.fanout.registry.new_ctl(R.spec_of(rec)))
            if where is not None:
                path, token, slot = where
                if path not in self._tables:
                    self._tables[path] = VersionTable.open(path, token)
                table = self._tables[path]
                if table is not None and table.token == token:
                    self._slot[board_id] = (table, slot)
        return board_id in self.fanout.boards

    async def forget(self, board_id: str) -> None:
        """``board_id`` is archived: its reads go to the host from now on; returns
        once no read of this replica still asks the shards for its rows."""
        self._host_only.add(board_id)
        ctl = self.fanout.boards.pop(board_id, None)
        while ctl is not None and ctl.shard_reads:
            await asyncio.sleep(0.002)

    # ------------------------------------------------------------ the hot reads

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                  ties: bool = False) -> Page | None:
        """A top page, or None when the host must answer (a cursor whose view is not here)."""
        r = self.fanout
        ctl = r.registry.ctl(board_id)
        if at_version is not None:
            view = r.view(board_id, at_version)
            if view is None or not (offset + limit <= len(view) or view.complete):
                return None
        else:
            # versions only grow: concurrent size rounds may finish out of order, keep the newest
            ctl.version = max(ctl.version, await self._current_version(ctl))
            newest = self._newest.get(board_id)
            if newest is not None and newest > ctl.version and r.view(board_id, newest) is not None:
                ctl.version = newest  # a view built at a cut the version table has not reached yet: fresher still
        page = await r.top(board_id, offset, limit, at_version, ties)
        if (board_id, page.version) in r.views:  # a page of a view: the host has it before the page is answered
            if page.version > self._newest.get(board_id, -1):
                self._newest[board_id] = page.version
            await self._share((board_id, page.version))
        self.reads += 1
        return page

    async def _share(self, key: tuple[str, int]) -> None:
        fut = self._shared.get(key)
        if fut is None or (fut.done() and fut.exception() is not None):
            entries = self.fanout.views[key][1]
            fut = self._shared[key] = asyncio.ensure_future(
                self.share_view(key[0], key[1], list(entries), entries.complete))
            if len(self._shared) > 4 * self.fanout.cfg.max_views:
                for k in [k for k in self._shared if k not in self.fanout.views and self._shared[k].done()]:
                    del self._shared[k]
        await asyncio.shield(fut)

    async def _current_version(self, ctl) -> int:
        """The board's version as of now: from the host's version table on this
        machine (no call), else one ``size`` round to the shards."""
        board_id = ctl.spec.board_id
        at = self._slot.get(board_id)
        if at is not None:
            return at[0].read(at[1])
        self.version_rounds += 1

        async def attempt():
            answers = await self.fanout.fan(ctl, lambda a: W.Size(W.SIZE, board_id))
            return {o for o, _ in answers.values()}, sum(ans.version for _, ans in answers.values())

        return await self.fanout.consistent(attempt, ctl)

    async def player(self, board_id: str, player_id: str, ties: bool = False) -> PlayerView:
        view = await self.fanout.player(board_id, player_id, ties)
        self.reads += 1
        return view

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False) -> Page:
        page = await self.fanout.around(board_id, player_id, radius, ties)
        self.reads += 1
        return page

    async def ranked_subset(self, board_id: str, player_ids, ties: bool = False) -> Page:
        page = await self.fanout.ranked_subset(board_id, player_ids, ties)
        self.reads += 1
        return page
