"""A webhook receiver on 127.0.0.1 for the webhook benchmark and tests: HTTP/1.1
keep-alive on an asyncio Protocol, answering each POST at once.

It keeps, per ``Idempotency-Key``, the first body it accepted (2xx), and counts
attempts, accepted duplicates and bodies that differ under one key. It fails a
chosen share of first attempts (503), decided by the key's hash so a run is
reproducible, and can stall (never answer) or check signatures (401 when
``verify(body, signature)`` is false).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno"
UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"


class Receiver:
    """``await r.start()``; ``r.url``; counters; ``await r.stop()``."""

    def __init__(self, fail_ratio: float = 0.0, verify: Callable[[bytes, str], bool] | None = None,
                 salt: str = ""):
        self.fail_ratio = fail_ratio
        self.verify = verify
        self.salt = salt
        self.stall = False  # True: read requests, never answer (the sender's timeout runs out)
        self.accepted: dict[str, bytes] = {}  # key -> first body answered 2xx
        self.seen: set[str] = set()  # keys with at least one attempt
        self.attempts = 0
        self.duplicates = 0  # 2xx answers for a key already accepted (at-least-once redeliveries)
        self.mismatched = 0  # a body that differs from the first one under its key
        self.refused_signatures = 0
        self.server: asyncio.base_events.Server | None = None
        self.url = ""

    def fails_first(self, key: str) -> bool:
        h = int.from_bytes(hashlib.blake2b((self.salt + key).encode(), digest_size=4).digest(), "big")
        return h < self.fail_ratio * 2**32

    def answer(self, key: str, signature: str, body: bytes) -> bytes | None:
        self.attempts += 1
        first = key not in self.seen
        self.seen.add(key)
        if self.stall:
            return None
        if self.verify is not None and not self.verify(body, signature):
            self.refused_signatures += 1
            return UNAUTHORIZED
        if first and self.fails_first(key):
            return UNAVAILABLE
        old = self.accepted.get(key)
        if old is None:
            self.accepted[key] = body
        else:
            self.duplicates += 1
            if old != body:
                self.mismatched += 1
        return OK

    async def start(self, port: int = 0) -> str:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Http(self), "127.0.0.1", port, backlog=1024)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hooks/flowrank"
        return self.url

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server.close_clients() if hasattr(self.server, "close_clients") else None
            await self.server.wait_closed()
            self.server = None


class _Http(asyncio.Protocol):
    def __init__(self, receiver: Receiver):
        self.r = receiver
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            fields = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            n = int(fields.get("content-length", "0"))
            if len(self.buf) < end + 4 + n:
                return
            body = self.buf[end + 4:end + 4 + n]
            self.buf = self.buf[end + 4 + n:]
            out = self.r.answer(fields.get("idempotency-key", ""), fields.get("x-flowrank-signature", ""), body)
            if out is not None and self.transport is not None:
                self.transport.write(out)
