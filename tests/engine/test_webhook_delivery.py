"""engine.runtime.webhooks: delivery to a loopback receiver. Every message
delivered, each key with one body, through first-attempt failures, timeouts,
a receiver that is down, give-up, lost results and a kill -9."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import stat
import threading
import time

import numpy as np
import pytest

from benchmarks.webhook_receiver import Receiver
from engine.core import webhooks as wh
from engine.log.outbox import Outbox
from engine.runtime.webhooks import StreamsTransport, Target, WebhookDelivery, load_or_create_secret
from tests.child_process import Child
from tests.engine.webhook_child import SECRET, record_messages
from tests.log.conftest import FsyncCounter
from tests.loopback import free_port

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "webhook_child.py")
FAST = {"backoff_ms": lambda n: 20, "flush_ms": 2}


def verify(body: bytes, signature: str) -> bool:
    return hmac.compare_digest(wh.signature(SECRET, body), signature)


def expected_by_key(puts: dict[int, int]) -> dict[str, bytes]:
    return {wh.idempotency_key(m.message_id): m.body for off, n in puts.items() for m in record_messages(off, n)}


async def until(predicate, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.01)


def statuses(outbox: Outbox) -> list[int]:
    return outbox.status(np.arange(outbox.count))[0].tolist()


def test_every_message_is_delivered_once_by_key_through_30_percent_failures(outbox):
    puts = {0: 300, 3: 1, 7: 200}
    for off, n in puts.items():
        outbox.put(off, record_messages(off, n))

    async def run():
        r = Receiver(fail_ratio=0.3, verify=verify)
        w = WebhookDelivery(outbox, await r.start(), SECRET, **FAST)
        await w.start()
        # a loaded CI box: 30 s. A message leaves the window only once its result is durable, so the
        # window empties a moment after the outbox counts the last delivery: wait for both
        await until(lambda: outbox.counts()["delivered"] == 501 and w.stats()["window"] == 0, timeout=30.0,
                    what="all delivered")
        stats = w.stats()
        await w.stop()
        await r.stop()
        return r, stats

    r, stats = asyncio.run(run())
    assert r.accepted == expected_by_key(puts)  # every key, its exact body, signed with the secret
    assert r.duplicates == 0 and r.mismatched == 0 and r.refused_signatures == 0
    failed_first = sum(r.fails_first(k) for k in r.accepted)
    assert 100 < failed_first < 200 and r.attempts == 501 + failed_first
    assert statuses(outbox) == [wh.DELIVERED] * 501
    assert stats.pop("outbox_bytes") < 1_000  # every segment retired: the done file is what is left
    assert stats == {"pending": 0, "delivered": 501, "failed": 0, "attempts": 501 + failed_first,
                     "oldest_pending_age_s": 0.0, "window": 0}
    attempts = outbox.status(np.arange(501))[1]
    assert sorted(set(attempts.tolist())) == [1, 2]


def test_the_request_carries_the_contract_headers(outbox):
    outbox.put(0, [wh.state_message("g:m:S1:global", "FROZEN", 4, created_ms=wh_now())])
    seen = {}

    async def handler(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        seen["line"] = lines[0]
        seen["headers"] = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
        seen["body"] = await reader.readexactly(int(seen["headers"]["content-length"]))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    async def run():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        w = WebhookDelivery(outbox, f"http://127.0.0.1:{port}/in?src=fr", SECRET, **FAST)
        await w.start()
        await until(lambda: outbox.counts()["delivered"] == 1)
        await w.stop()
        server.close()

    asyncio.run(run())
    body = b'{"type":"board_state","board_id":"g:m:S1:global","state":"FROZEN","version":4}'
    assert seen["line"] == "POST /in?src=fr HTTP/1.1" and seen["body"] == body
    h = seen["headers"]
    assert h["content-type"] == "application/json" and h["host"] == f"127.0.0.1:{h['host'].split(':')[1]}"
    assert h["idempotency-key"] == hashlib.sha256(b"state/g:m:S1:global/FROZEN").hexdigest()
    assert h["x-flowrank-signature"] == "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()


def wh_now() -> int:
    return time.time_ns() // 1_000_000


def test_retries_follow_the_schedule_until_give_up_then_fail(outbox):
    now = [1_000_000]
    outbox.put(0, record_messages(0, 3, created_ms=now[0]))
    outbox.put(1, record_messages(1, 2, created_ms=now[0] - 60_000))  # created past give-up: never tried
    delays = []

    def backoff(n):
        delays.append(n)
        return wh.retry_delay_ms(n)

    async def run():
        r = Receiver()
        r.answer = lambda key, sig, body: (setattr(r, "attempts", r.attempts + 1), b"HTTP/1.1 500 X\r\n"
                                           b"Content-Length: 0\r\n\r\n")[1]
        w = WebhookDelivery(outbox, await r.start(), SECRET, give_up_s=30, wall_clock=lambda: now[0],
                            backoff_ms=backoff, flush_ms=2)
        await w.start()
        await until(lambda: outbox.counts()["failed"] == 2, what="the old ones failed")
        for expected_attempts in range(1, 6):  # 1 s, 2 s, 4 s, 8 s, 16 s: then 30 s have passed
            await until(lambda: r.attempts == 3 * expected_attempts, what=f"attempt {expected_attempts}")
            await until(lambda: len(w._retry) == 3)
            due = min(now[0] + wh.retry_delay_ms(expected_attempts), 1_000_000 + 30_000)
            assert [d for d, _, _ in w._retry] == [due] * 3
            now[0] += wh.retry_delay_ms(expected_attempts)
        await until(lambda: outbox.counts()["failed"] == 5, what="given up")
        stats = w.stats()
        await w.stop()
        await r.stop()
        return r, stats

    r, stats = asyncio.run(run())
    assert r.attempts == 15  # 5 attempts each, within 31 s; none for the old ones
    assert outbox.status(np.arange(5))[1].tolist() == [5, 5, 5, 0, 0]
    assert statuses(outbox) == [wh.FAILED] * 5
    assert stats["failed"] == 5 and stats["pending"] == 0 and stats["attempts"] == 15


def test_a_restart_resumes_each_messages_backoff_where_it_stood(tmp_path):
    """Failed attempts leave their next attempt time on disk: after a restart the messages wait out what
    was left of their backoff (before, they were all tried again at once)."""
    path = str(tmp_path / "outbox")
    now = [5_000_000]

    async def run():
        r = Receiver()
        r.answer = lambda key, sig, body: (setattr(r, "attempts", r.attempts + 1), b"HTTP/1.1 503 X\r\n"
                                           b"Content-Length: 0\r\n\r\n")[1]
        url = await r.start()
        ob = Outbox.open(path)
        ob.put(0, record_messages(0, 3, created_ms=now[0]))
        w = WebhookDelivery(ob, url, SECRET, wall_clock=lambda: now[0], flush_ms=2)
        await w.start()
        await until(lambda: ob.counts()["attempts"] == 3, what="first attempts recorded")
        now[0] += 1_000  # the second attempts (1 s backoff), then their results
        await until(lambda: ob.counts()["attempts"] == 6, what="second attempts recorded")
        await w.stop()
        ob.close()
        assert r.attempts == 6
        ob = Outbox.open(path)  # the restart: 2 s of backoff were due from the second attempts
        assert ob.due(np.arange(3)).tolist() == [now[0] + 2_000] * 3
        now[0] += 1_500
        w = WebhookDelivery(ob, url, SECRET, wall_clock=lambda: now[0], flush_ms=2)
        await w.start()
        await until(lambda: len(w._retry) == 3, what="scheduled")
        assert [d for d, _, _ in w._retry] == [now[0] + 500] * 3
        await asyncio.sleep(0.4)
        assert r.attempts == 6  # still waiting: 0.5 s of its backoff left
        now[0] += 500
        await until(lambda: r.attempts == 9, what="the third attempts, on time")
        await until(lambda: ob.counts()["attempts"] == 9)
        await w.stop()
        assert ob.status(np.arange(3))[1].tolist() == [3, 3, 3]
        assert ob.due(np.arange(3)).tolist() == [now[0] + 4_000] * 3
        ob.close()
        await r.stop()

    asyncio.run(run())


def test_no_answer_within_the_timeout_is_a_failed_attempt(outbox):
    outbox.put(0, record_messages(0, 4))

    async def run():
        r = Receiver()
        r.stall = True
        w = WebhookDelivery(outbox, await r.start(), SECRET, timeout_s=0.2, concurrency=4, **FAST)
        await w.start()
        await until(lambda: outbox.counts()["attempts"] >= 4, what="timed-out attempts recorded")
        assert outbox.counts()["pending"] == 4 and "Timeout" in (w.last_error or "")
        r.stall = False
        await until(lambda: outbox.counts()["delivered"] == 4, what="delivered after the stall")
        await w.stop()
        await r.stop()
        return r

    r = asyncio.run(run())
    assert set(r.accepted) == set(expected_by_key({0: 4}))


def test_a_receiver_that_is_down_costs_a_bounded_window_then_gets_everything(outbox):
    port = free_port()
    for off in range(10):
        outbox.put(off, record_messages(off, 50))
    window_seen = []

    async def run():
        w = WebhookDelivery(outbox, f"http://127.0.0.1:{port}/hooks", SECRET, window=64, concurrency=4, **FAST)
        await w.start()
        for _ in range(30):  # down: every attempt is refused, the window stays bounded
            await asyncio.sleep(0.01)
            window_seen.append(w.stats()["window"])
        assert outbox.counts()["delivered"] == 0 and outbox.counts()["attempts"] > 64
        assert w.stats()["oldest_pending_age_s"] >= 0
        r = Receiver(fail_ratio=0.3)
        await r.start(port)
        await until(lambda: outbox.counts()["delivered"] == 500, what="all delivered once up")
        await w.stop()
        await r.stop()
        return r

    r = asyncio.run(run())
    assert max(window_seen) <= 64
    assert r.accepted == expected_by_key({off: 50 for off in range(10)}) and r.mismatched == 0


def test_results_not_yet_durable_are_delivered_again_after_a_restart_same_body_and_key(tmp_path):
    path = str(tmp_path / "outbox")
    hook = FsyncCounter()
    hook.fail["state.fsync"] = OSError(5, "I/O error")
    puts = {0: 40, 1: 10}

    async def run():
        r = Receiver(verify=verify)
        url = await r.start()
        ob = Outbox.open(path, fault_hook=hook)
        for off, n in puts.items():
            ob.put(off, record_messages(off, n))
        w = WebhookDelivery(ob, url, SECRET, **FAST)
        await w.start()
        await until(lambda: len(r.accepted) == 50, what="first deliveries")
        await w.stop()  # its results cannot be made durable
        assert ob.counts()["pending"] == 50
        ob.close()
        ob = Outbox.open(path)  # the restart
        assert ob.counts()["pending"] == 50
        w = WebhookDelivery(ob, url, SECRET, **FAST)
        await w.start()
        await until(lambda: ob.counts()["delivered"] == 50, what="redelivered")
        await w.stop()
        ob.close()
        await r.stop()
        return r

    r = asyncio.run(run())
    assert r.duplicates == 50 and r.mismatched == 0  # sent twice, the same body under the same key
    assert r.accepted == expected_by_key(puts)


def test_wake_from_another_thread_delivers_new_puts(outbox):
    async def run():
        r = Receiver()
        w = WebhookDelivery(outbox, await r.start(), SECRET, **FAST)
        await w.start()

        def producer():
            for off in range(5):
                outbox.put(off, record_messages(off, 3))
                w.wake()

        t = threading.Thread(target=producer)
        t.start()
        await asyncio.to_thread(t.join)
        await until(lambda: outbox.counts()["delivered"] == 15, what="woken")
        await w.stop()
        await r.stop()
        return r

    r = asyncio.run(run())
    assert r.accepted == expected_by_key({off: 3 for off in range(5)})  # every message, once


def test_kill_9_of_the_worker_then_restart_delivers_every_message_with_one_body_per_key(tmp_path):
    """A child puts 20 records of 50 messages while delivering; it is killed mid-way. The
    restart puts again what is after covered_offset (as the engine does) and delivers the rest."""
    path = str(tmp_path / "outbox")
    loop = asyncio.new_event_loop()
    r = Receiver(fail_ratio=0.3)
    url = loop.run_until_complete(r.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with Child(CHILD, path, url, 20, 50, timeout=30) as child:
            child.read_until(lambda line: line == "PUT 16")
            deadline = time.monotonic() + 10
            while len(r.accepted) < 300 and time.monotonic() < deadline:
                time.sleep(0.01)
            child.kill()
        acked = {int(line.split()[1]) for line in child.lines if line.startswith("PUT ")}
        at_kill = len(r.accepted)
        assert 300 <= at_kill < 1000, at_kill
        with Outbox.open(path) as ob:
            assert max(acked) <= ob.covered_offset
            done = np.flatnonzero(ob.status(np.arange(ob.count))[0] == wh.DELIVERED)
            durable_keys = {wh.idempotency_key(ob.message(int(s)).message_id) for s in done}
            assert durable_keys <= set(r.accepted)  # delivered on disk means the receiver has it
            for off in range(ob.covered_offset + 2, 40, 2):
                ob.put(off, record_messages(off, 50))

            async def finish():
                w = WebhookDelivery(ob, url, SECRET, **FAST)
                await w.start()
                await until(lambda: ob.counts()["delivered"] == 1000, what="the rest delivered")
                await w.stop()

            asyncio.run(finish())
    finally:
        asyncio.run_coroutine_threadsafe(r.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert r.accepted == expected_by_key({off: 50 for off in range(0, 40, 2)})
    assert r.mismatched == 0


# ---------------------------------------------------------------- the HTTP client


@pytest.mark.parametrize("answer, status", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n", 200),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nabc", 201),
    (b"HTTP/1.0 202 Accepted\r\n\r\nbody until close", 202),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 200),
    (b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno", 404),
])
def test_the_client_reads_each_kind_of_answer_and_keeps_or_drops_the_connection(answer, status):
    connections = []

    async def handler(reader, writer):
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(next(x for x in head.decode().split("\r\n") if x.lower().startswith("content-length"))
                        .split(":")[1])
                await reader.readexactly(n)
                writer.write(answer)
                await writer.drain()
                if b"close" in answer.lower() or answer.startswith(b"HTTP/1.0"):
                    writer.close()
                    return
        except asyncio.IncompleteReadError:
            writer.close()

    async def run():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        t = StreamsTransport(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/")
        got = [await t.send(t.prepare(b"{}", {"Content-Type": "application/json"})) for _ in range(3)]
        await t.aclose()
        server.close()
        return got

    assert asyncio.run(run()) == [status] * 3
    keeps = b"close" not in answer.lower() and not answer.startswith(b"HTTP/1.0")
    assert len(connections) == (1 if keeps else 3)


def test_a_connection_the_receiver_closed_while_idle_is_replaced_without_a_failed_attempt():
    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()  # closes after one answer, without saying so

    async def run():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        t = StreamsTransport(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/")
        got = []
        for _ in range(3):
            got.append(await t.send(t.prepare(b"{}", {})))
            await asyncio.sleep(0.05)
        await t.aclose()
        server.close()
        return got

    assert asyncio.run(run()) == [200, 200, 200]


def test_targets():
    t = Target("https://hooks.example.com/in?x=1")
    assert (t.tls, t.port, t.path, t.host_header) == (True, 443, "/in?x=1", "hooks.example.com")
    t = Target("http://[::1]:8080")
    assert (t.host, t.port, t.path, t.host_header) == ("::1", 8080, "/", "[::1]:8080")
    for bad in ("ftp://x/", "http:///nohost", "hooks.example.com"):
        with pytest.raises(ValueError):
            Target(bad)


# ---------------------------------------------------------------- the secret


def test_the_secret_is_created_once_private_and_hex(tmp_path):
    s = load_or_create_secret(tmp_path)
    path = tmp_path / "webhook_secret"
    assert len(s) == 64 and bytes.fromhex(s.decode()) and path.read_bytes() == s
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_secret(tmp_path) == s
    assert [p.name for p in tmp_path.iterdir()] == ["webhook_secret"]


@pytest.mark.parametrize("content, key", [(b"abc\n", b"abc"), (b"abc\r\n", b"abc"), (b"abc\n\n", b"abc\n"),
                                          (b" a b ", b" a b "), (b"\x00\xff", b"\x00\xff")])
def test_a_secret_file_is_used_as_its_bytes_less_one_trailing_newline(tmp_path, content, key):
    f = tmp_path / "s"
    f.write_bytes(content)
    assert load_or_create_secret(tmp_path / "data", f) == key
    assert not (tmp_path / "data").exists()


def test_an_empty_secret_is_refused(tmp_path):
    (tmp_path / "s").write_bytes(b"\n")
    with pytest.raises(ValueError, match="empty"):
        load_or_create_secret(None, tmp_path / "s")
    with pytest.raises(ValueError, match="data directory"):
        load_or_create_secret(None)


def test_bodies_on_the_wire_are_the_outbox_bytes(outbox):
    m = record_messages(0, 1)[0]
    assert json.loads(m.body)["award_id"] == "g:m:S0:global/p-0"
