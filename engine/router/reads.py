"""Read fan-out: every board read the router answers, from the shard actors or an archive.

A read goes to the shard actors that host the board's partitions, one request
each, and merges their replies with the comparator (:mod:`engine.core.ranking`).
:class:`TurnBatcher` coalesces the requests of one event-loop turn into one
call per shard actor per round; :class:`CutLock` lets a multi-step read keep
the sequencer from dispatching a batch between its steps; pinned page-1 views
serve later pages and snapshot pages at one version. An ARCHIVED board answers
from its archive (:mod:`engine.core.archive`) without asking any shard actor.

Consistency (docs/consistency.md): a shard transport submits calls in order
and every shard actor runs one caller's calls in submission order (sync Ray
actors do), and every batch goes to every shard actor. So a read whose calls
are all submitted in one step sees the same prefix of batches on every actor:
a consistent cut, whose version is the sum of the actors' local versions.
Reads that need two steps (rank: find the key, then count above it) hold the
:class:`CutLock` so no batch is dispatched between the steps. Every reply
carries the actor's applied log offset; replies with different offsets (an
actor that replayed ahead after a restart) are retried (:meth:`ReadFanOut.consistent`).

Requests and replies are the named tuples of :mod:`engine.core.wire`. Naming: a
board has ``spec.shards`` *partitions*; a *shard actor* (``actor``) hosts some
partitions of many boards.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import time
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import replace
from typing import AsyncIterator, Awaitable, Callable, NamedTuple, Sequence

import numpy as np

from engine.core import checksum as checksum_mod
from engine.core import wire as W
from engine.core.archive import ArchiveView
from engine.router.registry import BoardCtl, BoardRegistry, CutLock, KeySample, RouterConfig
from engine.core.export import Block, Chunk, Merge, TiedRanks, key_subscores, raw_subscores
from engine.core.errors import (
    BoardArchived,
    AwardsPending,
    BoardNotFound,
    CohortNotFound,
    FlowRankError,
    Overloaded,
    PlayerNotFound,
    PlayerNotRanked,
    StorageUnavailable,
    ValidationFailed,
    ViewExpired,
)
from engine.log.spill import SpillReader
from engine.core.league import cohort_id, parse_cohort_id, zone
from engine.core.rank_mirror import RankMirror, mirrors
from engine.core.model import (
    CohortSummary,
    CohortsPage,
    PlayerTier,
    Award,
    AwardsPage,
    CohortView,
    InstanceInfo,
    BoardInfo,
    PlayerBoardData,
    PlayerData,
    Changes,
    Checksum,
    HeldEvent,
    HistoryEntry,
    Page,
    PlayerView,
    Policy,
    RankedEntry,
    RowStatus,
)
from engine.core.placement import part_of
from engine.core.ranking import (
    better_primary_probe,
    first_tied_in_prefix,
    merge_top,
    merge_window,
    rank_locally,
    with_tied_ranks,
)
from engine.router.turns import RoundBatcher
from engine.core.wire import ShardTransport

log = logging.getLogger("flowrank.router")


def _with_attempts(read):
    """A player read that also carries the player's admitted attempts, on a
    board with ``max_attempts`` (docs/api.md §16): the router's entry table
    as of the read's answer (it counts every event durable before it)."""

    @functools.wraps(read)
    async def wrapped(self, board_id: str, player_id: str, *args, **kwargs) -> PlayerView:
        view = await read(self, board_id, player_id, *args, **kwargs)
        ctl = self.registry.boards.get(board_id)
        rules = None if ctl is None else ctl.spec.entry
        if ctl is None or rules is None or rules.max_attempts is None:
            return view
        got = ctl.admission.entry.get(player_id)
        return replace(view, attempts=0 if got is None else got.attempts)

    return wrapped


class TurnBatcher:
    """Batches read requests into one call per shard actor per *round*
    (:class:`engine.router.turns.RoundBatcher`): requests of one event-loop turn go
    out together, and a round submits its calls to every shard actor in one
    synchronous step, so the requests of one fan-out always see the same cut
    (no batch dispatch can fall between them). A request is an
    :mod:`engine.core.wire` request; its future gets ``(offset, reply)``: the
    actor's applied log offset and the named reply.
    """

    def __init__(self, transport: ShardTransport, max_rounds: int = 2):
        self.t = transport
        self.turns: RoundBatcher[tuple] = RoundBatcher(self._send, max_rounds)

    def ask(self, actor: int, req: tuple) -> asyncio.Future:
        return self.turns.submit(actor, req)

    def _send(self, actor, items: list) -> Awaitable[None]:
        return self._deliver(self.t.read(actor, [r for r, _ in items]), items)  # the call starts now: one cut

    @staticmethod
    async def _deliver(aw, items):
        try:
            got = W.ReadAnswer._make(await aw)
        except BaseException as exc:  # the shard actor failed: every waiter learns it
            err = exc if isinstance(exc, FlowRankError) else Overloaded(
                f"A shard is unavailable ({type(exc).__name__}); retry shortly.", retry_after=1)
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(err)
            return
        for (req, fut), ans in zip(items, got.replies):
            if not fut.done():
                fut.set_result((got.offset, W.reply(req.op, ans)))


class ReadFanOut:
    """Every board read: fan-out to the shard actors hosting the board's
    partitions, merge, views; archived boards from their archive."""

    def __init__(self, transport: ShardTransport, registry: BoardRegistry, config: RouterConfig | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.t = transport
        self.registry = registry
        self.boards = registry.boards
        self.cfg = config or registry.cfg
        self.clock = clock  # monotonic seconds: view ages
        # Epoch ms: which instance a read on a series answers from (the router shares board control's).
        self.wall_clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self.reads = TurnBatcher(transport)
        self.cut = CutLock()
        self.views: OrderedDict[tuple[str, int], tuple[float, list]] = OrderedDict()
        self._view_builds: dict[str, asyncio.Future] = {}  # board -> done when its page-1 fan-out ends
        # (board, player) -> the wire key their row had when last read: a guess
        # that lets an exact rank count on every shard actor in the same round as
        # the owner's read of the row; used only when the row read confirms it.
        self.rank_keys = registry.rank_keys
        # board -> (its delta ring, its rank mirror at the board's version): exact rank with no shard call
        self.mirrors: dict[str, tuple[object, RankMirror]] = {}
        self._mirror_builds: dict[str, asyncio.Task] = {}
        self._mirror_after: dict[str, float] = {}  # board -> no new build before this (monotonic s)
        self._mirror_used: dict[str, float] = {}  # board -> when a read last used its mirror (monotonic s)
        self._mirror_sweep = 0.0  # next look for idle mirrors
        self.mirror_stats: dict[str, int] = defaultdict(int)  # reads, builds, lost, failed
        self.mirroring = True  # False: never a mirror (a read replica: no delta ring, engine.runtime.replica)

    async def fan(self, ctl: BoardCtl, make: Callable[[int], tuple], actors: Sequence[int] | None = None) -> dict:
        """One request per shard actor (``make(actor)``), all submitted in the
        same turn: a cut. ``{actor: (offset, reply)}``."""
        actors = ctl.actors if actors is None else actors
        futs = {a: self.reads.ask(a, make(a)) for a in actors}
        return {a: await f for a, f in futs.items()}

    async def consistent(self, attempt: Callable[[], Awaitable[tuple[set, object]]], ctl: BoardCtl | None = None):
        """Run a read until every shard actor answered from the same log offset.
        ``ctl``: the board read (counted in ``shard_reads`` meanwhile, so an
        archive drops the shard actors' rows only once no read still needs them)."""
        if ctl is not None:
            ctl.shard_reads += 1
        try:
            for i in range(self.cfg.read_retries):
                offsets, result = await attempt()
                if len(offsets) <= 1:
                    return result
                await asyncio.sleep(0.002 * (i + 1))  # a shard actor replayed ahead: let dispatch catch up
            raise Overloaded("Shards are recovering; retry shortly.", retry_after=1)
        finally:
            if ctl is not None:
                ctl.shard_reads -= 1

    async def list_boards(self) -> list[BoardInfo]:
        return [await self.board(b) for b in sorted(self.boards)]

    async def board(self, board_id: str) -> BoardInfo:
        ctl = self.registry.ctl(board_id)
        s = ctl.spec
        if s.recurrence is not None:  # a series: its settings, and the version and size of its current instance
            current = self.registry.current_instance(board_id, self.wall_clock())
            now = None if current is None else await self.board(current)
            return BoardInfo(s.board_id, s.policy, ctl.admission.state, 0 if now is None else now.version,
                             0 if now is None else now.size, s.shards, s.max_plausible_time_ms, s.review_above,
                             s.closes_at, s.finalize_after_s, recurrence=s.recurrence.to_json(), current=current,
                             subscores=s.subscores, entry=s.entry, league=s.league, prizes=s.prizes)
        if ctl.archive is not None:
            info = ctl.archive.info
            return BoardInfo(s.board_id, s.policy, ctl.admission.state, info.version, info.ranked, s.shards,
                             s.max_plausible_time_ms, s.review_above, s.closes_at, s.finalize_after_s,
                             subscores=s.subscores, entry=s.entry, series=s.series, window=s.window,
                             league=s.league, prizes=s.prizes)

        async def attempt():
            answers = await self.fan(ctl, lambda a: W.Size(W.SIZE, board_id))
            version = sum(ans.version for _, ans in answers.values())
            size = sum(ans.value for _, ans in answers.values())
            return {o for o, _ in answers.values()}, (version, size)

        version, size = await self.consistent(attempt, ctl)
        s = ctl.spec
        return BoardInfo(s.board_id, s.policy, ctl.admission.state, version, size, s.shards,
                         s.max_plausible_time_ms, s.review_above, s.closes_at, s.finalize_after_s,
                         subscores=s.subscores, entry=s.entry, series=s.series, window=s.window,
                         league=s.league, prizes=s.prizes)

    async def instances(self, board_id: str) -> list[InstanceInfo]:
        """A series' instances, latest window first (docs/api.md §15);
        BoardNotFound when ``board_id`` is no series."""
        if self.registry.ctl(board_id).spec.recurrence is None:
            raise BoardNotFound(f"Board {board_id!r} is not a series (it has no recurrence).", "board_id")
        ids = self.registry.instances_of(board_id)
        infos = await asyncio.gather(*(self.board(i) for i in ids))
        return [InstanceInfo(i.board_id, i.window[0], i.window[1], i.state, i.size)  # type: ignore[index]
                for i in infos]

    def resolve(self, board_id: str) -> str:
        """The board a read of ``board_id`` answers from: itself, or for a
        series the instance of the window containing the server's current time
        (docs/api.md §15). BoardNotFound for a series with no instance yet."""
        ctl = self.boards.get(board_id)
        if ctl is None or ctl.spec.recurrence is None:
            return board_id
        got = self.registry.current_instance(board_id, self.wall_clock())
        if got is None:
            raise BoardNotFound(f"Series {board_id!r} has no instance for the current window yet.", "board_id")
        return got

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                  ties: bool = False) -> Page:
        """:meth:`top_of` the board a read of ``board_id`` answers from (for a
        series, its current instance, named in the page)."""
        resolved = self.resolve(board_id)
        page = await self.top_of(resolved, offset, limit, at_version, ties)
        return page if resolved == board_id else replace(page, board_id=resolved)

    async def top_of(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                     ties: bool = False) -> Page:
        """Ranks offset+1 .. offset+limit. Every page is cut from a prefix of
        the ranking that starts at rank 1, so tied ranks (``ties``) come from
        that prefix too, with no further call to a shard actor."""
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            return Page(self._archive_version(ctl, at_version, "page"), _archive_page(ctl.archive, offset, limit, ties))
        # A view materialised at the board's current version answers without
        # asking a shard actor: it is the state at a version every acknowledged
        # write has reached (ctl.version moves before acknowledgements go out).
        wanted = ctl.version if at_version is None else at_version
        view = self.view(board_id, wanted)
        if view is None and at_version is None:
            view = self._carried_view(ctl, wanted)
        if view is not None and (offset + limit <= len(view) or view.complete):
            return Page(wanted, _page_of(view, offset, limit, ties))
        pin = offset == 0 and at_version is None
        building = self._view_builds.get(board_id) if pin else None
        if building is not None:
            # One fan-out builds a board's view; the reads that arrive meanwhile
            # wait for it and use it if it is at the version current *now*
            # (which every acknowledged write has reached), else fetch their own.
            await asyncio.wait([building])
            wanted = ctl.version
            view = self.view(board_id, wanted)
            if view is not None and (limit <= len(view) or view.complete):
                return Page(wanted, _page_of(view, 0, limit, ties))
        n = offset + limit
        fetch = min(max(n, limit * self.cfg.pinned_pages), self.cfg.max_view_entries) if pin else n
        if pin and board_id not in self._view_builds:
            done = self._view_builds[board_id] = asyncio.get_running_loop().create_future()
            try:
                return await self._top_fetched(ctl, board_id, offset, limit, at_version, ties, pin, fetch)
            finally:
                del self._view_builds[board_id]
                done.set_result(None)
        return await self._top_fetched(ctl, board_id, offset, limit, at_version, ties, pin, fetch)

    async def _top_fetched(self, ctl: BoardCtl, board_id: str, offset: int, limit: int, at_version: int | None,
                           ties: bool, pin: bool, fetch: int) -> Page:
        """A top page from one fan-out of ``fetch`` entries per shard actor (and,
        for page 1, the view it leaves for the pages and reads after it)."""
        version, lists = await self._tops(ctl, fetch)
        if at_version is not None and version != at_version:
            raise ViewExpired("That page's version is no longer retained: fetch page 1 again.", "cursor")
        merged = merge_top(lists, 0, fetch) if lists else []
        if pin and len(merged) > limit:
            complete = len(merged) < fetch
            self.remember_view(board_id, version, merged, complete)
        return Page(version, _page_of(merged, offset, limit, ties))

    async def _tops(self, ctl: BoardCtl, n: int) -> tuple[int, list]:
        """Each shard actor's best ``n`` ranked entries of the board, in one
        consistent cut: ``(version, [ranking entries per actor])``."""

        async def attempt():
            answers = await self.fan(ctl, lambda a: W.Top(W.TOP, ctl.spec.board_id, n))
            version = sum(ans.version for _, ans in answers.values())
            lists = [_wire_entries(ans.value) for _, ans in answers.values()]
            return {o for o, _ in answers.values()}, (version, lists)

        return await self.consistent(attempt, ctl)

    #: At most this many changes are carried into a view (more: one fan-out instead).
    CARRY_MAX_CHANGES = 4_096

    def _carried_view(self, ctl: BoardCtl, version: int) -> list | None:
        """The board's newest cached view carried forward to ``version`` through the
        changes since (the board's delta ring), remembered and returned; None
        when it cannot be (no view, changes no longer retained or too many, a
        ``fastest_time`` board, whose tie a change does not carry, or a board
        with subscores). Under writes every batch moves the version past the
        page-1 view, so without this each top read fanned out and queued behind
        the shard actors' applies (issue 29 item 2).

        A view is an exact prefix of the ranking: every row in it ranks before
        every ranked row not in it. Each change keeps that so: the player's
        entry leaves the view; a ranked new row enters only when it ranks
        before the view's last entry (or the view holds every row), else it
        stays outside, where all it is known to rank behind is the view. So
        the view may shrink (a row that fell out of it) or grow, never skip a
        row. O(changes x log(view) + view)."""
        spec = ctl.spec
        if spec.policy is Policy.FASTEST_TIME or spec.subscores or ctl.ring.version != version:
            return None
        board_id = spec.board_id
        base, since = None, -1
        for (b, v), (born, _entries) in self.views.items():
            if b == board_id and since < v < version and self.clock() - born <= self.cfg.view_ttl_s:
                base, since = _entries, v
        if base is None or version - since > self.CARRY_MAX_CHANGES:
            return None
        deltas = ctl.ring.since(since)
        if deltas is None:
            return None
        keys = [(-e.value, e.achieved_at, e.player_id) for e in base]
        rows = {e.player_id: (e.value, e.achieved_at, e.metadata) for e in base}
        complete, active = base.complete, RowStatus.ACTIVE
        for delta in deltas:
            for ch in delta.changes:
                old = rows.pop(ch.player_id, None)
                if old is not None:
                    del keys[bisect.bisect_left(keys, (-old[0], old[1], ch.player_id))]
                if ch.status is not active:
                    continue  # no longer ranked
                key = (-ch.value, ch.achieved_at, ch.player_id)
                if complete or (keys and key < keys[-1]):
                    bisect.insort(keys, key)
                    rows[ch.player_id] = (ch.value, ch.achieved_at, ch.metadata)
        del keys[self.cfg.max_view_entries:]  # a shorter prefix is still a prefix (no longer every row)
        complete = complete and len(keys) == len(rows)
        entries = [RankedEntry(i, pid, -neg, a, None, rows[pid][2]) for i, (neg, a, pid) in enumerate(keys, 1)]
        self.remember_view(board_id, version, entries, complete)
        return self.views[(board_id, version)][1]

    def view(self, board_id: str, version: int):
        key = (board_id, version)
        hit = self.views.get(key)
        if hit is None:
            return None
        born, entries = hit
        if self.clock() - born > self.cfg.view_ttl_s:
            del self.views[key]
            return None
        return entries

    def forget_views(self, board_id: str) -> None:
        """Drop every cached view of a board (an erasure, docs/api.md §17: a cursor pinned before it answers 410)."""
        for key in [k for k in self.views if k[0] == board_id]:
            del self.views[key]

    def remember_view(self, board_id: str, version: int, entries: list, complete: bool) -> None:
        self.views[(board_id, version)] = (self.clock(), _View(entries, complete))
        self.views.move_to_end((board_id, version))
        while len(self.views) > self.cfg.max_views:
            self.views.popitem(last=False)

    async def _locate(self, ctl: BoardCtl, player_id: str) -> tuple[int, W.RowWire, int]:
        """The shard actor owning the player's partition, the player's row, and
        how many rows rank before it there."""
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        _, got = await self.reads.ask(owner, W.Get(W.GET, ctl.spec.board_id, player_id))
        if got.row is None:
            raise PlayerNotFound(f"Player {player_id!r} has no row on board {ctl.spec.board_id!r}.", "player_id")
        return owner, W.RowWire(*got.row), got.local

    @_with_attempts
    async def player(self, board_id: str, player_id: str, ties: bool = False) -> PlayerView:
        """Exact rank in one parallel round when the player's rank key is known:
        the owner's row and local count, and on every other shard actor the
        count of keys before the key the row had when last read, all in one
        cut. The row read confirms the guess; if the key moved since (or was
        never seen) a second round counts with the row's key (with ``ties``,
        the same round also counts strictly better primary values everywhere)."""
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            arch, i = self._archived_row(ctl, player_id)
            view = arch.player(arch.info.version, i)
            return replace(view, tied_rank=arch.tied_rank(i)) if ties and view.rank is not None else view
        mirror = self.mirror(ctl)
        if mirror is not None:  # the board's rows beside the router: no shard actor asked
            got = mirror.read(player_id, ties)
            self.mirror_stats["reads"] += 1
            if got is None:
                raise PlayerNotFound(f"Player {player_id!r} has no row on board {board_id!r}.", "player_id")
            row = got.row
            return PlayerView(mirror.version, player_id, got.rank, row.value, row.achieved_at, row.status,
                              row.row_version, tied_rank=got.tied_rank, metadata=row.metadata)
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        others = [a for a in ctl.actors if a != owner]

        def counts(key: list | None) -> tuple[dict, dict]:
            """Submit (not await) the other actors' counts for ``key`` (their
            sizes for an unranked row) and, with ``ties``, the better-primary counts."""
            futs = {a: self.reads.ask(a, W.Count(W.COUNT, board_id, key) if key else W.Size(W.SIZE, board_id))
                    for a in others}
            probe = list(better_primary_probe(key[0], key[1:-2])) if ties and key else None
            tfuts = {a: self.reads.ask(a, W.Count(W.COUNT, board_id, probe)) for a in ctl.actors} if probe else {}
            return futs, tfuts

        async def attempt():
            await self.cut.acquire_read()
            try:
                guess = self.rank_keys.get(board_id, player_id)
                got = self.reads.ask(owner, W.Get(W.GET, board_id, player_id))
                futs, tfuts = counts(guess) if guess is not None else ({}, {})  # same turn as the row read
                off, mine = await got
                row = None if mine.row is None else W.RowWire(*mine.row)
                key = None if row is None else row.key
                if row is None or guess is None or key != guess:
                    await asyncio.gather(*futs.values(), *tfuts.values(), return_exceptions=True)
                    if row is None:
                        self.rank_keys.forget(board_id, player_id)
                        raise PlayerNotFound(f"Player {player_id!r} has no row on board {board_id!r}.", "player_id")
                    self.rank_keys.put(board_id, player_id, key)
                    futs, tfuts = counts(key)  # the guess missed: a second round with the row's key
                answers = {a: await f for a, f in futs.items()}
                tanswers = {a: await f for a, f in tfuts.items()}
            finally:
                await self.cut.release_read()
            version = mine.version + sum(ans.version for _, ans in answers.values())
            rank = 1 + mine.local + sum(ans.value for _, ans in answers.values()) if row.ranked else None
            offsets = {off} | {o for o, _ in answers.values()} | {o for o, _ in tanswers.values()}
            view = _player_view(version, row, rank)
            if tanswers:
                view = replace(view, tied_rank=1 + sum(ans.value for _, ans in tanswers.values()))
            return offsets, view

        return await self.consistent(attempt, ctl)

    # ------------------------------------------------------------ rank mirrors

    def mirror(self, ctl: BoardCtl) -> RankMirror | None:
        """The board's rank mirror (:mod:`engine.core.rank_mirror`) at the
        board's current version, or None: then the read takes the shard
        actors' path, and a mirror is built in the background if the board
        can have one (not archived, not ``fastest_time``, no subscores, at
        most ``rank_mirror_rows`` rows, its delta ring at its version: not a
        gateway worker, which has no ring)."""
        board_id = ctl.spec.board_id
        if not self._mirrorable(ctl):
            return None
        now = self.clock()
        if now >= self._mirror_sweep:
            self._sweep_mirrors(now)
        m = self._follow(ctl, now)
        if m is not None:
            self._mirror_used[board_id] = now
            return m
        if board_id not in self._mirror_builds and self.clock() >= self._mirror_after.get(board_id, 0.0):
            task = asyncio.get_running_loop().create_task(self.build_mirror(board_id))
            self._mirror_builds[board_id] = task
        return None

    def _mirrorable(self, ctl: BoardCtl) -> bool:
        """Whether the board may have a mirror now (else any it has is dropped)."""
        spec = ctl.spec
        if (not self.mirroring or self.cfg.rank_mirror_rows <= 0 or ctl.archive is not None
                or not mirrors(spec.policy, spec.subscores) or ctl.ring.version != ctl.version):
            self.mirrors.pop(spec.board_id, None)
            return False
        return True

    def _follow(self, ctl: BoardCtl, now: float) -> RankMirror | None:
        """The board's mirror brought to the board's version, or None (none,
        or it could not follow: dropped, and no new build for a while)."""
        board_id = ctl.spec.board_id
        held = self.mirrors.get(board_id)
        if held is None:
            return None
        ring, m = held
        if ring is ctl.ring and m.catch_up(ctl.ring) and m.version == ctl.version:
            return m
        del self.mirrors[board_id]
        self.mirror_stats["lost"] += 1
        self._mirror_after[board_id] = now + self.cfg.rank_mirror_retry_s
        return None

    def _sweep_mirrors(self, now: float) -> None:
        """Drop the mirrors no read used for ``rank_mirror_idle_s`` and those
        of boards gone or archived (a series' past windows): their memory
        goes back; a read builds one again."""
        self._mirror_sweep = now + min(60.0, self.cfg.rank_mirror_idle_s)
        for board_id in list(self.mirrors):
            ctl = self.boards.get(board_id)
            if ctl is None or ctl.archive is not None or now - self._mirror_used.get(board_id, now) > \
                    self.cfg.rank_mirror_idle_s:
                del self.mirrors[board_id]
                self._mirror_used.pop(board_id, None)
                self.mirror_stats["idle"] += 1

    def tend_mirrors(self, touched) -> None:
        """After a cycle's changes reached the boards' rings (a version hook,
        before the cycle's acknowledgements): the touched boards' mirrors
        follow them, so a mirror never falls behind the ring's retention."""
        now = self.clock()
        for board_id in touched:
            ctl = self.boards.get(board_id)
            if ctl is not None and board_id in self.mirrors and self._mirrorable(ctl):
                self._follow(ctl, now)

    async def build_mirror(self, board_id: str) -> bool:
        """Build the board's mirror from one consistent cut of every shard
        actor's rows (:data:`W.ROWS`), on a worker thread, then let it follow
        the deltas since the cut. The ring keeps those deltas for it (a pin
        from before the cut), however many writes the build takes. True when
        the board has a mirror at its version afterwards."""
        ctl = self.registry.ctl(board_id)
        ring = ctl.ring
        pinned, epoch = ring.version, ring.epoch  # a reset from now on (an erasure) fails the catch-up below
        ring.pin(pinned)
        try:
            async def size():
                answers = await self.fan(ctl, lambda a: W.Size(W.SIZE, board_id))
                return {o for o, _ in answers.values()}, sum(ans.value for _, ans in answers.values())

            if await self.consistent(size, ctl) > self.cfg.rank_mirror_rows:
                self.mirror_stats["too_big"] += 1
                self._mirror_after[board_id] = self.clock() + self.cfg.rank_mirror_retry_s
                return False

            async def rows():
                answers = await self.fan(ctl, lambda a: W.Rows(W.ROWS, board_id))
                chunks = [c for _, ans in answers.values() for c in ans.value]
                return {o for o, _ in answers.values()}, (sum(ans.version for _, ans in answers.values()), chunks)

            version, chunks = await self.consistent(rows, ctl)
            spec = ctl.spec
            m = await asyncio.to_thread(RankMirror.build, spec.policy, spec.max_plausible_time_ms, chunks, version,
                                        epoch)
            for _ in range(1000):  # the cut may hold a cycle whose completion has not reached the ring yet
                if ring.version >= version:
                    break
                await asyncio.sleep(0.002)
            if self.registry.boards.get(board_id) is ctl and ctl.ring is ring and m.catch_up(ring) \
                    and m.version == ctl.version and ctl.archive is None:
                self.mirrors[board_id] = (ring, m)
                self._mirror_used[board_id] = self.clock()
                self.mirror_stats["builds"] += 1
                return True
            self.mirror_stats["failed"] += 1
        except Exception:
            log.exception("rank mirror of %s: build failed", board_id)
            self.mirror_stats["failed"] += 1
        finally:
            ring.unpin(pinned)
            self._mirror_builds.pop(board_id, None)
        self._mirror_after[board_id] = self.clock() + self.cfg.rank_mirror_retry_s
        return False

    def mirror_summary(self) -> dict:
        """What the mirrors hold and did (metrics, /v1/stats)."""
        held = [m for _, m in self.mirrors.values()]
        return {"boards": len(held), "rows": sum(len(m.rows.players) for m in held),
                "bytes": sum(m.nbytes() for m in held), **self.mirror_stats}

    @_with_attempts
    async def approximate_player(self, board_id: str, player_id: str) -> PlayerView:
        """Exact count on the shard actor owning the player's partition plus, for every other actor,
        an estimate from a sorted sample of its keys (every ``step``-th key).
        The estimate on an actor is off by less than ``step`` when the sample
        is fresh, plus one per change on that actor since: the stated bound
        is the sum, so the exact rank always lies within it."""
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:  # exact, and no slower
            arch, i = self._archived_row(ctl, player_id)
            return replace(arch.player(arch.info.version, i), approximate=True, rank_error_bound=0)
        owner, row, local = await self._locate(ctl, player_id)
        key = row.key
        if key is None:
            return _player_view(ctl.version, row, None, approximate=True, bound=0)
        est, bound = 1 + local, 0
        for a in ctl.actors:
            if a == owner:
                continue
            sample = ctl.samples.get(a)
            drift = ctl.actor_changes[a] - sample.changes if sample else None
            if sample is None or drift > max(sample.step, 64):
                _, sized = await self.reads.ask(a, W.Size(W.SIZE, board_id))
                step = max(1, -(-sized.value // self.cfg.approx_sample_points))
                changes_now = ctl.actor_changes[a]
                _, sampled = await self.reads.ask(a, W.Sample(W.SAMPLE, board_id, step))
                ctl.samples[a] = sample = KeySample(changes_now, step, sampled.keys)
                drift = ctl.actor_changes[a] - sample.changes
            step = sample.step
            below = bisect.bisect_left(sample.keys, key)
            # The true count on this actor lies in [below*step, below*step + parts*(step-1)]
            # at sampling time, and each later change moves it by at most one.
            spread = ctl.parts_on[a] * (step - 1)
            est += below * step + spread // 2
            bound += spread - spread // 2 + drift
        return _player_view(ctl.version, row, est, approximate=True, bound=bound)

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False) -> Page:
        """The window around a player. With ``ties``, a second round in the
        same read cut counts the values strictly better than the window's first."""
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            arch, i = self._archived_row(ctl, player_id)
            if i >= arch.ranked:
                raise PlayerNotRanked(f"Player {player_id!r} is not ranked on board {board_id!r}.", "player_id")
            entries = arch.entries(i - radius, i + radius + 1)
            if ties:
                entries = with_tied_ranks(entries, arch.tied_rank(entries[0].rank - 1))
            return Page(arch.info.version, tuple(entries))

        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]

        def window(key: list) -> dict:
            return {a: self.reads.ask(a, W.Nbrs(W.NBRS, board_id, key, radius, radius)) for a in ctl.actors}

        async def attempt():
            await self.cut.acquire_read()
            try:
                # As player(): with the last seen key, the row read and the
                # windows go out in one round; a moved key costs a second.
                guess = self.rank_keys.get(board_id, player_id)
                got = self.reads.ask(owner, W.Get(W.GET, board_id, player_id))
                futs = window(guess) if guess is not None else {}
                off, mine = await got
                row = None if mine.row is None else W.RowWire(*mine.row)
                key = None if row is None else row.key
                if key is None or key != guess:
                    await asyncio.gather(*futs.values(), return_exceptions=True)
                    self.rank_keys.put(board_id, player_id, key)
                    if row is None:
                        raise PlayerNotFound(f"Player {player_id!r} has no row on board {board_id!r}.", "player_id")
                    if key is None:
                        raise PlayerNotRanked(f"Player {player_id!r} is not ranked on board {board_id!r}.",
                                              "player_id")
                    futs = window(key)
                answers = {a: await f for a, f in futs.items()}
                rank = 1 + sum(ans.above for _, ans in answers.values())
                conv = _wire_entries
                me = (tuple(row.key or ()), row.value, row.achieved_at, row.metadata,
                      None if row.subscores is None else tuple(row.subscores))
                entries = merge_window(rank, me, [conv(a.before) for _, a in answers.values()],
                                       [conv(a.after) for _, a in answers.values()], radius)
                offsets = {off} | {o for o, _ in answers.values()}
                if ties:
                    probe = list(better_primary_probe(self._wire_primary(ctl, entries[0].value),
                                                      self._wire_mid(ctl, entries[0].subscores)))
                    better = await self.fan(ctl, lambda a: W.Count(W.COUNT, board_id, probe))
                    offsets |= {o for o, _ in better.values()}
                    entries = with_tied_ranks(entries, 1 + sum(ans.value for _, ans in better.values()))
            finally:
                await self.cut.release_read()
            version = sum(ans.version for _, ans in answers.values())
            return offsets, Page(version, tuple(entries))

        return await self.consistent(attempt, ctl)

    @staticmethod
    def _archived_row(ctl: BoardCtl, player_id: str) -> tuple[ArchiveView, int]:
        arch = ctl.archive
        assert arch is not None
        i = arch.find(player_id)
        if i < 0:
            raise PlayerNotFound(f"Player {player_id!r} has no row on board {ctl.spec.board_id!r}.", "player_id")
        return arch, i

    @staticmethod
    def _archive_version(ctl: BoardCtl, at_version: int | None, what: str) -> int:
        """An archived board's version; a cursor pinned to another one is expired."""
        assert ctl.archive is not None
        version = ctl.archive.info.version
        if at_version is not None and at_version != version:
            raise ViewExpired(f"That {what}'s version is no longer retained: fetch page 1 again.", "cursor")
        return version

    @staticmethod
    def _wire_primary(ctl: BoardCtl, value: int) -> int:
        """The first item of a wire key with this value (negated on descending boards)."""
        return value if ctl.spec.policy is Policy.FASTEST_TIME else -value

    @staticmethod
    def _wire_mid(ctl: BoardCtl, subscores) -> list[int]:
        """The subscores of a wire key with these subscores (each negated when descending)."""
        return [s if d == "asc" else -s for s, d in zip(subscores or (), ctl.spec.subscores)]

    async def ranked_subset(self, board_id: str, player_ids: Sequence[str], ties: bool = False) -> Page:
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            local = ctl.archive.subset(player_ids)
            return Page(ctl.archive.info.version, tuple(with_tied_ranks(local, 1) if ties else local))
        by_actor: dict[int, list[str]] = defaultdict(list)
        for pid in dict.fromkeys(player_ids):
            by_actor[ctl.part_actor[part_of(pid, ctl.spec.shards)]].append(pid)

        async def attempt():
            answers = await self.fan(ctl, lambda a: W.MGet(W.MGET, board_id, by_actor.get(a, [])))
            version = sum(ans.version for _, ans in answers.values())
            entries = [e for _, ans in answers.values() for e in _wire_entries(ans.value)]
            local = rank_locally(entries)
            return {o for o, _ in answers.values()}, Page(version, tuple(with_tied_ranks(local, 1) if ties else local))

        return await self.consistent(attempt, ctl)

    async def cohort(self, board_id: str, player_id: str | None = None, cohort: str | None = None,
                     ties: bool = False) -> CohortView:
        """A league cohort (docs/api.md §16), named by ``cohort`` ("<tier>-<n>")
        or as ``player_id``'s: its members ranked locally like a friends view
        (one round to the partitions), each with its zone. Raises
        BoardNotFound, CohortNotFound (no such cohort, or no league),
        PlayerNotFound (the player has not entered)."""
        ctl = self.registry.ctl(self.resolve(board_id))
        league = ctl.admission.league
        if league is None:
            raise CohortNotFound(f"Board {board_id!r} is not a league: it has no cohorts.", "cohort")
        if player_id is not None:
            g = league.cohort_of(player_id)
            if g is None:
                raise PlayerNotFound(f"Player {player_id!r} has not entered board {board_id!r}.", "player_id")
        else:
            where = None if cohort is None else parse_cohort_id(cohort)
            g = None if where is None else league.find(*where)
            if g is None:
                raise CohortNotFound(f"Board {board_id!r} has no cohort {cohort!r}.", "cohort")
        got = league.get(g)
        page = await self.ranked_subset(ctl.spec.board_id, got.members, ties)
        k = len(page.entries)
        return CohortView(page.version, got.tier, got.cohort_id, len(got.members), page.entries,
                          tuple(zone(e.rank, k, got.tier, league.spec) for e in page.entries), ctl.spec.board_id)

    def _league_of(self, board_id: str, what: str):
        """(board control, league table) of the board a read of ``board_id`` answers from (a series: its
        current instance); CohortNotFound when it is no league."""
        ctl = self.registry.ctl(self.resolve(board_id))
        league = ctl.admission.league
        if league is None:
            raise CohortNotFound(f"Board {board_id!r} is not a league: it has no {what}.", "board_id")
        return ctl, league

    async def cohorts(self, board_id: str, tier: int | None = None, after: tuple[int, int] | None = None,
                      limit: int = 100) -> CohortsPage:
        """A league's cohorts by tier, then number (docs/api.md §18), from the router's league table: no
        shard call. ``version``: the board's version at this read."""
        ctl, league = self._league_of(board_id, "cohorts")
        rows, more = league.listing(tier, after, limit)
        items = tuple(CohortSummary(cohort_id(t, n), t, k) for t, n, k in rows)
        return CohortsPage(ctl.spec.board_id, ctl.version, items, (rows[-1][0], rows[-1][1]) if more else None)

    async def tier(self, board_id: str, player_id: str) -> PlayerTier:
        """The tier ``player_id`` has on a league board, or would enter it at (docs/api.md §18). O(1)."""
        ctl, league = self._league_of(board_id, "tiers")
        tier, entered = league.tier_of(player_id)
        return PlayerTier(ctl.spec.board_id, player_id, tier, entered)

    async def awards(self, board_id: str, start: int = 0, limit: int = 100) -> AwardsPage:
        """A page of the board's awards in award order (docs/api.md §16), each
        with its webhook delivery state. A board without prizes, or not
        FINALIZED yet, has none; AwardsPending while a FINALIZED board's
        awards are being logged."""
        ctl = self.registry.ctl(board_id)
        if ctl.awards_due:  # FINALIZED, its awards still being logged: no page may look like the last one
            raise AwardsPending(f"Board {board_id!r} is FINALIZED and its awards are being computed; retry in a "
                                "moment.", None, retry_after=1)
        table = ctl.awards
        rows = [] if table is None else table.page(start, limit)
        end = start + len(rows)
        return AwardsPage(self._award_views(ctl, rows), end if table is not None and end < len(table) else None)

    def _award_views(self, ctl: BoardCtl, rows: list) -> tuple[Award, ...]:
        """Logged awards (:class:`engine.core.prizes.AwardRow`) with their webhook delivery state."""
        table, delivery = ctl.awards, self.registry.delivery
        states = delivery(ctl.spec.board_id, [table.part_of(r.seq) for r in rows]) \
            if rows and delivery and table is not None else None
        return tuple(Award(r.award_id, r.player_id, r.rank, r.cohort, r.reward,
                           *(states[i] if states is not None else ("pending", 0))) for i, r in enumerate(rows))

    async def player_data(self, player_id: str) -> PlayerData:
        """Everything held about ``player_id`` (docs/api.md §17): per board (a series' instances, not the
        series) their row, history, held events and awards, boards in id order, those holding nothing left
        out. Raises PlayerNotFound when no board holds anything. One row and one history read per board."""

        async def one(board_id: str, ctl: BoardCtl) -> PlayerBoardData | None:
            try:
                row = await self.player(board_id, player_id)
            except PlayerNotFound:
                row = None
            try:
                history = tuple(await self.history(board_id, player_id))
            except BoardArchived:  # archived without its history (archive format 1): the log still has it
                history = ()
            held = tuple(h for h in ctl.admission.held.values() if h.player_id == player_id)
            awards = self._award_views(ctl, ctl.awards.of_player(player_id)) if ctl.awards is not None else ()
            entry = ctl.admission.entry.get(player_id) if len(ctl.admission.entry) else None
            joined = None if entry is None else entry.position
            league = ctl.admission.league
            where = None if league is None else league.where(player_id)
            cohort = None if where is None else cohort_id(*where)
            if row is None and not history and not held and not awards and joined is None and cohort is None:
                return None
            return PlayerBoardData(board_id, row, history, held, awards, joined, cohort)

        boards = [(b, c) for b, c in sorted(self.boards.items()) if c.spec.recurrence is None]
        got = await asyncio.gather(*(one(b, c) for b, c in boards))
        found = tuple(g for g in got if g is not None)
        if not found:
            raise PlayerNotFound(f"FlowRank holds nothing about player {player_id!r}.", "player_id")
        return PlayerData(player_id, found)

    async def changes(self, board_id: str, since_version: int | None, limit: int | None = None,
                      cursor: tuple[int, int] | None = None, deltas_only: bool = False,
                      ties: bool = False) -> Changes:
        """Contiguous deltas after ``since_version``, or one page of a snapshot
        (with ``ties``, its entries carry competition ranks, from the view).

        A snapshot is the whole ranked board at one version, served ``limit``
        rows (1..``max_snapshot_page``) at a time. Page 1 materialises the
        board once per (board, version) into the shared view cache; when rows
        remain it carries ``next_cursor = (version, offset)``, and a call with
        ``cursor`` serves the next page from that same version (``since_version``
        is then ignored) or raises ViewExpired once the view is gone and the
        board has moved on. Following the cursors yields every ranked row of
        the snapshot's version exactly once, in rank order, whatever writes
        arrive in between. ``deltas_only``: when the deltas are gone, answer an
        empty snapshot at the current version without asking any shard actor (the
        live hub, which keeps its own window). Page 1 costs O(n log k) for n
        ranked rows in k partitions; later pages O(limit).
        """
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        cap = self.cfg.max_snapshot_page
        limit = cap if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= cap:
            raise ValidationFailed(f"limit must be an integer in 1..{cap}.", "limit")
        if cursor is None:
            if since_version is None or since_version < 0:
                raise ValidationFailed("since_version must be >= 0.", "since_version")
            deltas = ctl.ring.since(since_version)
            if deltas is not None:
                return Changes("deltas", ctl.ring.version, from_version=since_version, deltas=tuple(deltas))
            if deltas_only:
                return Changes("snapshot", ctl.version)
            at_version, offset = None, 0
        else:
            at_version, offset = cursor
        if ctl.archive is not None:  # a board that no longer changes: pages straight from its archive
            version = self._archive_version(ctl, at_version, "snapshot")
            entries = _archive_page(ctl.archive, offset, limit, ties)
            more = offset + limit < ctl.archive.ranked
            return Changes("snapshot", version, entries=entries, next_cursor=(version, offset + limit) if more else None)
        version, view = await self._snapshot_view(ctl, at_version, keep=offset + limit)
        entries = _page_of(view, offset, limit, ties)
        more = offset + limit < len(view)
        return Changes("snapshot", version, entries=entries, next_cursor=(version, offset + limit) if more else None)

    async def _snapshot_view(self, ctl: BoardCtl, at_version: int | None, keep: int) -> tuple[int, list]:
        """The whole ranked board at ``at_version`` (None: now), from the view
        cache or materialised in one consistent cut. One view per (board,
        version) serves every client paging that version; it is cached when
        rows remain beyond ``keep`` and lives by the cache's rules (``view_ttl_s``,
        ``max_views``, ``max_snapshot_rows``), least recently read evicted first.
        Raises ViewExpired when ``at_version`` is neither cached nor current."""
        board_id = ctl.spec.board_id
        wanted = ctl.version if at_version is None else at_version
        view = self.view(board_id, wanted)
        if view is not None and view.complete:
            self.views.move_to_end((board_id, wanted))  # being paged: evict it last
            return wanted, view
        if at_version is not None:
            # Cheap check first: only a board still at that version can be re-read.
            if (await self.board(board_id)).version != at_version:
                raise ViewExpired("That snapshot's version is no longer retained: ask /changes again.", "cursor")
        version, lists = await self._tops(ctl, _ALL)
        if at_version is not None and version != at_version:
            raise ViewExpired("That snapshot's version is no longer retained: ask /changes again.", "cursor")
        view = _View(merge_top(lists, 0, sum(map(len, lists))) if lists else [], True)
        if len(view) > keep:
            self.remember_view(board_id, version, view, True)
            self._trim_views(self.cfg.max_snapshot_rows)
        return version, view

    async def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> AsyncIterator[Chunk]:
        """Every ranked row of the board at one version, best first, as column
        chunks of at most ``page_rows`` rows (docs/api.md §13, export).

        The version is pinned without a copy of the board here: in one
        consistent cut every shard actor writes its partitions' ranked rows, in rank
        order, to spill files (:meth:`_spill`); this iterator then merges them
        a block at a time (:class:`engine.core.export.Merge`) and removes them when
        it ends, however it ends. Writes made meanwhile never show. An
        ARCHIVED board's chunks are slices of its archive. The first chunk
        comes even when the board is empty, so a caller learns the version
        before any row. ``ties``: chunks carry ``tied_rank`` (§13). Raises
        BoardNotFound on the first step. Memory: a block per partition and
        the chunk in hand, whatever the board's size; time O(n log k) for n
        rows over k partitions (the shard actors' writing included).
        """
        if isinstance(page_rows, bool) or not isinstance(page_rows, int) or page_rows < 1:
            raise ValidationFailed("page_rows must be a positive integer.", "page_rows")
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        tied = TiedRanks() if ties else None
        if ctl.archive is not None:  # slices of the archive: nothing spilled
            arch = ctl.archive
            for start in range(0, max(arch.ranked, 1), page_rows):
                if start:
                    await asyncio.sleep(0)  # the loop in between chunks, as below
                rows = _archive_block(arch, start, min(start + page_rows, arch.ranked))
                yield Chunk(arch.info.version, start + 1, rows, tied.of(start + 1, rows.value, rows.sub) if tied else None,
                            raw_subscores(rows.sub, arch.subscore_directions)
                            if rows.sub is not None else (np.zeros((0, len(ctl.spec.subscores)), np.int64)
                                                          if ctl.spec.subscores else None))
            return
        version, files = await self._spill(ctl, min(page_rows, self.cfg.export_block_rows))
        await self._spills_written(ctl, files)
        sources = await self._spill_sources(ctl, files)
        try:
            merge = Merge([f.rows for f in files])
            rank = 1
            while True:
                for s in merge.wants():
                    merge.feed(s, await sources[s].next())
                got = merge.take()
                if got is None:
                    break
                for a in range(0, got.rows, page_rows):
                    if rank > 1:
                        # The loop in between chunks: reading a spill file never suspends, so without
                        # this a whole export (merge and the caller's rendering, ~0.5 s at 1M rows) ran
                        # as one step of the event loop, every read queued behind it (issue 29 item 2).
                        await asyncio.sleep(0)
                    part = got.slice(a, min(a + page_rows, got.rows))
                    yield Chunk(version, rank, part, tied.of(rank, part.value, part.sub) if tied else None,
                                raw_subscores(part.sub, ctl.spec.subscores))
                    rank += part.rows
            if rank == 1:  # (a board with subscores says so even empty: an empty subscores column)
                k = len(ctl.spec.subscores)
                yield Chunk(version, 1, Block.empty(), tied.of(1, Block.empty().value) if tied else None,
                            np.zeros((0, k), np.int64) if k else None)
        finally:
            await self._close_sources(ctl, sources, files[0].token if files else None)

    async def _spill(self, ctl: BoardCtl, block_rows: int) -> tuple[int, list]:
        """One consistent cut in which every shard actor writes the board's
        partitions to spill files: ``(version, [_Spilled])``. A cut whose
        actors answered from different log offsets is removed and taken again
        (:meth:`consistent`)."""
        board_id = ctl.spec.board_id

        async def attempt():
            token = uuid.uuid4().hex
            try:
                answers = await self.fan(ctl, lambda a: W.Spill(W.SPILL, board_id, token, block_rows))
            except BaseException:
                await self._drop_spills(ctl, token)
                raise
            offsets = {o for o, _ in answers.values()}
            if len(offsets) > 1:
                await self._drop_spills(ctl, token)
            version = sum(ans.version for _, ans in answers.values())
            files = [_Spilled(a, token, *W.SpillFile._make(f)) for a, (_, ans) in answers.items() for f in ans.value]
            return offsets, (version, files)

        return await self.consistent(attempt, ctl)

    async def _spills_written(self, ctl: BoardCtl, files: list) -> None:
        """Wait until the shard actors' spill threads have written every file of
        the cut (they pinned it at once and write it while they go on applying
        and answering): a ``SPILL_WAIT`` to each of them every few ms (1 ms,
        doubling to 20). A failed write removes the export's files everywhere
        and raises StorageUnavailable."""
        if not files:
            return
        token, waiting = files[0].token, sorted({f.actor for f in files})
        pause = 0.001
        try:
            while waiting:
                answers = await self.fan(ctl, lambda a: W.SpillDrop(W.SPILL_WAIT, ctl.spec.board_id, token), waiting)
                failed = [ans.value for _, ans in answers.values() if ans.value]
                if failed:
                    raise StorageUnavailable(f"An export's spill files could not be written ({failed[0]}); "
                                             "retry the export.")
                waiting = [a for a, (_, ans) in answers.items() if ans.value is None]
                if waiting:
                    await asyncio.sleep(pause)
                    pause = min(0.02, pause * 2)
        except BaseException:
            await self._drop_spills(ctl, token)
            raise

    async def _spill_sources(self, ctl: BoardCtl, files: list) -> list:
        """A block source per spill file: the file itself when this process
        can open it (its name removed at once, so the data goes with the last
        close whatever happens), else frames asked of its shard actor."""
        sources: list = []
        try:
            for f in files:
                reader = SpillReader.open(f.path, f.token) if self.cfg.export_read_files else None
                sources.append(_FileSource(reader) if reader is not None else
                               _ShardSource(self.reads, f.actor, ctl.spec.board_id, f.token, f.partition))
        except BaseException:
            await self._close_sources(ctl, sources, None)
            await self._drop_spills(ctl, files[0].token)
            raise
        return sources

    async def _close_sources(self, ctl: BoardCtl, sources: list, token: str | None) -> None:
        """Close the open files; shard actors still holding files of ``token`` remove them."""
        for src in sources:
            if isinstance(src, _FileSource):
                src.close()
        remote = {src.actor for src in sources if isinstance(src, _ShardSource)}
        if token is not None and remote:
            await self._drop_spills(ctl, token, remote)

    async def _drop_spills(self, ctl: BoardCtl, token: str, actors: set | None = None) -> None:
        """Ask shard actors to remove the spill files of ``token`` (best effort: a
        shard actor that is down empties its spill directory when it starts)."""
        for a in ctl.actors if actors is None else sorted(actors):
            try:
                await self.reads.ask(a, W.SpillDrop(W.SPILL_DROP, ctl.spec.board_id, token))
            except Exception:
                log.warning("could not remove export spill files %s on shard actor %d", token, a)

    def _trim_views(self, max_rows: int) -> None:
        """Evict least recently used views until they hold at most ``max_rows``
        rows together (the newest view always stays)."""
        total = sum(len(v) for _, v in self.views.values())
        while total > max_rows and len(self.views) > 1:
            _, (_, old) = self.views.popitem(last=False)
            total -= len(old)

    async def quarantine(self, board_id: str) -> list[HeldEvent]:
        return list(self.registry.ctl(self.resolve(board_id)).admission.held.values())

    async def history(self, board_id: str, player_id: str) -> list[HistoryEntry]:
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            got = ctl.archive.history(player_id)
            if got is None:  # written by a FlowRank before archives kept the history (format 1)
                raise BoardArchived(f"Board {board_id!r} was archived without its event history (archive format 1); "
                                    "the event log still holds every event.", "board_id")
            return got
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        _, got = await self.reads.ask(owner, W.Hist(W.HIST, board_id, player_id))
        items = [W.HistoryItem._make(h) for h in got.value]
        return [HistoryEntry(h.event_id, h.kind, h.value, h.achieved_at, h.outcome, h.invalidated, h.metadata)
                for h in items]

    async def checksum(self, board_id: str) -> Checksum:
        board_id = self.resolve(board_id)
        ctl = self.registry.ctl(board_id)
        if ctl.archive is not None:
            return Checksum(ctl.archive.info.version, ctl.archive.info.checksum)

        async def attempt():
            answers = await self.fan(ctl, lambda a: W.Sum(W.SUM, board_id))
            version = sum(ans.version for _, ans in answers.values())
            total = checksum_mod.combine(int(ans.value, 16) for _, ans in answers.values())
            return {o for o, _ in answers.values()}, Checksum(version, checksum_mod.render(total))

        return await self.consistent(attempt, ctl)

_ALL = 1 << 62  # a "top" read of every row


class _View(list):
    def __init__(self, entries, complete: bool):
        super().__init__(entries)
        self.complete = complete


def _page_of(prefix, offset: int, limit: int, ties: bool) -> tuple:
    """``prefix[offset:offset + limit]`` of a ranking prefix that starts at rank 1."""
    page = prefix[offset:offset + limit]
    if ties and page:
        page = with_tied_ranks(page, first_tied_in_prefix(prefix, offset))
    return tuple(page)


class _FileSource:
    """Blocks of a spill file this process opened."""

    def __init__(self, reader: SpillReader) -> None:
        self.reader = reader

    async def next(self) -> Block:
        block = self.reader.next()
        if block is None:
            raise StorageUnavailable("An export's spill file ended early; retry the export.")
        return block

    def close(self) -> None:
        self.reader.close()


class _ShardSource:
    """Blocks of a spill file on a shard actor this process cannot open (another
    node): one read per block, the file's frames as the actor reads them."""

    def __init__(self, reads: TurnBatcher, actor: int, board_id: str, token: str, partition: int) -> None:
        self.reads, self.actor, self.board_id, self.token, self.partition = reads, actor, board_id, token, partition
        self.at: int | None = None

    async def next(self) -> Block:
        _, got = await self.reads.ask(self.actor, W.SpillRead(W.SPILL_READ, self.board_id, self.token, self.partition,
                                                             self.at))
        raw, at = got.value
        if not raw:
            raise StorageUnavailable("An export's spill file ended early; retry the export.")
        self.at = at
        return Block.decode(raw)


def _archive_block(arch: ArchiveView, start: int, stop: int) -> Block:
    """Ranked rows ``start .. stop - 1`` of an archive as an export block (views of its columns)."""
    value, achieved = arch.value[start:stop], arch.achieved[start:stop]
    descending = arch.info.policy is not Policy.FASTEST_TIME
    io, mo = arch.id_offsets[start:stop + 1], arch.meta_offsets[start:stop + 1]
    if stop <= start:
        io = mo = np.zeros(1, np.int64)
    sub = None if arch.subs is None else key_subscores(arch.subs[start:stop], arch.subscore_directions)
    return Block(np.invert(value) if descending else value, achieved if descending else arch.submitted[start:stop],
                 value, achieved, arch.id_bytes[io[0]:io[-1]], io - io[0], arch.meta_bytes[mo[0]:mo[-1]], mo - mo[0],
                 sub)


def _archive_page(arch: ArchiveView, offset: int, limit: int, ties: bool) -> tuple:
    """Ranks offset+1 .. offset+limit of an archive (with ``ties``, competition ranks)."""
    page = arch.top(offset, limit)
    if ties and page:
        page = with_tied_ranks(page, arch.tied_rank(offset))
    return tuple(page)


def _wire_entries(es: list) -> list:
    """Wire entries (:class:`engine.core.wire.Entry`, as sent) as ranking entries
    ``(key, value, achieved_at, metadata)`` (metadata None when the row has none).
    Unpacked in the Entry's field order (asserted below): this runs per entry of
    every top read, and builds no Entry. A board with subscores sends two more
    fields (docs/api.md §14): the key is then ``(primary, *mid, tie, player_id)``."""
    if es and len(es[0]) > 6:
        return [((primary, *mid, tie, player_id), value, achieved_at, metadata, tuple(subs))
                for primary, tie, player_id, value, achieved_at, metadata, mid, subs in es]
    return [((primary, tie, player_id), value, achieved_at, metadata)
            for primary, tie, player_id, value, achieved_at, metadata in es]


assert W.Entry._fields == ("primary", "tie", "player_id", "value", "achieved_at", "metadata", "mid", "subscores")


class _Spilled(NamedTuple):
    """One partition's spill file of an export's cut, on shard actor ``actor``."""

    actor: int
    token: str
    partition: int
    path: str
    rows: int


def _player_view(version: int, row: W.RowWire, rank: int | None, approximate: bool = False,
                 bound: int | None = None) -> PlayerView:
    status = RowStatus.ACTIVE if row.ranked else RowStatus.INVALIDATED
    return PlayerView(version, row.player_id, rank if row.ranked else None, row.value, row.achieved_at, status,
                      row.row_version, approximate, bound if approximate else None, metadata=row.metadata,
                      subscores=None if row.subscores is None else tuple(row.subscores))
