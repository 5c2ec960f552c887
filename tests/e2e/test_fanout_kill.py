"""``flowrank serve`` SIGKILLed during a stream of fan-out batches (docs/api.md
§15: every result of one request is durable together or not at all).

Posters send batches whose events each carry ``board_ids`` (2-4 of four
boards: 1, 2 and 3 partitions, and a series). The whole process group is
killed with batches in flight, the server restarts on the same data
directory, and every event sent (acknowledged or not) is sent again: on each
of its boards the redelivery is DUPLICATE_IGNORED exactly when the event
survived there. Oracle: for every event the answers are all duplicates or
none is (on all of its boards or on none), and every acknowledged event is a
duplicate everywhere. Uses the harness of tests/e2e/test_serve_kill.py.
"""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from tests.e2e.test_serve_kill import H, Served  # served_factory: tests/e2e/conftest.py

BOARDS = {"e2e:fan:S1:a": 1, "e2e:fan:S1:b": 2, "e2e:fan:S1:c": 3}
SERIES = "e2e:fan:daily:s"
TARGETS = [*BOARDS, SERIES]
BATCH = 40


def make_batch(rng: random.Random, first: int) -> list[dict]:
    now = time.time_ns() // 1_000_000
    return [{"event_id": f"f{first + i}", "board_ids": rng.sample(TARGETS, rng.randint(2, 4)),
             "player_id": f"p{rng.randrange(50)}", "value": rng.randrange(1, 1000), "achieved_at": now}
            for i in range(BATCH)]


class FanIngest:
    def __init__(self, url: str, batches: int, posters: int = 4, seed: int = 7):
        self.url, self.batches, self.posters = url, batches, posters
        self.rng = random.Random(seed)
        self.sent: dict[str, dict] = {}
        self.acked: set[str] = set()
        self.acked_batches = 0
        self._next = 0

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as c:
            await asyncio.gather(*(self._poster(c) for _ in range(self.posters)))

    async def _poster(self, c: httpx.AsyncClient) -> None:
        while self._next < self.batches:
            events = make_batch(self.rng, self._next * BATCH)
            self._next += 1
            for e in events:
                self.sent[e["event_id"]] = e
            try:
                r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
            except httpx.TransportError:
                return  # the server is gone
            if r.status_code != 200:
                continue
            results = r.json()["results"]
            assert [(x["event_id"]) for x in results] == [e["event_id"] for e in events for _ in e["board_ids"]]
            self.acked.update(e["event_id"] for e in events)
            self.acked_batches += 1


def test_sigkill_during_fan_out_batches_leaves_each_event_on_all_of_its_boards_or_none(served_factory):  # noqa: F811
    s: Served = served_factory("local")
    s.start()
    for board, shards in BOARDS.items():
        r = httpx.post(f"{s.url}/v1/boards", json={"board_id": board, "policy": "cumulative", "shards": shards},
                       headers=H("admin"), timeout=30)
        assert r.status_code == 201, r.text
    r = httpx.post(f"{s.url}/v1/boards", json={"board_id": SERIES, "policy": "best_score", "shards": 2,
                                                "recurrence": {"every": "day"}}, headers=H("admin"), timeout=30)
    assert r.status_code == 201, r.text

    ingest = FanIngest(s.url, batches=2_000)

    async def go():
        task = asyncio.ensure_future(ingest.run())
        while ingest.acked_batches < 15 and not task.done():
            await asyncio.sleep(0.005)
        assert not task.done(), "ingest finished before the kill: raise the batch count"
        await asyncio.to_thread(s.kill)
        await asyncio.wait_for(task, 60)

    asyncio.run(go())
    assert ingest.acked and len(ingest.sent) > len(ingest.acked)  # killed with batches in flight
    s.start()
    try:
        partial, lost, survived = [], [], 0
        with httpx.Client(base_url=s.url, timeout=60) as c:
            ids = sorted(ingest.sent)
            for i in range(0, len(ids), 500):
                chunk = [ingest.sent[x] for x in ids[i:i + 500]]
                r = c.post("/v1/events", json={"events": chunk}, headers=H("game_server"))
                assert r.status_code == 200, r.text
                results = iter(r.json()["results"])
                for e in chunk:
                    there = [next(results)["outcome"] == "DUPLICATE_IGNORED" for _ in e["board_ids"]]
                    if any(there) and not all(there):
                        partial.append((e["event_id"], e["board_ids"], there))
                    if all(there):
                        survived += 1
                    elif e["event_id"] in ingest.acked:
                        lost.append(e["event_id"])
        assert not partial, f"{len(partial)} events on some of their boards only, e.g. {partial[:3]}"
        assert not lost, f"{len(lost)} acknowledged events lost, e.g. {lost[:3]}"
        assert survived >= len(ingest.acked)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server log:\n{s.tail()}") from None
    assert s.terminate() == 0, s.tail()
