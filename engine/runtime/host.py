"""``EngineHost``: one engine served to several gateway processes.

``flowrank serve --workers N`` runs N gateway processes in front of one
engine (issue 11, docs/http.md "Several gateways"). The engine (the router:
sequencer, board control, read fan-out; and the shard and log actors behind
it) lives in one place; every gateway talks to it through a
:class:`engine.runtime.remote.RemoteEngine`. This module is the engine's side
of that conversation, as plain asyncio: the Ray actor that carries it
(:mod:`engine.cluster.host_actor`) forwards each call in a line, and the tests
drive it through :class:`LocalChannel` with the very same bytes.

The conversation has two parts:

* **Calls.** A gateway sends the engine calls of one event-loop turn together,
  as one pickled list of :class:`Call` records; the host runs them
  concurrently and answers one pickled list of :class:`Reply` records in the
  same order. An engine error (any :class:`engine.core.errors.FlowRankError`)
  travels as the reply's value and is raised again in the gateway, with its
  code, message, field and retry-after intact. Only the methods in
  :data:`CALLS` can be called.
* **The commit feed.** A gateway says which boards it watches (its live
  subscriptions) with ``watch``; :meth:`EngineHost.feed` is a long poll that
  answers the commits of those boards after a sequence number. The host
  listens to the engine only while some gateway watches a board, so writes
  build no deltas for nobody.

Exports are sessions: ``export_open`` starts the engine's export iterator
here, ``export_next`` answers its next chunk (``None`` at the end) and
``export_close`` ends it early.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import uuid
from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

from engine.router.api import FORWARDED
from engine.core.errors import FlowRankError, Overloaded

log = logging.getLogger("flowrank.host")

#: The engine methods a gateway may call through the host: the API's forwarded operations (engine.router.api).
ENGINE_CALLS = frozenset(FORWARDED) | {"ready"}
#: The host's own calls.
HOST_CALLS = frozenset({"stats", "watch", "forget", "export_open", "export_next", "export_close",
                        "replica_board", "share_view", "default_shards"})
CALLS = ENGINE_CALLS | HOST_CALLS


class Call(NamedTuple):
    """One engine call from a gateway: ``engine.<method>(*args, **kwargs)``."""

    method: str
    args: tuple = ()
    kwargs: dict | None = None


class Reply(NamedTuple):
    """What a :class:`Call` gave: its value, or the error it raised (``ok`` False)."""

    ok: bool
    value: Any


class Commit(NamedTuple):
    """One engine commit of a watched board, as the engine's listeners saw it."""

    seq: int
    board_id: str
    deltas: tuple


class Notice(NamedTuple):
    """``board_id`` is archived: gateways stop reading its rows from the shards (engine.runtime.replica)."""

    seq: int
    board_id: str


class Feed(NamedTuple):
    """A long poll's answer: the watched boards' commits and every notice after
    the asked ``seq``. ``seq`` is where the next poll starts; ``lost`` is true
    when commits the gateway watched fell out of the host's buffer before it
    asked for them. Asking from ``seq`` acknowledges everything before it."""

    seq: int
    commits: tuple[Commit, ...]
    lost: bool = False
    notices: tuple[Notice, ...] = ()


def dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


loads = pickle.loads


class EngineHost:
    """Serves ``engine`` (an :class:`engine.router.api.EngineClient`) to gateways.

    ``max_buffered_changes``: row changes the commit buffer holds for slow
    pollers; a poller further behind gets ``lost`` (its live windows are then
    refreshed from a fresh read instead of from deltas)."""

    def __init__(self, engine, max_buffered_changes: int = 200_000, max_exports: int = 64,
                 drop_wait_s: float = 10.0, version_path: str | None = None):
        """``version_path``: where to keep the boards' versions for the gateways on this
        machine (engine.runtime.version_table); None: their replicas ask the shards."""
        self.engine = engine
        self.drop_wait_s = drop_wait_s
        self.max_buffered_changes = max_buffered_changes
        self.max_exports = max_exports
        self._seq = 0
        self._commits: deque[Commit] = deque()
        self._buffered = 0
        self._dropped_through = 0  # every commit with seq <= this has left the buffer
        self._watching: dict[str, frozenset[str]] = {}  # gateway id -> boards it watches
        self._watched: frozenset[str] = frozenset()
        self._unsubscribe: Callable[[], None] | None = None
        self._wake: dict[str, asyncio.Event] = {}
        self._exports: dict[str, Any] = {}
        self._notices: deque[Notice] = deque(maxlen=1024)
        self._polled: dict[str, int] = {}  # gateway -> the seq its last poll started from (all before it handled)
        self._seen: dict[str, float] = {}  # gateway -> loop time its last poll started or ended
        self.gone_after_s = 60.0  # a gateway neither polling nor seen this long is forgotten (it died)
        router = getattr(engine, "router", None)
        if router is not None:
            router.drop_barriers.append(self._barrier)
        self.versions = None
        if router is not None and version_path is not None:
            from engine.runtime.version_table import VersionTable  # noqa: PLC0415

            self.versions = VersionTable.create(version_path)
            router.version_hooks.append(self._publish)
            self._publish(set(router.boards))

    def _publish(self, board_ids) -> None:
        boards = self.engine.router.boards
        for b in board_ids:
            ctl = boards.get(b)
            if ctl is not None:
                self.versions.publish(b, ctl.version)

    # ------------------------------------------------------------ calls

    async def call(self, payload: bytes) -> bytes:
        """Run the pickled list of :class:`Call` concurrently; the pickled list of :class:`Reply`."""
        calls: list[Call] = loads(payload)
        return dumps(await asyncio.gather(*(self._one(c) for c in calls)))

    async def _one(self, c: Call) -> Reply:
        method, args, kwargs = c.method, c.args, c.kwargs or {}
        if method not in CALLS:
            return Reply(False, FlowRankError(f"The engine host has no call {method!r}."))
        try:
            if method in HOST_CALLS:
                value = getattr(self, "_" + method)(*args, **kwargs)
            else:
                value = getattr(self.engine, method)(*args, **kwargs)
            if asyncio.iscoroutine(value):
                value = await value
            return Reply(True, value)
        except FlowRankError as exc:
            return Reply(False, exc)
        except Exception as exc:  # noqa: BLE001 - the gateway logs it and answers 500, as in one process
            log.exception("engine call %s failed", method)
            return Reply(False, exc)

    def _default_shards(self) -> int | None:
        """Partitions of a board created without ``shards`` (the gateway's default)."""
        return getattr(self.engine, "default_shards", None)

    async def _stats(self) -> dict:
        await self.engine.refresh_stats()
        return self.engine.stats()

    # ------------------------------------------------------------ exports

    async def _export_open(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> str:
        if len(self._exports) >= self.max_exports:
            raise Overloaded("Too many exports are running; retry shortly.", retry_after=5)
        it = self.engine.export(board_id, page_rows, ties).__aiter__()
        token = uuid.uuid4().hex
        self._exports[token] = it
        return token

    async def _export_next(self, token: str):
        it = self._exports.get(token)
        if it is None:
            raise Overloaded("That export ended; start it again.", retry_after=1)
        try:
            return await it.__anext__()
        except StopAsyncIteration:
            self._exports.pop(token, None)
            return None
        except BaseException:
            self._exports.pop(token, None)
            raise

    async def _export_close(self, token: str) -> None:
        it = self._exports.pop(token, None)
        if it is not None and hasattr(it, "aclose"):
            await it.aclose()

    # ------------------------------------------------------------ read replicas

    def _replica_board(self, gateway: str, board_id: str):
        """``(board record, state, where its version is)`` of ``board_id`` for a gateway's
        read replica, None when unknown; where: ``(path, token, slot)`` of the version
        table, or None. The gateway now counts among those an archive waits for (:meth:`_barrier`)."""
        from engine.core import records as R  # noqa: PLC0415

        self._polled.setdefault(gateway, self._seq)
        ctl = self.engine.router.boards.get(board_id)
        if ctl is None:
            return None
        where = None
        if self.versions is not None:
            slot = self.versions.slot(board_id)
            if slot is not None:
                self.versions.publish(board_id, ctl.version)
                where = (str(self.versions.path), self.versions.token, slot)
        return R.board_record(ctl.spec), ctl.admission.state.value, where

    def _share_view(self, board_id: str, version: int, entries: list, complete: bool) -> None:
        """Keep a page-1 view a replica built, so its cursor pages through any gateway."""
        router = self.engine.router
        if router.fanout.view(board_id, version) is None:
            router.fanout.remember_view(board_id, version, entries, complete)

    async def _barrier(self, board_id: str) -> None:
        """Before the shards drop an archived board's rows: tell every gateway, and wait
        until each has polled again (so its replica reads of the board are over), at
        most ``drop_wait_s`` (a gateway that long silent is gone)."""
        self._seq += 1
        seq = self._seq
        self._notices.append(Notice(seq, board_id))
        for ev in self._wake.values():
            ev.set()
        deadline = asyncio.get_running_loop().time() + self.drop_wait_s
        while any(after < seq for after in self._polled.values()):
            if asyncio.get_running_loop().time() > deadline:
                late = sorted(g for g, after in self._polled.items() if after < seq)
                log.warning("archive of %r: gateways %s did not answer in %.0f s; dropping its rows anyway",
                            board_id, late, self.drop_wait_s)
                for g in late:
                    self._polled.pop(g, None)
                return
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------ the commit feed

    def _watch(self, gateway: str, board_ids: Sequence[str]) -> int:
        """``gateway`` now watches exactly ``board_ids``; the current sequence number."""
        if board_ids:
            self._watching[gateway] = frozenset(board_ids)
        else:
            self._watching.pop(gateway, None)
        self._watched = frozenset().union(*self._watching.values()) if self._watching else frozenset()
        if self._watched and self._unsubscribe is None:
            self._unsubscribe = self.engine.subscribe(self._on_commit)
        elif not self._watched and self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        return self._seq

    def _forget(self, gateway: str) -> None:
        """``gateway`` is gone: its watches end and its poll returns."""
        self._watch(gateway, ())
        self._polled.pop(gateway, None)
        self._seen.pop(gateway, None)
        ev = self._wake.pop(gateway, None)
        if ev is not None:
            ev.set()

    def _on_commit(self, board_id: str, deltas: Sequence) -> None:
        if board_id not in self._watched or not deltas:
            return
        self._seq += 1
        self._commits.append(Commit(self._seq, board_id, tuple(deltas)))
        self._buffered += sum(len(d.changes) for d in deltas)
        while self._buffered > self.max_buffered_changes and len(self._commits) > 1:
            old = self._commits.popleft()
            self._buffered -= sum(len(d.changes) for d in old.deltas)
            self._dropped_through = old.seq
        for gateway, boards in self._watching.items():
            if board_id in boards:
                ev = self._wake.get(gateway)
                if ev is not None:
                    ev.set()

    async def feed(self, gateway: str, after: int, timeout_s: float = 10.0) -> bytes:
        """The pickled :class:`Feed` of ``gateway``'s watched commits after
        ``after``; waits up to ``timeout_s`` for one when there is none yet."""
        self._polled[gateway] = max(after, self._polled.get(gateway, after))
        now = asyncio.get_running_loop().time()
        self._seen[gateway] = now
        for g in [g for g, t in self._seen.items() if now - t > self.gone_after_s and g not in self._wake]:
            log.warning("gateway %s stopped polling %.0f s ago: forgetting it", g, now - self._seen[g])
            self._forget(g)
        if not self._pending(gateway, after):
            ev = self._wake[gateway] = asyncio.Event()
            try:
                await asyncio.wait_for(ev.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
            finally:
                if self._wake.get(gateway) is ev:
                    del self._wake[gateway]
                self._seen[gateway] = asyncio.get_running_loop().time()
        boards = self._watching.get(gateway, frozenset())
        commits = tuple(c for c in self._commits if c.seq > after and c.board_id in boards)
        notices = tuple(n for n in self._notices if n.seq > after)
        return dumps(Feed(self._seq, commits, lost=after < self._dropped_through, notices=notices))

    def _pending(self, gateway: str, after: int) -> bool:
        if after < self._dropped_through or (self._notices and self._notices[-1].seq > after):
            return True
        boards = self._watching.get(gateway, frozenset())
        for c in reversed(self._commits):  # newest first: stop at the first one already seen
            if c.seq <= after:
                return False
            if c.board_id in boards:
                return True
        return False

    async def close(self) -> None:
        for token in list(self._exports):
            await self._export_close(token)
        for ev in self._wake.values():
            ev.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.versions is not None:
            self.engine.router.version_hooks.remove(self._publish)
            self.versions.close(unlink=True)
            self.versions = None


class LocalChannel:
    """A :class:`engine.runtime.remote.Channel` to a host in this process,
    through the same pickled bytes a Ray actor carries (tests; one process)."""

    def __init__(self, host: EngineHost):
        self.host = host

    async def call(self, payload: bytes) -> bytes:
        return await self.host.call(payload)

    async def feed(self, gateway: str, after: int, timeout_s: float) -> bytes:
        return await self.host.feed(gateway, after, timeout_s)
