"""docs/operations.md "Receiving webhooks": its Python receiver, taken from the docs text,
verifies real signed deliveries from the worker (engine.runtime.webhooks) on 127.0.0.1,
handles each key once through first-attempt failures, and refuses a forged signature."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from benchmarks.webhook_receiver import OK, UNAUTHORIZED, UNAVAILABLE, Receiver
from engine.core import webhooks as wh
from engine.log.outbox import Outbox
from engine.runtime.webhooks import WebhookDelivery, epoch_ms, load_or_create_secret

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def receiver_example() -> dict:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Receiving webhooks", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(code, f"{DOC}:Receiving webhooks", "exec"), namespace)
    return namespace


def test_the_documented_receiver_verifies_real_deliveries(tmp_path):
    doc = receiver_example()
    data_dir = tmp_path / "data"
    secret = load_or_create_secret(data_dir)  # what flowrank serve signs with
    receiver_secret = (data_dir / "webhook_secret").read_bytes()  # what the operator copies to the receiver
    now = epoch_ms()
    messages = [wh.award_message("g:m:S1:global", f"p-{i}", i + 1, None, {"gems": 100 - i}, 9, now) for i in range(30)]
    messages.append(wh.state_message("g:m:S1:global", "FINALIZED", 9, now))
    seen: set = set()
    handled: list = []

    class DocReceiver(Receiver):
        def answer(self, key, signature, body):
            self.attempts += 1
            if key not in self.seen and self.fails_first(key):  # the receiver's own outage, before handling
                self.seen.add(key)
                return UNAVAILABLE
            self.seen.add(key)
            status = doc["receive"](receiver_secret, {"idempotency-key": key, "x-flowrank-signature": signature},
                                    body, seen, handled.append)
            return OK if status == 200 else UNAUTHORIZED

    async def run():
        r = DocReceiver(fail_ratio=0.3)
        with Outbox.open(str(data_dir / "outbox")) as ob:
            ob.put(0, messages)
            w = WebhookDelivery(ob, await r.start(), secret, backoff_ms=lambda n: 10, flush_ms=2)
            await w.start()
            deadline = asyncio.get_running_loop().time() + 10
            while ob.counts()["delivered"] < len(messages):
                assert asyncio.get_running_loop().time() < deadline, ob.counts()
                await asyncio.sleep(0.01)
            await w.stop()
        await r.stop()
        return r

    r = asyncio.run(run())
    assert sorted(map(json.dumps, handled)) == sorted(json.dumps(json.loads(m.body)) for m in messages)  # each once
    assert r.attempts > len(messages)  # some were retried, and still handled once
    assert seen == {wh.idempotency_key(m.message_id) for m in messages}

    body = messages[0].body
    good = wh.signature(secret, body)
    assert doc["verify_signature"](receiver_secret, body, good)
    assert not doc["verify_signature"](receiver_secret, body + b" ", good)
    assert not doc["verify_signature"](b"another secret", body, good)
    assert doc["receive"](receiver_secret, {"x-flowrank-signature": "sha256=00"}, body, set(), handled.append) == 401
