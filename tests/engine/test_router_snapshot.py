"""Router.changes snapshots (docs/api.md §9): paged, pinned to one version,
every ranked row exactly once, on a 3-partition board of 50k+ rows."""

from __future__ import annotations

import asyncio

import pytest

from engine.core.errors import ValidationFailed, ViewExpired
from engine.runtime.local import LocalService
from tests import snapshot_paging as sp

BOARD = "g:m:s:snap"


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


async def _open(players: int, seed: int = 14):
    svc = await LocalService.open(data_dir=None, n_shards=3, delta_retention=50)
    await sp.open_board(svc, BOARD, shards=3)
    writer = sp.Writer(svc, BOARD, seed)
    await writer.load(players)
    return svc, writer


def test_snapshot_of_50k_rows_pages_exactly_once_while_writes_arrive(loop):
    async def go():
        svc, writer = await _open(50_000)
        try:
            before = len(svc.router.views)
            version, entries, pages = await sp.page_while_writing(svc, writer, since=0, limit=5_000)
            assert pages == 10 and len(entries) == 50_000  # the old bug: 2,000 rows and no sign of the rest
            sp.check_snapshot(writer, version, entries)
            now = await svc.board(BOARD)
            assert now.version > version + 9 * 100 and now.size > 50_000  # the board moved on meanwhile
            assert len(svc.router.views) == before + 1  # one shared view for the whole paging
            # A fresh snapshot is at the new version, and equal to the oracle there too.
            version2, entries2, _ = await sp.page_while_writing(svc, writer, since=0, limit=10_000)
            assert version2 >= now.version
            sp.check_snapshot(writer, version2, entries2)
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_clients_paging_one_version_share_one_view_and_match_top_pages(loop):
    async def go():
        svc, writer = await _open(3_000)
        try:
            a = await svc.changes(BOARD, 0, 1_000)
            b = await svc.changes(BOARD, 0, 700)
            assert a.version == b.version and len(svc.router.views) == 1
            view = next(iter(svc.router.views.values()))[1]
            assert view.complete and len(view) == 3_000
            # The snapshot view also serves top pages at that version beyond max_view_entries.
            top = await svc.top(BOARD, 2_500, 500, at_version=a.version)
            tail = await svc.changes(BOARD, 0, 500, cursor=(a.version, 2_500))
            assert tail.entries == top.entries and tail.next_cursor is None
            assert [e.rank for e in tail.entries] == list(range(2_501, 3_001))
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_a_snapshot_within_one_page_has_no_cursor_and_caches_nothing(loop):
    async def go():
        svc, writer = await _open(120)
        try:
            ch = await svc.changes(BOARD, 0)
            assert ch.kind == "snapshot" and ch.next_cursor is None and len(ch.entries) == 120
            sp.check_snapshot(writer, ch.version, ch.entries)
            assert len(svc.router.views) == 0
            last = await svc.changes(BOARD, 0, 60, cursor=(ch.version, 60))
            assert [e.rank for e in last.entries] == list(range(61, 121)) and last.next_cursor is None
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_a_cursor_whose_view_is_gone_expires_once_the_board_moved(loop):
    async def go():
        svc, writer = await _open(3_000)
        try:
            first = await svc.changes(BOARD, 0, 1_000)
            svc.router.views.clear()  # TTL or the row budget evicted it
            # The board has not moved: the page is read again at that same version.
            again = await svc.changes(BOARD, 0, 1_000, cursor=first.next_cursor)
            assert again.version == first.version and [e.rank for e in again.entries][0] == 1_001
            svc.router.views.clear()
            await writer.step()
            with pytest.raises(ViewExpired):
                await svc.changes(BOARD, 0, 1_000, cursor=again.next_cursor)
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_snapshot_views_stay_within_the_row_budget(loop):
    async def go():
        svc, writer = await _open(3_000)
        try:
            svc.router.cfg.max_snapshot_rows = 7_000
            pinned = []
            for _ in range(4):
                pinned.append(await svc.changes(BOARD, 0, 100))
                await writer.step(events=10)
            assert len({p.version for p in pinned}) == 4
            assert sum(len(v) for _, v in svc.router.views.values()) <= 7_000
            # the two newest views survive; the oldest is gone and its cursor expires
            await svc.changes(BOARD, 0, 100, cursor=pinned[-1].next_cursor)
            with pytest.raises(ViewExpired):
                await svc.changes(BOARD, 0, 100, cursor=pinned[0].next_cursor)
        finally:
            await svc.close()

    loop.run_until_complete(go())


@pytest.mark.parametrize("limit", [0, -1, 10_001, True, 2.5])
def test_limit_outside_1_to_10000_is_a_validation_error(loop, limit):
    async def go():
        svc, _ = await _open(10)
        try:
            with pytest.raises(ValidationFailed) as err:
                await svc.changes(BOARD, 0, limit)
            assert err.value.field == "limit"
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_deltas_only_never_reads_a_snapshot(loop):
    async def go():
        svc, _ = await _open(3_000)
        try:
            ch = await svc.changes(BOARD, 0, deltas_only=True)
            assert ch.kind == "snapshot" and ch.entries == () and ch.next_cursor is None
            assert len(svc.router.views) == 0
            recent = await svc.changes(BOARD, ch.version - 1, deltas_only=True)
            assert recent.kind == "deltas" and [d.version for d in recent.deltas] == [ch.version]
        finally:
            await svc.close()

    loop.run_until_complete(go())
