"""``python -m benchmarks.webhooks_bench``: webhook delivery rate (issue 27 item 4).

    python -m benchmarks.webhooks_bench [--messages 100000] [--fail-ratio 0.3] [--client streams|httpx]
                                        [--concurrency 32] [--per-put 100] [--loop uvloop|asyncio] [--json OUT]

One ``Outbox`` on a temporary directory on the data disk (fsync on) is filled
with ``--messages`` award messages in puts of ``--per-put`` (the put rate is
reported apart); then one ``WebhookDelivery`` (engine.runtime.webhooks) POSTs
them to a receiver in another process on 127.0.0.1
(benchmarks.webhook_receiver), which answers 503 to ``--fail-ratio`` of first
attempts (chosen by key) and 200 otherwise. The clock runs from ``start()``
until every message's delivered state is durable. The retry schedule is
shortened to 10 ms (the real one waits 1 s; that would measure the schedule,
not the worker).

Checks, by ``Idempotency-Key``: every message accepted, each with its exact
body; ``duplicates`` counts 2xx answers for a key already accepted (0 unless
results were lost). Prints the machine, parameters and load average;
:func:`run` returns the same numbers as a dict.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from engine.core import webhooks as wh
from engine.log.outbox import Outbox
from engine.runtime.webhooks import WebhookDelivery

from .machine import describe, header
from .webhook_receiver import Receiver

SECRET = b"bench-webhook-secret"


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=8).digest()


def _receiver_main(conn, fail_ratio: float, use_uvloop: bool) -> None:
    """The receiver process: send the URL, serve until told to stop, send what it saw."""

    async def main():
        r = Receiver(fail_ratio=fail_ratio)
        conn.send(await r.start())
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await r.stop()
        conn.send({"accepted": {k: _digest(b) for k, b in r.accepted.items()}, "attempts": r.attempts,
                   "duplicates": r.duplicates, "mismatched": r.mismatched})

    _run_loop(main(), use_uvloop)


def _run_loop(coro, use_uvloop: bool):
    if use_uvloop:
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


class HttpxTransport:
    """The same requests through ``httpx.AsyncClient`` (the comparison of the module docstring)."""

    def __init__(self, url: str, concurrency: int):
        import httpx

        self.url = url
        self.client = httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency,
                                                            max_keepalive_connections=concurrency))

    def prepare(self, body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        return body, headers

    async def send(self, prepared) -> int:
        body, headers = prepared
        return (await self.client.post(self.url, content=body, headers=headers)).status_code

    async def aclose(self) -> None:
        await self.client.aclose()


def _messages(off: int, n: int, created_ms: int) -> list[wh.Message]:
    board = f"bench:arena:S{off}:global"
    return [wh.award_message(board, f"p-{i:06d}", i + 1, None, {"gems": 10 * (n - i), "title": "champion"}, 1000 + off,
                             created_ms) for i in range(n)]


def run(n_messages: int, fail_ratio: float = 0.3, client: str = "streams", concurrency: int = 32,
        per_put: int = 100, use_uvloop: bool = True, data_dir: str | None = None, quiet: bool = False) -> dict:
    """Fill an outbox with ``n_messages``, deliver them all to a receiver process;
    returns messages/s, attempts and the exactly-once-by-key check."""
    params = {"messages": n_messages, "fail_ratio": fail_ratio, "client": client, "concurrency": concurrency,
              "per_put": per_put, "loop": "uvloop" if use_uvloop else "asyncio"}
    machine = describe()
    load_before = os.getloadavg()
    if not quiet:
        print(header(params, machine))
        print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min, before)",
              flush=True)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver_main, args=(child, fail_ratio, use_uvloop), daemon=True)
    proc.start()
    try:
        url = parent.recv()
        with tempfile.TemporaryDirectory(prefix="flowrank-webhooks-bench-", dir=data_dir) as tmp:
            out = _run_loop(_measure(Path(tmp), url, n_messages, client, concurrency, per_put), use_uvloop)
        parent.send("stop")
        seen = parent.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    expected = out.pop("expected")
    out["accepted"] = len(seen["accepted"])
    out["receiver_attempts"] = seen["attempts"]
    out["duplicates"] = seen["duplicates"]
    out["mismatched"] = seen["mismatched"]
    out["exactly_once_by_key"] = seen["accepted"] == expected and seen["mismatched"] == 0
    load_after = os.getloadavg()
    out |= {"machine": machine, "params": params, "load_before": load_before, "load_after": load_after}
    if not quiet:
        print(f"  put     : {n_messages:,} messages in {out['put_seconds']:.2f} s "
              f"({n_messages / out['put_seconds']:,.0f}/s, {per_put} per put, one fsync each)")
        print(f"  deliver : {out['messages_per_s']:,.0f} messages/s ({n_messages:,} in {out['deliver_seconds']:.2f} s, "
              f"{out['attempts']:,} attempts, {out['result_batches']} result batches)")
        print(f"  check   : {out['accepted']:,} keys accepted, {out['duplicates']} duplicates, "
              f"{out['mismatched']} mismatched bodies; exactly once by key: {out['exactly_once_by_key']}")
        print(f"  load    : {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (1/5/15 min, after)")
    return out


async def _measure(directory: Path, url: str, n: int, client: str, concurrency: int, per_put: int) -> dict:
    created = time.time_ns() // 1_000_000
    expected: dict[str, bytes] = {}
    batches = [0]

    def hook(op, _path):
        if op == "state.fsync":
            batches[0] += 1

    outbox = Outbox.open(str(directory / "outbox"), fault_hook=hook)
    t0 = time.perf_counter()
    for off, start in enumerate(range(0, n, per_put)):
        msgs = _messages(off, min(per_put, n - start), created)
        outbox.put(off, msgs)
        expected.update((wh.idempotency_key(m.message_id), _digest(m.body)) for m in msgs)
    put_s = time.perf_counter() - t0
    transport = HttpxTransport(url, concurrency) if client == "httpx" else None
    worker = WebhookDelivery(outbox, url, SECRET, concurrency=concurrency, backoff_ms=lambda k: 10,
                             transport=transport)
    t0 = time.perf_counter()
    await worker.start()
    while outbox.counts()["delivered"] < n:
        await asyncio.sleep(0.005)
    deliver_s = time.perf_counter() - t0
    stats = worker.stats()
    await worker.stop()
    outbox.close()
    return {"put_seconds": put_s, "deliver_seconds": deliver_s, "messages_per_s": n / deliver_s,
            "attempts": stats["attempts"], "result_batches": batches[0], "expected": expected}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.webhooks_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--fail-ratio", type=float, default=0.3)
    p.add_argument("--client", choices=("streams", "httpx"), default="streams")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--per-put", type=int, default=100)
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    p.add_argument("--data-dir", default=None, help="where the temporary outbox goes (default: the system's temp dir)")
    p.add_argument("--json", default=None, help="write the results here as JSON")
    args = p.parse_args(argv)
    out = run(args.messages, args.fail_ratio, args.client, args.concurrency, args.per_put, args.loop == "uvloop",
              args.data_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0 if out["exactly_once_by_key"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
