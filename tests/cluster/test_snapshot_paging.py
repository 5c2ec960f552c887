"""A /changes snapshot of a 3-partition, 50k-row board paged through Ray
shard actors while writes arrive (docs/api.md §9)."""

from __future__ import annotations

import asyncio

import pytest

from engine.cluster import ClusterEngine
from engine.core.errors import ViewExpired
from tests import snapshot_paging as sp

pytestmark = pytest.mark.cluster
BOARD = "g:m:s:snap"


def test_snapshot_pages_exactly_once_on_ray(ray_session, tmp_path):
    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=3, delta_retention=50)
        try:
            await sp.open_board(eng, BOARD, shards=3)
            writer = sp.Writer(eng, BOARD, seed=41)
            await writer.load(50_000)
            version, entries, pages = await sp.page_while_writing(eng, writer, since=0, limit=5_000)
            assert pages == 10 and len(entries) == 50_000
            sp.check_snapshot(writer, version, entries)
            assert (await eng.board(BOARD)).version > version
            eng.router.views.clear()
            with pytest.raises(ViewExpired):
                await eng.changes(BOARD, 0, 5_000, cursor=(version, 5_000))
        finally:
            await eng.close()

    asyncio.run(go())
