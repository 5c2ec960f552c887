"""``RemoteEngine``: the EngineClient of a gateway whose engine runs elsewhere.

With ``flowrank serve --workers N`` every gateway process holds one of these
and the engine runs once, in the engine host (:mod:`engine.runtime.host`,
carried by a Ray actor: :mod:`engine.cluster.host_actor`). Every method of
:class:`engine.router.api.EngineClient` is here, with the same contract, so the
gateway cannot tell the difference; docs/http.md "Several gateways".

* **One message per turn.** The engine calls made in one event-loop turn go
  out as one message (a Ray actor call costs its caller ~0.4 ms whatever it
  carries: RAY_NOTES). While ``max_rounds`` messages are in flight, new calls
  wait and then all go in the next one: no added latency when idle, bigger
  messages under load (:class:`engine.router.turns.RoundBatcher`, as the router's
  shard reads).
* **Errors.** The engine's errors come back as themselves. A host that cannot
  be reached (restarting, gone) is ``OVERLOADED`` with a retry-after.
* **The commit feed.** :meth:`watch` / :meth:`unwatch` name the boards this
  gateway's live subscriptions need; a long poll brings their commits and
  hands them to the :meth:`subscribe` listeners on this loop, as the engine
  would in one process.
* **Stats** are the host engine's, fetched by :meth:`refresh_stats` (which
  /metrics awaits before a scrape).

Pure asyncio: the transport is a :class:`Channel`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections import Counter
from typing import AsyncIterator, Awaitable, Callable, Protocol, Sequence

from engine.router.api import forward
from engine.runtime.host import Call, Feed, dumps, loads
from engine.core.errors import FlowRankError, Overloaded
from engine.core.model import Delta
from engine.router.turns import RoundBatcher

log = logging.getLogger("flowrank.remote")

#: A commit buffer overflow: listeners get this one empty delta for each
#: watched board, so live windows are refreshed by a fresh read.
LOST = (Delta(-1, ()),)


class Channel(Protocol):
    """How a gateway reaches the engine host: both methods carry pickled bytes."""

    async def call(self, payload: bytes) -> bytes: ...

    async def feed(self, gateway: str, after: int, timeout_s: float) -> bytes: ...


@forward(lambda self, name: functools.partial(self._call, name))
class RemoteEngine:
    """``replica_transport``: the shard transport of the engine's shard actors
    (the same actors, in the same order): hot reads then go straight to them
    through an :class:`engine.runtime.replica.ReadReplica`; None sends every read to the host."""

    def __init__(self, channel: Channel, max_rounds: int = 2, feed_timeout_s: float = 10.0,
                 replica_transport=None):
        self.channel = channel
        self.gateway_id = uuid.uuid4().hex
        self.max_rounds = max_rounds
        self.feed_timeout_s = feed_timeout_s
        self._turns: RoundBatcher[Call] = RoundBatcher(self._send, max_rounds)
        self._listeners: list = []
        self._watched: Counter = Counter()
        self._seq: int | None = None  # where the next poll starts (None: before the first watch answered)
        self._feed_task: asyncio.Task | None = None
        self._stats: dict = {}
        self._closed = False
        self.calls_made = 0  # engine calls made
        self.default_shards: int | None = None  # the engine's, once connect() asked
        self.replica = None
        if replica_transport is not None:
            from engine.runtime.replica import ReadReplica  # noqa: PLC0415

            self.replica = ReadReplica(replica_transport, self._replica_board, self._share_view)

    async def connect(self) -> "RemoteEngine":
        """Learn what the gateway reads from its engine at start (``default_shards``)."""
        self.default_shards = await self._call("default_shards")
        return self

    async def _replica_board(self, board_id: str):
        self._ensure_feed()  # archive notices must reach this gateway before it reads from the shards
        return await self._call("replica_board", self.gateway_id, board_id)

    def _share_view(self, board_id: str, version: int, entries: list, complete: bool):
        return self._call("share_view", board_id, version, entries, complete)

    # ------------------------------------------------------------ the message per turn

    def _call(self, method: str, *args, **kwargs) -> asyncio.Future:
        self.calls_made += 1
        return self._turns.submit(None, Call(method, args, kwargs or None))

    @property
    def calls_sent(self) -> int:
        """Messages sent (a message carries every call of a turn)."""
        return self._turns.messages

    def _send(self, _host, batch: list) -> Awaitable[None]:
        return self._round(batch)

    async def _round(self, batch: list) -> None:
        try:
            replies = loads(await self.channel.call(dumps([c for c, _ in batch])))
        except FlowRankError as exc:
            replies = [(False, exc)] * len(batch)
        except Exception as exc:  # noqa: BLE001 - the host is unreachable: every caller learns it
            log.warning("engine host call failed: %r", exc)
            err = Overloaded(f"The engine is unavailable ({type(exc).__name__}); retry shortly.", retry_after=1)
            replies = [(False, err)] * len(batch)
        for (_, fut), (ok, value) in zip(batch, replies):
            if fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    # ------------------------------------------------------------ the engine's methods
    # Every engine.router.api.FORWARDED operation not defined here goes to the host as a Call (@forward);
    # reads a replica in this process can answer are tried there first.

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None, ties: bool = False):
        if self.replica is not None and await self.replica.serves(board_id):
            page = await self.replica.top(board_id, offset, limit, at_version, ties)
            if page is not None:
                return page
        return await self._call("top", board_id, offset, limit, at_version, ties)

    async def player(self, board_id: str, player_id: str, ties: bool = False):
        if self.replica is not None and await self.replica.serves(board_id) and \
                not self.replica.counts_attempts(board_id):
            return await self.replica.player(board_id, player_id, ties)
        return await self._call("player", board_id, player_id, ties)

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False):
        if self.replica is not None and await self.replica.serves(board_id):
            return await self.replica.around(board_id, player_id, radius, ties)
        return await self._call("around", board_id, player_id, radius, ties)

    async def ranked_subset(self, board_id: str, player_ids: Sequence[str], ties: bool = False):
        if self.replica is not None and await self.replica.serves(board_id):
            return await self.replica.ranked_subset(board_id, list(player_ids), ties)
        return await self._call("ranked_subset", board_id, list(player_ids), ties)

    async def ready(self) -> bool:
        try:
            return bool(await self._call("ready"))
        except FlowRankError:
            return False

    async def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> AsyncIterator:
        """The host's export, a chunk per call; an export left early is closed there."""
        token = await self._call("export_open", board_id, page_rows, ties)
        finished = False
        try:
            while True:
                chunk = await self._call("export_next", token)
                if chunk is None:
                    finished = True
                    return
                yield chunk
        finally:
            if not finished:
                try:
                    await asyncio.shield(self._call("export_close", token))
                except Exception:  # noqa: BLE001 - the host drops it with the session anyway
                    pass

    # ------------------------------------------------------------ stats

    def stats(self) -> dict:
        return self._stats

    async def refresh_stats(self) -> None:
        self._stats = await self._call("stats")

    # ------------------------------------------------------------ the commit feed

    def subscribe(self, listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def watch(self, board_id: str) -> None:
        """This gateway's listeners need ``board_id``'s commits (counted: one per :meth:`unwatch`)."""
        self._watched[board_id] += 1
        if self._watched[board_id] == 1:
            self._send_watches()

    def unwatch(self, board_id: str) -> None:
        if self._watched[board_id] <= 1:
            self._watched.pop(board_id, None)
            self._send_watches()
        else:
            self._watched[board_id] -= 1

    def _send_watches(self) -> None:
        if self._closed:
            return
        fut = self._call("watch", self.gateway_id, sorted(self._watched))
        fut.add_done_callback(self._seq_answered)
        self._ensure_feed()

    def _ensure_feed(self) -> None:
        if self._feed_task is None and not self._closed:
            self._feed_task = asyncio.ensure_future(self._feed_loop())

    def _seq_answered(self, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            log.warning("could not tell the engine host which boards to watch: %r",
                        None if fut.cancelled() else fut.exception())
            return
        if self._seq is None:
            self._seq = fut.result()

    async def _feed_loop(self) -> None:
        if self._seq is None:  # start from the host's position now
            try:
                self._seq = await self._call("watch", self.gateway_id, sorted(self._watched))
            except FlowRankError:
                self._seq = 0
        while not self._closed:
            try:
                feed: Feed = loads(await self.channel.feed(self.gateway_id, self._seq, self.feed_timeout_s))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the host restarts: poll again shortly
                log.warning("engine host feed failed: %r", exc)
                await asyncio.sleep(0.5)
                continue
            self._seq = feed.seq
            for notice in feed.notices:  # archived: no replica read of it may outlive this loop turn's poll
                if self.replica is not None:
                    await self.replica.forget(notice.board_id)
            if feed.lost:
                log.warning("live commits were lost (this gateway fell behind); refreshing live windows")
                for board_id in list(self._watched):
                    self._deliver(board_id, LOST)
            for c in feed.commits:
                self._deliver(c.board_id, c.deltas)

    def _deliver(self, board_id: str, deltas) -> None:
        for listener in list(self._listeners):
            try:
                listener(board_id, deltas)
            except Exception:
                log.exception("commit listener failed")

    async def close(self) -> None:
        """Stop polling and tell the host this gateway is gone; the engine itself stays up."""
        if self._closed:
            return
        try:
            await asyncio.wait_for(self._call("forget", self.gateway_id), 2.0)
        except Exception:  # noqa: BLE001 - best effort: the host may be gone first
            pass
        self._closed = True
        if self._feed_task is not None:
            self._feed_task.cancel()
            await asyncio.gather(self._feed_task, return_exceptions=True)
