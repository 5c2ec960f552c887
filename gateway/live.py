"""Live top-N windows over Server-Sent Events (docs/api.md §9).

:class:`LiveHub` registers one commit listener with the engine. Subscribers
are grouped by ``(board_id, N)``; each group keeps its current window (the
top-N rows at ``group.version``). Commits are coalesced per group for
``window_s`` (default 50 ms); then the group fetches the new top-N once,
diffs it against its previous window and fans the same pre-serialised
changes out to every subscriber. Work per commit burst is therefore
O(groups × N), not O(subscribers × N); a group whose window did not change
sends nothing.

A delta's ``changes`` hold the rows that entered the window or changed
inside it, plus rows that left it *because they changed* (their new row,
e.g. ``INVALIDATED`` or a lower value). Rows merely pushed out are not sent:
a client that applies the changes, re-sorts by the board comparator and
truncates to N holds exactly the new window.

Every subscriber has a bounded queue. One that cannot keep up is skipped
forward: its queue is cleared and it gets a fresh snapshot instead, so memory
stays bounded whatever the client does.
"""

from __future__ import annotations

import asyncio
import orjson
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator, Sequence

from engine.core.errors import FlowRankError, Overloaded
from engine.core.model import Delta, RankedEntry, RowChange

from gateway import render

log = logging.getLogger("flowrank.gateway.live")

_CLOSE = None  # queue sentinel: end the stream


def sse(event: str, version: int, data: dict | str) -> str:
    """One SSE message. ``data`` is JSON on a single line."""
    payload = data if isinstance(data, str) else _dumps(data)
    return f"event: {event}\nid: {version}\ndata: {payload}\n\n"


def snapshot_message(version: int, entries: Sequence[RankedEntry]) -> str:
    return sse("snapshot", version, {"version": version, "entries": render.entries(entries)})


def delta_message(base_version: int, version: int, changes_json: str) -> str:
    return sse("delta", version, f'{{"base_version":{base_version},"version":{version},"changes":{changes_json}}}')


def _dumps(data) -> str:
    """Compact JSON text (orjson: the rows' metadata is a Fragment, see gateway.render)."""
    return orjson.dumps(data).decode()


def _active_change(e: RankedEntry) -> dict:
    out = {"player_id": e.player_id, "value": e.value, "achieved_at": render.format_timestamp(e.achieved_at),
           "status": "ACTIVE"}
    if e.metadata:
        out["metadata"] = orjson.Fragment(e.metadata)
    if e.subscores is not None:  # a board with subscores (docs/api.md §14)
        out["subscores"] = list(e.subscores)
    return out


def window_diff(old: dict[str, RankedEntry], new: Sequence[RankedEntry], changed: dict[str, RowChange]) -> list[dict]:
    """Changes that take a client from window ``old`` to window ``new``. O(N)."""
    out: list[dict] = []
    new_ids = set()
    for e in new:
        new_ids.add(e.player_id)
        prev = old.get(e.player_id)
        if (prev is None or prev.value != e.value or prev.achieved_at != e.achieved_at or prev.metadata != e.metadata
                or prev.subscores != e.subscores):
            out.append(_active_change(e))
    for pid in old:
        if pid not in new_ids and pid in changed:
            out.append(render.change(changed[pid]))
    return out


@dataclass(eq=False)
class Subscriber:
    group: "_Group"
    queue: asyncio.Queue
    version: int = -1  # the version the client holds after the last queued message
    closed: bool = False


@dataclass(eq=False)
class _Group:
    board_id: str
    n: int
    subs: set = field(default_factory=set)
    window: dict = field(default_factory=dict)  # player_id -> RankedEntry, in rank order
    entries: tuple = ()
    version: int = -1
    pending: dict = field(default_factory=dict)  # player_id -> latest RowChange since last flush
    resync: bool = False  # a version moved without row changes (a standby following its log): send a snapshot
    timer: asyncio.TimerHandle | None = None
    flushing: bool = False
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None
    reserved: int = 0


class LiveHub:
    def __init__(
        self,
        engine,
        window_s: float = 0.05,
        queue_size: int = 64,
        max_total: int = 10_000,
        max_per_board: int = 2_000,
        heartbeat_s: float = 15.0,
    ):
        self._engine = engine
        self.window_s = window_s
        self.queue_size = max(2, queue_size)
        self.max_total = max_total
        self.max_per_board = max_per_board
        self.heartbeat_s = heartbeat_s
        self._groups: dict[tuple[str, int], _Group] = {}
        self._by_board: dict[str, set[_Group]] = {}
        self._per_board: dict[str, int] = {}
        self._total = 0
        self._unsubscribe = None
        self._tasks: set[asyncio.Task] = set()
        self._closing = False
        self.flushes = 0  # groups flushed (for tests and metrics)

    # ---- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self._engine.subscribe(self._on_commit)

    def begin_shutdown(self) -> None:
        """End every stream now (called on SIGTERM so the server can drain)."""
        self._closing = True
        for g in list(self._groups.values()):
            for sub in list(g.subs):
                self._push_close(sub)

    async def close(self) -> None:
        self.begin_shutdown()
        if self._unsubscribe is not None:
            try:
                self._unsubscribe()
            finally:
                self._unsubscribe = None
        for g in self._groups.values():
            if g.timer is not None:
                g.timer.cancel()
        for t in list(self._tasks):
            t.cancel()

    @property
    def subscriber_count(self) -> int:
        return self._total

    @property
    def group_count(self) -> int:
        return len(self._groups)

    # ---- subscribing -------------------------------------------------------------

    async def subscribe(self, board_id: str, n: int, since_version: int | None = None) -> Subscriber:
        """Join the (board, N) group; the first queued message brings the client to the window.

        Raises Overloaded past the caps, BoardNotFound (from the engine) for an unknown board.
        """
        if self._closing:
            raise Overloaded("The server is shutting down.", retry_after=1)
        if self._total >= self.max_total:
            raise Overloaded("Too many live subscribers on this server.", retry_after=5)
        if self._per_board.get(board_id, 0) >= self.max_per_board:
            raise Overloaded("Too many live subscribers on this board.", retry_after=5)
        self._total += 1
        self._per_board[board_id] = self._per_board.get(board_id, 0) + 1
        key = (board_id, n)
        group = self._groups.get(key)
        created = group is None
        if created:
            group = _Group(board_id, n)
            self._groups[key] = group
            self._by_board.setdefault(board_id, set()).add(group)
            self._watch(board_id, True)
        group.reserved += 1
        try:
            if created:
                try:
                    page = await self._engine.top(board_id, 0, n)
                except BaseException as e:
                    group.error = e
                    group.ready.set()
                    raise
                group.entries = tuple(page.entries)
                group.window = {e.player_id: e for e in page.entries}
                group.version = page.version
                group.ready.set()
            else:
                await group.ready.wait()
                if group.error is not None:
                    raise group.error
            first = await self._first_message(group, since_version)
        except BaseException:
            group.reserved -= 1
            self._release(board_id)
            self._maybe_drop(group)
            raise
        group.reserved -= 1
        sub = Subscriber(group=group, queue=asyncio.Queue(maxsize=self.queue_size))
        if first is not None:
            msg, version = first
            sub.queue.put_nowait(msg)
            sub.version = version
        else:
            sub.version = group.version
        group.subs.add(sub)
        if group.pending and group.timer is None and not group.flushing:
            self._schedule(group)
        return sub

    async def _first_message(self, g: _Group, since: int | None) -> tuple[str, int] | None:
        if since is None or since > g.version:
            return snapshot_message(g.version, g.entries), g.version
        if since == g.version:
            return None
        try:
            ch = await self._engine.changes(g.board_id, since, deltas_only=True)  # the window is ours
        except FlowRankError:
            ch = None
        # the group may have flushed while we waited: describe the window it holds now
        target = g.version
        if ch is None or ch.kind != "deltas" or ch.version < target or (ch.from_version not in (None, since)):
            return snapshot_message(target, g.entries), target
        changed: dict[str, RowChange] = {}
        for d in ch.deltas:
            if d.version <= target:
                for c in d.changes:
                    changed[c.player_id] = c
        out = [_active_change(e) for e in g.entries]
        out.extend(render.change(c) for pid, c in changed.items() if pid not in g.window)
        return delta_message(since, target, _dumps(out)), target

    def unsubscribe(self, sub: Subscriber) -> None:
        if sub.closed:
            return
        sub.closed = True
        g = sub.group
        g.subs.discard(sub)
        self._release(g.board_id)
        self._maybe_drop(g)

    def _release(self, board_id: str) -> None:
        self._total -= 1
        left = self._per_board.get(board_id, 1) - 1
        if left <= 0:
            self._per_board.pop(board_id, None)
        else:
            self._per_board[board_id] = left

    def _maybe_drop(self, g: _Group) -> None:
        if g.subs or g.reserved:
            return
        if self._groups.get((g.board_id, g.n)) is g:
            del self._groups[(g.board_id, g.n)]
            self._watch(g.board_id, False)
            groups = self._by_board.get(g.board_id)
            if groups is not None:
                groups.discard(g)
                if not groups:
                    del self._by_board[g.board_id]
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None

    def _watch(self, board_id: str, on: bool) -> None:
        """Tell an engine in another process (engine.runtime.remote) which boards' commits
        a group needs; an engine in this process delivers every board's anyway."""
        hook = getattr(self._engine, "watch" if on else "unwatch", None)
        if hook is not None:
            hook(board_id)

    # ---- fan-out -------------------------------------------------------------------

    def _on_commit(self, board_id: str, deltas: Sequence[Delta]) -> None:
        groups = self._by_board.get(board_id)
        if not groups or not deltas:
            return
        for g in groups:
            for d in deltas:
                if not d.changes:  # the board moved on without its row changes (engine.router.router.Router.follow)
                    g.resync = True
                for c in d.changes:
                    g.pending[c.player_id] = c
            if g.subs and g.timer is None and not g.flushing:
                self._schedule(g)

    def _schedule(self, g: _Group) -> None:
        loop = asyncio.get_running_loop()
        g.timer = loop.call_later(self.window_s, self._start_flush, g)

    def _start_flush(self, g: _Group) -> None:
        g.timer = None
        if not g.subs or self._closing:
            return
        g.flushing = True
        task = asyncio.get_running_loop().create_task(self._flush(g))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, g: _Group) -> None:
        try:
            changed, g.pending = g.pending, {}
            resync, g.resync = g.resync, False
            try:
                page = await self._engine.top(g.board_id, 0, g.n)
            except FlowRankError as e:
                log.warning("live window refresh failed for %s: %s", g.board_id, e.code)
                return
            self.flushes += 1
            if page.version <= g.version:
                return
            out = [] if resync else window_diff(g.window, page.entries, changed)
            g.entries = tuple(page.entries)
            g.window = {e.player_id: e for e in page.entries}
            g.version = page.version
            if resync:
                self._broadcast_snapshot(g)
            elif out:
                self._broadcast(g, _dumps(out))
        finally:
            g.flushing = False
            if (g.pending or g.resync) and g.subs and g.timer is None and not self._closing:
                self._schedule(g)

    def _broadcast(self, g: _Group, changes_json: str) -> None:
        snap: str | None = None
        for sub in list(g.subs):
            if sub.queue.full():
                _drain(sub.queue)
                if snap is None:
                    snap = snapshot_message(g.version, g.entries)
                sub.queue.put_nowait(snap)
            else:
                sub.queue.put_nowait(delta_message(sub.version, g.version, changes_json))
            sub.version = g.version

    def _broadcast_snapshot(self, g: _Group) -> None:
        """Every subscriber gets the window at the group's version as a snapshot (a standby: the rows that
        changed are not known, only that the board moved on)."""
        snap = snapshot_message(g.version, g.entries)
        for sub in list(g.subs):
            if sub.queue.full():
                _drain(sub.queue)
            sub.queue.put_nowait(snap)
            sub.version = g.version

    def _push_close(self, sub: Subscriber) -> None:
        if sub.queue.full():
            _drain(sub.queue)
        sub.queue.put_nowait(_CLOSE)

    # ---- the stream ----------------------------------------------------------------

    async def stream(self, sub: Subscriber) -> AsyncIterator[str]:
        """SSE text for one subscriber, with heartbeat comments; unsubscribes on exit."""
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(sub.queue.get(), self.heartbeat_s)
                except asyncio.TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if msg is _CLOSE:
                    return
                yield msg
        finally:
            self.unsubscribe(sub)


def _drain(q: asyncio.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except asyncio.QueueEmpty:
            return
