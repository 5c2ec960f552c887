"""Child process for tests/service/test_webhooks.py (run as a script, then SIGKILLed).

Usage: webhook_service_child.py DATA_DIR URL PLAYERS

Opens a LocalService on DATA_DIR with webhooks to URL. The first time (no
board yet) it creates a board with prizes for every rank, PLAYERS players,
FROZEN then FINALIZED, and prints ``FINALIZED <awards>``; every time it then
prints ``OPEN`` and serves (delivers) until killed.
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from engine.core.errors import BoardNotFound  # noqa: E402
from engine.core.model import BoardSpec, BoardState, Policy, Prize, ScoreEvent  # noqa: E402
from engine.runtime.local import LocalService  # noqa: E402
from engine.runtime.outbox_feed import WebhookConfig  # noqa: E402

BOARD = "g:hooks:s1:x"


async def main(data_dir: str, url: str, players: int) -> None:
    svc = await LocalService.open(data_dir=data_dir, n_shards=2, webhooks=WebhookConfig(url))
    try:
        await svc.board(BOARD)
    except BoardNotFound:
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2,
                                         prizes=(Prize(1, 1, '{"gems":1000}'), Prize(2, 10**6, '{"gems":1}'))))
        await svc.submit([ScoreEvent(BOARD, f"e{i}", f"p{i}", i % 97, i, i) for i in range(players)])
        for state in (BoardState.FROZEN, BoardState.FINALIZED):
            await svc.set_state(BOARD, state)
        print(f"FINALIZED {len((await svc.awards(BOARD, 0, 10**6)).awards)}", flush=True)
    print("OPEN", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
