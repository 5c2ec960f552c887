"""Disk faults through the LocalService ``fault_hook`` seam (engine.log.port.FaultHook).

While the log cannot be written (ENOSPC, EROFS; at the write or at the
fsync): POST /v1/events answers 503 OVERLOADED with Retry-After, nothing is
acknowledged that is not durable (log end, version and checksum unchanged,
nothing there after a restart either), reads keep answering 200, and writes
succeed again by themselves once the fault clears (no restart).
"""

from __future__ import annotations

import errno
import os

import pytest

from tests.reliability.common import BOARD, H, event, open_app

pytestmark = pytest.mark.anyio


class Disk:
    """A switchable fault: raises ``OSError(code)`` before every op in ``ops``."""

    def __init__(self):
        self.code: int | None = None
        self.ops: set[str] | None = None  # None: every op
        self.hits = 0

    def __call__(self, op: str, path: str) -> None:
        if self.code is not None and (self.ops is None or op in self.ops):
            self.hits += 1
            raise OSError(self.code, os.strerror(self.code), path)

    def fail(self, code: int, ops: set[str] | None) -> None:
        self.code, self.ops = code, ops

    def clear(self) -> None:
        self.code = None


FAULTS = [
    pytest.param(errno.ENOSPC, {"write"}, id="ENOSPC-at-write"),
    pytest.param(errno.ENOSPC, {"fsync"}, id="ENOSPC-at-fsync"),
    pytest.param(errno.EROFS, None, id="EROFS-every-op"),
    pytest.param(errno.EIO, {"fsync"}, id="EIO-at-fsync"),
]


async def _reads_ok(a) -> None:
    for path, role in ((f"/v1/boards/{BOARD}", "reader"), (f"/v1/boards/{BOARD}/top?limit=5", "reader"),
                       (f"/v1/boards/{BOARD}/players/p-001", "reader"),
                       (f"/v1/boards/{BOARD}/players/p-001/around?radius=2", "reader"),
                       (f"/v1/boards/{BOARD}/changes?since_version=0", "reader"),
                       (f"/v1/boards/{BOARD}/players/p-001/history", "moderator"), ("/healthz", "reader")):
        r = await a.client.get(path, headers=H(role))
        assert r.status_code == 200, (path, r.status_code, r.text)


@pytest.mark.parametrize("code,ops", FAULTS)
async def test_write_fault_is_503_nothing_acknowledged_and_recovers_by_itself(tmp_path, code, ops):
    disk = Disk()
    data = tmp_path / "data"
    async with open_app(engine_kw={"data_dir": str(data), "fault_hook": disk, "snapshot_every_seconds": 3600}) as a:
        await a.seed(20)
        before = await a.fingerprint()
        end_before = a.engine.event_log.end_offset()
        disk.fail(code, ops)
        faulted = [event(1000 + i, player="p-fault", value=10**6 + i) for i in range(3)]
        for attempt in range(3):  # repeated failures stay clean
            r = await a.client.post("/v1/events", json={"events": faulted}, headers=H("game_server"))
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "OVERLOADED"
            assert int(r.headers["Retry-After"]) >= 1
        assert disk.hits >= 1
        # Nothing acknowledged, nothing applied, nothing in the log.
        assert await a.fingerprint() == before
        assert a.engine.event_log.end_offset() == end_before
        r = await a.client.get(f"/v1/boards/{BOARD}/players/p-fault", headers=H("reader"))
        assert r.status_code == 404
        await _reads_ok(a)
        # Board creation and moderation writes fail cleanly too.
        r = await a.client.post("/v1/boards", json={"board_id": "x:y:z:w", "policy": "best_score"},
                                headers=H("admin"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "OVERLOADED", r.text
        r = await a.client.post(f"/v1/boards/{BOARD}/invalidations",
                                json={"event_id": "evt-1", "reason": "t", "moderator": "m"}, headers=H("moderator"))
        assert r.status_code == 503, r.text
        assert await a.fingerprint() == before
        # The fault clears: the same ids are judged afresh and applied, no restart.
        disk.clear()
        r = await a.client.post("/v1/events", json={"events": faulted}, headers=H("game_server"))
        assert r.status_code == 200, r.text
        outcomes = [x["outcome"] for x in r.json()["results"]]
        assert outcomes[0] == "APPLIED_FIRST_SCORE" and "DUPLICATE_IGNORED" not in outcomes, outcomes
        after = await a.fingerprint()
        assert after[0] == before[0] + 3
        r = await a.client.get(f"/v1/boards/{BOARD}/players/p-fault/history", headers=H("moderator"))
        assert [h["event_id"] for h in r.json()["events"]] == [e["event_id"] for e in faulted]
    # Durable and exactly once after a restart on the same directory.
    async with open_app(engine_kw={"data_dir": str(data)}) as b:
        assert await b.fingerprint() == after
        r = await b.client.get(f"/v1/boards/{BOARD}/players/p-fault/history", headers=H("moderator"))
        assert [h["event_id"] for h in r.json()["events"]] == [e["event_id"] for e in faulted]


async def test_faulted_batch_is_not_there_after_a_crash(tmp_path):
    """A batch whose fsync failed is gone after a crash-restart (no close, no
    final snapshot): the truncated tail is not resurrected."""
    disk = Disk()
    data = tmp_path / "data"
    async with open_app(engine_kw={"data_dir": str(data), "fault_hook": disk}) as a:
        await a.seed(10)
        before = await a.fingerprint()
        disk.fail(errno.ENOSPC, {"fsync"})
        r = await a.client.post("/v1/events", json={"events": [event(500, player="p-ghost")]},
                                headers=H("game_server"))
        assert r.status_code == 503
        disk.clear()
        # Copy the directory as a crash would leave it (the service is still open).
        import shutil

        shutil.copytree(data, tmp_path / "crashed", ignore=shutil.ignore_patterns("LOCK"))
    async with open_app(engine_kw={"data_dir": str(tmp_path / "crashed")}) as b:
        assert await b.fingerprint() == before
        r = await b.client.get(f"/v1/boards/{BOARD}/players/p-ghost", headers=H("reader"))
        assert r.status_code == 404


async def test_readyz_while_the_log_is_failing(tmp_path):
    """Documented behaviour (docs/guarantees.md): /readyz reflects only
    whether the service is open, not the disk; it stays 200 during a log
    fault. Writes themselves answer 503 OVERLOADED + Retry-After."""
    disk = Disk()
    async with open_app(engine_kw={"data_dir": str(tmp_path / "d"), "fault_hook": disk}) as a:
        await a.seed(5)
        assert (await a.client.get("/readyz")).status_code == 200
        disk.fail(errno.ENOSPC, {"write"})
        r = await a.client.post("/v1/events", json={"events": [event(99)]}, headers=H("game_server"))
        assert r.status_code == 503
        ready = await a.client.get("/readyz")
        assert ready.status_code in (200, 503)
        if ready.status_code == 503:
            assert ready.headers.get("Retry-After")
        disk.clear()
        r = await a.client.post("/v1/events", json={"events": [event(99)]}, headers=H("game_server"))
        assert r.status_code == 200
        assert (await a.client.get("/readyz")).status_code == 200


async def test_readyz_is_503_while_the_log_is_failing(tmp_path):
    disk = Disk()
    async with open_app(engine_kw={"data_dir": str(tmp_path / "d"), "fault_hook": disk}) as a:
        await a.seed(5)
        disk.fail(errno.ENOSPC, {"write"})
        r = await a.client.post("/v1/events", json={"events": [event(99)]}, headers=H("game_server"))
        assert r.status_code == 503
        assert (await a.client.get("/readyz")).status_code == 503


async def test_snapshot_fault_does_not_disturb_writes(tmp_path):
    """A failing snapshot store (ENOSPC on snapshot writes only) loses nothing:
    writes keep being acknowledged and a restart replays the log."""
    disk = Disk()
    data = tmp_path / "data"
    async with open_app(engine_kw={"data_dir": str(data), "fault_hook": disk}) as a:
        await a.seed(10)
        disk.fail(errno.ENOSPC, {"snapshot.write", "snapshot.fsync", "snapshot.rename"})
        try:
            await a.engine.snapshot()
        except Exception as e:  # a failed snapshot may surface; it must not break anything
            assert "Storage" in type(e).__name__ or isinstance(e, OSError), repr(e)
        r = await a.client.post("/v1/events", json={"events": [event(200 + i) for i in range(5)]},
                                headers=H("game_server"))
        assert r.status_code == 200, r.text
        after = await a.fingerprint()
        disk.clear()
    async with open_app(engine_kw={"data_dir": str(data)}) as b:
        assert await b.fingerprint() == after
