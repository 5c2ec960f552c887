"""Router.export (docs/api.md §13): every ranked row at the version of its first
page, best first, in pages, whatever writes arrive and whatever the view cache
evicts meanwhile; checked against the brute-force oracle."""

from __future__ import annotations

import asyncio

import pytest

from engine.errors import BoardNotFound, ValidationFailed
from engine.service import LocalService
from tests import snapshot_paging as sp

BOARD = "g:m:s:export"


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def test_export_pages_stay_at_the_first_version_while_writes_arrive_and_the_cache_empties(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=3, delta_retention=50)
        try:
            await sp.open_board(svc, BOARD, shards=3)
            writer = sp.Writer(svc, BOARD, seed=13)
            await writer.load(20_000)
            pages = svc.export(BOARD, 3_000)
            first = await pages.__anext__()
            entries, n = list(first.entries), 1
            async for page in pages:
                await writer.step()  # rows move across pages, new players arrive, one invalidation
                svc.router.views.clear()  # the shared cache forgets the view: the export holds its own
                assert page.version == first.version and 0 < len(page.entries) <= 3_000
                entries.extend(page.entries)
                n += 1
            assert n == 7 and len(first.entries) == 3_000
            sp.check_snapshot(writer, first.version, entries)
            assert (await svc.board(BOARD)).version > first.version
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_export_of_an_empty_or_unknown_board(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await sp.open_board(svc, BOARD, shards=2)
            got = [p async for p in svc.export(BOARD)]
            assert len(got) == 1 and got[0].version == 0 and got[0].entries == ()
            with pytest.raises(BoardNotFound):
                await svc.export("g:m:s:none").__anext__()
            with pytest.raises(ValidationFailed):
                await svc.export(BOARD, 0).__anext__()
        finally:
            await svc.close()

    loop.run_until_complete(go())
