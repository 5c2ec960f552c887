"""Child process for tests/engine/test_webhook_delivery.py (run as a script, then SIGKILLed).

Usage: webhook_child.py OUTBOX_DIR URL PUTS PER_PUT

Opens the outbox, starts a WebhookDelivery to URL, and puts PUTS records of
PER_PUT messages each (log offsets 0, 2, 4, ...), printing ``PUT <offset>``
after each put returned, while delivery runs. Then delivers forever.
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from engine.core.webhooks import Message, award_message  # noqa: E402
from engine.log.outbox import Outbox  # noqa: E402
from engine.runtime.webhooks import WebhookDelivery, epoch_ms  # noqa: E402

SECRET = b"test-webhook-secret"


def record_messages(log_offset: int, n: int, created_ms: int | None = None) -> list[Message]:
    """The awards of one log record (created now unless ``created_ms``): the same bodies every time."""
    created = epoch_ms() if created_ms is None else created_ms
    return [award_message(f"g:m:S{log_offset}:global", f"p-{i}", i + 1, None, {"gems": 10 * i}, log_offset,
                          created) for i in range(n)]


async def main(directory: str, url: str, puts: int, per_put: int) -> None:
    outbox = Outbox.open(directory)
    worker = WebhookDelivery(outbox, url, SECRET, backoff_ms=lambda n: 20, flush_ms=2, concurrency=8)
    await worker.start()
    for k in range(puts):
        await asyncio.to_thread(outbox.put, 2 * k, record_messages(2 * k, per_put))
        print(f"PUT {2 * k}", flush=True)
        worker.wake()
        await asyncio.sleep(0.01)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
