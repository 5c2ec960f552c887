"""Router.export through Ray shard actors (docs/api.md §13): every ranked row
at the version of its first page while writes arrive and the view cache is
emptied, checked against the oracle."""

from __future__ import annotations

import asyncio

import pytest

from engine.cluster import ClusterEngine
from tests import snapshot_paging as sp

pytestmark = pytest.mark.cluster
BOARD = "g:m:s:export"


def test_export_is_pinned_on_ray(ray_session, tmp_path):
    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=3, delta_retention=50)
        try:
            await sp.open_board(eng, BOARD, shards=3)
            writer = sp.Writer(eng, BOARD, seed=43)
            await writer.load(20_000)
            pages = eng.export(BOARD, 4_000)
            first = await pages.__anext__()
            entries = list(first.entries)
            async for page in pages:
                await writer.step()
                eng.router.views.clear()
                assert page.version == first.version
                entries.extend(page.entries)
            sp.check_snapshot(writer, first.version, entries)
            assert len(entries) == 20_000 and (await eng.board(BOARD)).version > first.version
        finally:
            await eng.close()

    asyncio.run(go())
