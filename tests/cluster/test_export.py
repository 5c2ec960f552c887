"""Router.export through Ray shard actors (docs/api.md §13): every ranked row
at the version of its first page while writes arrive and the view cache is
emptied, checked against the oracle."""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest

from engine.cluster import ClusterEngine
from tests import snapshot_paging as sp

pytestmark = pytest.mark.cluster
BOARD = "g:m:s:export"


def _spills() -> list[str]:
    root = os.path.join(tempfile.gettempdir(), "flowrank-spill")
    return [f for _, _, fs in os.walk(root) for f in fs if f.endswith(".spill")]


def test_export_is_pinned_on_ray(ray_session, tmp_path):
    async def go():
        eng = await ClusterEngine.open(data_dir=str(tmp_path), n_shards=3, delta_retention=50)
        try:
            await sp.open_board(eng, BOARD, shards=3)
            writer = sp.Writer(eng, BOARD, seed=43)
            await writer.load(20_000)
            chunks = eng.export(BOARD, 4_000)
            first = await chunks.__anext__()
            entries = first.entries()
            async for chunk in chunks:
                await writer.step()
                eng.router.views.clear()
                assert chunk.version == first.version
                entries.extend(chunk.entries())
            sp.check_snapshot(writer, first.version, entries)
            assert len(entries) == 20_000 and (await eng.board(BOARD)).version > first.version
            # the gateway runs on the shards' node: it read their spill files and removed them
            assert _spills() == []
            # as a gateway on another node would: every block asked of its shard actor
            eng.router.cfg.export_read_files = False
            remote = [c async for c in eng.export(BOARD, 4_000)]
            local = [c async for c in eng.export(BOARD, 4_000)]
            eng.router.cfg.export_read_files = True
            assert [e for c in remote for e in c.entries()] == [e for c in local for e in c.entries()]
            assert len({c.version for c in remote + local}) == 1 and _spills() == []
        finally:
            await eng.close()
        assert not os.path.exists(os.path.join(tempfile.gettempdir(), "flowrank-spill", eng.namespace))

    asyncio.run(go())
