"""Webhooks through the service (docs/api.md §16): every board state change
and every award reaches a loopback receiver, signed, once per key with one
body, also when the server is killed (-9) in the middle of delivering, and
``GET …/awards`` shows the durable delivery state."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os

import pytest

from benchmarks.webhook_receiver import Receiver
from engine.core.model import BoardSpec, BoardState, LeagueSpec, Policy, Prize, ScoreEvent
from engine.runtime.local import LocalService
from engine.runtime.outbox_feed import WebhookConfig
from tests.child_process import Child

HERE = os.path.dirname(os.path.abspath(__file__))
B = "g:hooks:s1:x"


async def _until(predicate, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("partitions", [1, 3])
def test_states_and_awards_are_delivered_signed_once_each_with_durable_state(tmp_path, partitions):
    async def main():
        secret_file = tmp_path / "secret"
        secret_file.write_bytes(b"s3cret\n")
        receiver = Receiver(fail_ratio=0.3, verify=lambda body, sig: hmac.compare_digest(
            sig, "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()))
        url = await receiver.start()
        svc = await LocalService.open(data_dir=str(tmp_path / "data"), n_shards=3,
                                      webhooks=WebhookConfig(url, str(secret_file)))
        try:
            await svc.create_board(BoardSpec(B, Policy.BEST_SCORE, shards=partitions, league=LeagueSpec(3, 2, 1, 1),
                                             prizes=(Prize(1, 1, '{"gems":10}'), Prize(3, 3, '{"note":"é"}'))))
            await svc.submit([ScoreEvent(B, f"e{i}", f"p{i}", i % 4, i, i) for i in range(8)])
            for state in (BoardState.FROZEN, BoardState.FINALIZED):
                await svc.set_state(B, state)
            awards = (await svc.awards(B, 0, 100)).awards
            keys = {hashlib.sha256(f"award/{a.award_id}".encode()).hexdigest(): a for a in awards}
            keys |= {hashlib.sha256(f"state/{B}/{s}".encode()).hexdigest(): s for s in ("FROZEN", "FINALIZED")}
            await _until(lambda: set(receiver.accepted) == set(keys))
            assert receiver.mismatched == 0 and receiver.refused_signatures == 0
            info = await svc.board(B)
            for key, what in keys.items():
                body = json.loads(receiver.accepted[key])
                if isinstance(what, str):
                    assert body == {"type": "board_state", "board_id": B, "state": what, "version": info.version}
                else:
                    assert list(body) == ["type", "award_id", "board_id", "player_id", "rank", "cohort", "reward",
                                          "version"]
                    assert body == {"type": "award", "award_id": what.award_id, "board_id": B,
                                    "player_id": what.player_id, "rank": what.rank, "cohort": what.cohort,
                                    "reward": json.loads(what.reward), "version": info.version}
            await _until(lambda: svc.stats()["webhooks"]["pending"] == 0)
            shown = (await svc.awards(B, 0, 100)).awards
            assert {a.delivery for a in shown} == {"delivered"} and all(a.attempts >= 1 for a in shown)
            retried = [a for a in shown if receiver.fails_first(hashlib.sha256(f"award/{a.award_id}".encode())
                                                                .hexdigest())]
            assert all(a.attempts >= 2 for a in retried)
        finally:
            await svc.close()
            await receiver.stop()
        # a restart sends nothing again and keeps showing the delivery state
        receiver2 = Receiver()
        url2 = await receiver2.start()
        svc = await LocalService.open(data_dir=str(tmp_path / "data"), n_shards=3,
                                      webhooks=WebhookConfig(url2, str(secret_file)))
        try:
            assert [(a.award_id, a.delivery, a.attempts) for a in (await svc.awards(B, 0, 100)).awards] == \
                [(a.award_id, a.delivery, a.attempts) for a in shown]
            await asyncio.sleep(0.3)
            assert receiver2.attempts == 0
        finally:
            await svc.close()
            await receiver2.stop()

    asyncio.run(main())


def test_a_server_killed_while_delivering_delivers_every_award_once_per_key_after_restart(tmp_path):
    players = 3000

    async def main():
        receiver = Receiver(fail_ratio=0.3)
        url = await receiver.start()
        data = tmp_path / "data"
        try:
            with Child(os.path.join(HERE, "webhook_service_child.py"), data, url, players, timeout=120) as child:
                async def wait_line(prefix):
                    return await asyncio.to_thread(child.read_until, lambda line: line.startswith(prefix))
                line = await wait_line("FINALIZED")
                assert int(line.split()[1]) == players
                await _until(lambda: len(receiver.accepted) >= 300, 60)
                receiver.stall = True  # requests in flight when the server dies
                await asyncio.sleep(0.2)
                child.kill()
            assert len(receiver.accepted) < players + 2, "the kill came after every delivery"
            receiver.stall = False
            with Child(os.path.join(HERE, "webhook_service_child.py"), data, url, players, timeout=120) as child:
                await asyncio.to_thread(child.read_until, lambda line: line == "OPEN")
                await _until(lambda: len(receiver.accepted) == players + 2, 90)  # every award, FROZEN, FINALIZED
                child.kill()
            assert receiver.mismatched == 0  # every delivery of one key had the same body
            bodies = [json.loads(b) for b in receiver.accepted.values()]
            assert sorted(b["player_id"] for b in bodies if b["type"] == "award") == sorted(
                f"p{i}" for i in range(players))
        finally:
            await receiver.stop()

    asyncio.run(main())


def test_awards_finalized_while_no_webhook_was_set_are_delivered_once_one_is_set(tmp_path):
    """docs/api.md §18, last bullet: a board FINALIZED without --webhook-url (its awards then in the
    router snapshot, not in a log tail) has its awards delivered after a restart with one; until
    then they show pending with no attempt, and the pending metric counts them."""
    board = "g:hooks:late:x"
    data = str(tmp_path / "data")

    async def main():
        svc = await LocalService.open(data_dir=data, n_shards=2)
        try:
            await svc.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=2,
                                             prizes=(Prize(1, 1, '{"gems":10}'), Prize(2, 5, '{"gems":1}'))))
            await svc.submit([ScoreEvent(board, f"e{i}", f"p{i}", i, i, i) for i in range(8)])
            for state in (BoardState.FROZEN, BoardState.FINALIZED):
                await svc.set_state(board, state)
            await _until(lambda: len(svc.router.registry.boards[board].awards or ()) == 5)
            before = (await svc.awards(board, 0, 100)).awards
            assert [(a.delivery, a.attempts) for a in before] == [("pending", 0)] * 5
            assert svc.stats()["webhooks"] == {"pending": 5}  # awaiting a URL: counted
        finally:
            await svc.close()
        receiver = Receiver(fail_ratio=0.3)
        url = await receiver.start()
        svc = await LocalService.open(data_dir=data, n_shards=2, webhooks=WebhookConfig(url))
        try:
            keys = {hashlib.sha256(f"award/{a.award_id}".encode()).hexdigest() for a in before}
            await _until(lambda: svc.stats()["webhooks"]["pending"] + svc.stats()["webhooks"]["delivered"] >= 5)
            await _until(lambda: keys <= set(receiver.accepted))
            await _until(lambda: svc.stats()["webhooks"]["pending"] == 0)
            shown = (await svc.awards(board, 0, 100)).awards
            assert {a.delivery for a in shown} == {"delivered"} and all(a.attempts >= 1 for a in shown)
            bodies = {json.loads(receiver.accepted[k])["player_id"]: json.loads(receiver.accepted[k]) for k in keys}
            assert {p: (b["rank"], b["reward"]) for p, b in bodies.items()} == {
                a.player_id: (a.rank, json.loads(a.reward)) for a in shown}
            assert receiver.mismatched == 0
        finally:
            await svc.close()
            await receiver.stop()
        svc = await LocalService.open(data_dir=data, n_shards=2, webhooks=WebhookConfig(url))
        try:  # the next start puts nothing again
            assert svc.feed.outbox.count == svc.stats()["webhooks"]["delivered"]
            assert [a.delivery for a in (await svc.awards(board, 0, 100)).awards] == ["delivered"] * 5
        finally:
            await svc.close()

    asyncio.run(main())
