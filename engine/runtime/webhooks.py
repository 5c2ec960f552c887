"""``WebhookDelivery``: POSTs the outbox's messages to ``--webhook-url`` (docs/api.md §16 "Webhooks").

An asyncio shell over :class:`engine.log.outbox.Outbox` and the pure rules of
:mod:`engine.core.webhooks`. Who puts messages calls :meth:`WebhookDelivery.wake`;
delivery runs in its own tasks and never blocks the caller.

How a message travels::

    outbox (disk) --load--> window --ready--> senders --2xx--> results --flush--> outbox state (disk)
                              ^                   | other answer, none in 10 s, no connection
                              +---- retry heap <--+ (backoff: 1 s doubling to 300 s, until give-up)

* **The window** holds at most ``window`` messages between their load and the
  durable write of their final result (delivered or failed): those being sent,
  those waiting for a retry and those whose result waits for its flush. Messages
  behind the window wait on disk, so memory stays bounded while a receiver is
  down; the loader reads on from its cursor as the window empties.
* **Results** (each attempt's: the new attempt count, and delivered or failed
  when final) are written in batches, one ``fdatasync`` per batch, in a worker
  thread. A message leaves the window only once its final result is durable, so
  what ``Outbox.status`` shows as delivered is durable.
* **At least once**: after a restart the loader starts at the oldest pending
  message; one whose answer came but whose result was not yet durable is sent
  again, with the same body and ``Idempotency-Key`` (both come from the outbox).
* **Backoff survives restarts**: a failed attempt's result carries its next
  attempt time (written with the attempt count, in the same batch: no extra
  write), so after a restart a message waits out what was left of its backoff
  instead of being tried at once.
* **The outbox stays small**: a result batch that leaves a segment all final
  retires it (:meth:`engine.log.outbox.Outbox.set_status`): the bodies go, the
  states stay for ``GET …/awards``.
* **Give-up**: before every attempt, a message created ``give_up_s`` or more
  ago is failed instead (:func:`engine.core.webhooks.give_up`).

The HTTP client is a small HTTP/1.1 client on asyncio streams
(:class:`StreamsTransport`): one keep-alive connection per sender, each request
built once per message (headers and body in one write). Chosen by measurement
(``python -m benchmarks.webhooks_bench``, 20,000 messages, 30 % of first
attempts answered 503, receiver in another process, 2-core VM, 2026-12-06):
this client 21,000 messages/s, aiohttp (tried, not a dependency) 7,600/s,
httpx 450/s (about 55 ms per request: its requests seem to wait out a delayed
ACK). ``https://`` URLs use the system's default TLS context.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
import secrets
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import numpy as np

from engine.core import webhooks as wh
from engine.core.errors import StorageUnavailable
from engine.log import shared_settings
from engine.log.outbox import Outbox
from engine.log.places import is_database

logger = logging.getLogger("flowrank.webhooks")

SECRET_FILE = "webhook_secret"
USER_AGENT = "FlowRank-Webhooks/1"
_MAX_HEAD = 64 * 1024  # a response head longer than this is a protocol error


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- the secret


def load_or_create_secret(data_dir: str | os.PathLike | None, secret_file: str | os.PathLike | None = None,
                          log_url: str | None = None) -> bytes:
    """The HMAC key of ``X-FlowRank-Signature``: the bytes of ``secret_file``
    (``--webhook-secret-file``) if given, else (with a database log, ``log_url``) the
    log's, shared by every node (docs/api.md §19), else of ``<data_dir>/webhook_secret``,
    created on first use (32 random bytes, hex-encoded, mode 0600); one trailing
    ``"\\n"`` or ``"\\r\\n"`` is not part of it. ``ValueError`` if it is empty."""
    if secret_file is not None:
        path = Path(secret_file)
    elif is_database(log_url):
        return shared_settings.webhook_secret(str(log_url), data_dir)
    elif data_dir is None:
        raise ValueError("webhooks need a data directory for their secret, or a secret file")
    else:
        path = Path(data_dir) / SECRET_FILE
        if not path.exists():
            _create_once(path, secrets.token_hex(32).encode("ascii"))
    raw = path.read_bytes()
    raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
    if not raw:
        raise ValueError(f"{path}: the webhook secret is empty")
    return raw


def _create_once(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` (mode 0600), whole or not at all; if
    two processes race, the first link wins and the other keeps it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- HTTP


class ProtocolError(Exception):
    """The receiver's answer is not HTTP/1.x as we read it."""


class Transport(Protocol):
    """What the worker sends through: ``prepare`` once per message, ``send``
    per attempt (the answer's HTTP status, or an exception: a failed attempt)."""

    def prepare(self, body: bytes, headers: dict[str, str]) -> object: ...

    async def send(self, prepared: object) -> int: ...

    async def aclose(self) -> None: ...


class Target:
    """A parsed ``http(s)://host[:port]/path[?query]`` URL."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = self.port == (443 if self.tls else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if default else f"{name}:{self.port}"


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class StreamsTransport:
    """HTTP/1.1 keep-alive client on asyncio streams, for one URL. Each
    ``send`` takes an idle connection (or opens one), writes the prepared
    request, reads the status and skips the body (Content-Length, chunked, or
    up to the close). A request on a reused connection that the receiver had
    closed (no answer byte read) is sent again once on a new connection."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None):
        self.target = Target(url)
        self._ssl = (ssl_context or ssl.create_default_context()) if self.target.tls else None
        self._idle: list[_Connection] = []

    def prepare(self, body: bytes, headers: dict[str, str]) -> bytes:
        t = self.target
        lines = [f"POST {t.path} HTTP/1.1", f"Host: {t.host_header}", f"User-Agent: {USER_AGENT}",
                 f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        return "\r\n".join(lines).encode("latin-1") + body

    async def send(self, prepared: object) -> int:
        assert isinstance(prepared, bytes)
        conn, reused = (self._idle.pop(), True) if self._idle else (await self._open(), False)
        while True:
            try:
                conn.writer.write(prepared)
                status, keep = await _read_response(conn.reader)
            except _Stale:
                conn.close()
                if not reused:
                    raise ConnectionResetError("the receiver closed the connection without an answer") from None
                conn, reused = await self._open(), False
                continue
            except BaseException:
                conn.close()  # a timeout or an error mid-answer: its state is unknown
                raise
            if keep:
                self._idle.append(conn)
            else:
                conn.close()
            return status

    async def _open(self) -> _Connection:
        t = self.target
        reader, writer = await asyncio.open_connection(t.host, t.port, ssl=self._ssl, limit=_MAX_HEAD,
                                                       server_hostname=t.host if self._ssl else None)
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _Stale(Exception):
    """The connection ended before any byte of an answer."""


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """``(status, keep_alive)`` of the next final answer; its body is read and dropped."""
    first = True
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if first and not e.partial:
                raise _Stale() from None
            raise ConnectionResetError("the connection ended inside an answer's head") from None
        except ConnectionResetError:
            if first:
                raise _Stale() from None
            raise
        except asyncio.LimitOverrunError:
            raise ProtocolError("an answer's head longer than 64 KiB") from None
        first = False
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(code)
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        if 100 <= status < 200:
            continue  # 100 Continue and friends: the final answer follows
        connection = fields.get("connection", "").lower()
        keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if status in (204, 304):
            return status, keep
        if "chunked" in fields.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    return status, keep
                await _skip(reader, size + 2)
        length = fields.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ProtocolError(f"bad Content-Length {length!r}")
            await _skip(reader, int(length))
            return status, keep
        while await reader.read(1 << 16):
            pass  # no length: the body ends with the connection
        return status, False


async def _skip(reader: asyncio.StreamReader, n: int) -> None:
    while n > 0:
        chunk = await reader.readexactly(min(n, 1 << 16))
        n -= len(chunk)


# ---------------------------------------------------------------- the worker


class _Item:
    __slots__ = ("seq", "created_ms", "request", "attempts", "due_ms")

    def __init__(self, seq: int, created_ms: int, request: object, attempts: int):
        self.seq, self.created_ms, self.request, self.attempts = seq, created_ms, request, attempts
        self.due_ms = 0  # the next attempt after a failed one (epoch ms)


class WebhookDelivery:
    """Delivers ``outbox``'s pending messages to ``url``, at least once each.

    ``secret``: the HMAC key (:func:`load_or_create_secret`). ``give_up_s``:
    ``--webhook-give-up-s``. ``wall_clock``: epoch ms (give-up and backoff run
    on it). ``concurrency``: requests in flight (one connection each).
    ``timeout_s``: an attempt with no whole answer by then failed. ``window``:
    messages held in memory at most. ``flush_every``/``flush_ms``: a batch of
    results is written when it holds this many, or this long after its first.
    ``backoff_ms(failures)``: the retry schedule (tests shorten it).
    ``transport``: the HTTP client (default :class:`StreamsTransport`).
    """

    def __init__(self, outbox: Outbox, url: str, secret: bytes, give_up_s: float = wh.DEFAULT_GIVE_UP_S,
                 wall_clock: Callable[[], int] = epoch_ms, concurrency: int = 32, timeout_s: float = wh.TIMEOUT_S,
                 window: int = 8192, flush_every: int = 1024, flush_ms: float = 5.0,
                 backoff_ms: Callable[[int], int] = wh.retry_delay_ms, transport: Transport | None = None):
        if concurrency < 1 or window < 1 or flush_every < 1 or timeout_s <= 0 or give_up_s < 0:
            raise ValueError("concurrency, window and flush_every must be >= 1, timeout_s > 0, give_up_s >= 0")
        if not secret:
            raise ValueError("the webhook secret is empty")
        self.outbox = outbox
        self.url = url
        self._transport: Transport = transport if transport is not None else StreamsTransport(url)
        self._secret = secret
        self._give_up_s = give_up_s
        self._clock = wall_clock
        self._concurrency = concurrency
        self._timeout_s = timeout_s
        self._window = window
        self._flush_every = flush_every
        self._flush_s = flush_ms / 1000
        self._backoff = backoff_ms
        self._held: set[int] = set()  # seqs in the window
        self._cursor = 0  # the next seq the loader looks at
        self._ready: asyncio.Queue[_Item] | None = None
        self._retry: list[tuple[int, int, _Item]] = []  # (due ms, seq, item)
        self._results: dict[int, tuple[int, int, int]] = {}  # seq -> (status, attempts, due ms), not yet written
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_loader = asyncio.Event()
        self._wake_timer = asyncio.Event()
        self._wake_flush = asyncio.Event()
        self._oldest: tuple[int, int] | None = None  # (seq, created_ms) cache for stats()
        self._writing: asyncio.Future | None = None  # the batch of results being written
        self.last_error: str | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start delivering (from the oldest pending message). Returns at once."""
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Queue()
        first = self.outbox.oldest_pending_seq()
        self._cursor = self.outbox.count if first is None else first
        self._tasks = [asyncio.create_task(self._load(), name="webhooks-load"),
                       asyncio.create_task(self._timer(), name="webhooks-retry"),
                       asyncio.create_task(self._flush_loop(), name="webhooks-flush"),
                       *(asyncio.create_task(self._send_loop(), name=f"webhooks-send-{i}")
                         for i in range(self._concurrency))]

    async def stop(self) -> None:
        """Stop sending, write the results already known (best effort: what is
        not written is sent again after a restart), close the connections.
        The outbox stays open (its owner closes it)."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._writing is not None:  # its thread runs on: let it finish before a newer batch
            await asyncio.gather(self._writing, return_exceptions=True)
        if self._results:
            with contextlib.suppress(StorageUnavailable):
                await self._write(self._take_results())
        await self._transport.aclose()

    def wake(self) -> None:
        """New messages were put: look for them. Safe from any thread; never blocks."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_loader.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to wake
                loop.call_soon_threadsafe(self._wake_loader.set)

    def stats(self) -> dict:
        """``pending``, ``delivered``, ``failed`` (messages, by durable status),
        ``attempts`` (durable total), ``oldest_pending_age_s`` (0 when none is
        pending), ``window`` (messages held in memory now) and ``outbox_bytes``
        (every byte of the outbox's files)."""
        out: dict = self.outbox.counts()
        seq = self.outbox.oldest_pending_seq()
        age = 0.0
        if seq is not None:
            if self._oldest is None or self._oldest[0] != seq:
                self._oldest = (seq, self.outbox.message(seq).created_ms)
            age = max(0.0, (self._clock() - self._oldest[1]) / 1000)
        out["oldest_pending_age_s"] = age
        out["window"] = len(self._held)
        out["outbox_bytes"] = self.outbox.outbox_bytes()
        return out

    # ------------------------------------------------------------ the tasks

    async def _load(self) -> None:
        """Fill the window from the outbox, in seq order, skipping what is done."""
        while True:
            room = self._window - len(self._held)
            if room <= 0 or self._cursor >= self.outbox.count:
                self._wake_loader.clear()
                if self._window - len(self._held) <= 0 or self._cursor >= self.outbox.count:
                    await self._wake_loader.wait()
                continue
            try:
                chunk = await asyncio.to_thread(self.outbox.read, self._cursor, min(room, 1024))
            except Exception as exc:  # the outbox cannot be read: say so, try again
                self.last_error = f"outbox: {type(exc).__name__}: {exc}"[:200]
                logger.exception("webhooks: could not read the outbox at seq %d", self._cursor)
                await asyncio.sleep(1.0)
                continue
            if not chunk:
                continue
            seqs = np.fromiter((s for s, _ in chunk), dtype=np.int64, count=len(chunk))
            statuses, attempts = self.outbox.status(seqs)
            dues = self.outbox.due(seqs).tolist()
            now = self._clock()
            for (seq, m), status, tries, due in zip(chunk, statuses.tolist(), attempts.tolist(), dues):
                if status != wh.PENDING:
                    continue
                headers = {"Content-Type": wh.CONTENT_TYPE, wh.KEY_HEADER: wh.idempotency_key(m.message_id),
                           wh.SIGNATURE_HEADER: wh.signature(self._secret, m.body)}
                self._held.add(seq)
                item = _Item(seq, m.created_ms, self._transport.prepare(m.body, headers), tries)
                if due > now:  # its backoff, as it stood before a restart
                    item.due_ms = due
                    self._schedule(item)
                else:
                    self._ready.put_nowait(item)
            self._cursor = chunk[-1][0] + 1

    async def _send_loop(self) -> None:
        ready = self._ready
        while True:
            item = await ready.get()
            if wh.give_up(item.created_ms, self._clock(), self._give_up_s):
                self._result(item, wh.FAILED)
                continue
            item.attempts += 1
            try:
                async with asyncio.timeout(self._timeout_s):
                    status = await self._transport.send(item.request)
                ok = wh.is_success(status)
                if not ok:
                    self.last_error = f"HTTP {status}"
            except Exception as exc:  # refused, reset, timed out, not HTTP: a failed attempt
                ok = False
                self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            if ok:
                self._result(item, wh.DELIVERED)
                continue
            now = self._clock()
            item.due_ms = min(now + self._backoff(item.attempts), wh.give_up_ms(item.created_ms, self._give_up_s))
            self._result(item, wh.PENDING)
            self._schedule(item)

    def _schedule(self, item: _Item) -> None:
        """Put ``item`` in the retry heap for ``item.due_ms``."""
        if not self._retry or item.due_ms < self._retry[0][0]:
            self._wake_timer.set()
        heapq.heappush(self._retry, (item.due_ms, item.seq, item))

    async def _timer(self) -> None:
        """Move retries to the ready queue when due (sleeping at most 0.25 s at
        a time, so a wall clock that jumps is followed)."""
        while True:
            now = self._clock()
            while self._retry and self._retry[0][0] <= now:
                self._ready.put_nowait(heapq.heappop(self._retry)[2])
            delay = 0.25 if not self._retry else min(0.25, (self._retry[0][0] - now) / 1000)
            self._wake_timer.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(delay if self._retry else None):
                    await self._wake_timer.wait()

    def _result(self, item: _Item, status: int) -> None:
        self._results[item.seq] = (status, item.attempts, item.due_ms if status == wh.PENDING else 0)
        if len(self._results) >= self._flush_every or len(self._results) == 1:
            self._wake_flush.set()

    def _take_results(self) -> dict[int, tuple[int, int, int]]:
        results, self._results = self._results, {}
        return results

    async def _flush_loop(self) -> None:
        while True:
            self._wake_flush.clear()
            if not self._results:
                await self._wake_flush.wait()
                continue
            if len(self._results) < self._flush_every:
                self._wake_flush.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    async with asyncio.timeout(self._flush_s):
                        await self._wake_flush.wait()  # more results, or the batch is full
            batch = self._take_results()
            self._writing = asyncio.ensure_future(self._write(batch))
            try:
                await asyncio.shield(self._writing)
            except StorageUnavailable as exc:
                logger.warning("webhooks: could not record %d delivery results (%s); retrying", len(batch), exc)
                for seq, value in batch.items():
                    self._results.setdefault(seq, value)  # a newer result of the same message wins
                await asyncio.sleep(0.5)
                continue
            done = [seq for seq, (status, _, _) in batch.items() if status != wh.PENDING]
            if done:
                self._held.difference_update(done)
                self._wake_loader.set()

    async def _write(self, batch: dict[int, tuple[int, int, int]]) -> None:
        n = len(batch)
        seqs = np.fromiter(batch.keys(), dtype=np.int64, count=n)
        values = np.fromiter((v for triple in batch.values() for v in triple), dtype=np.int64, count=3 * n)
        await asyncio.to_thread(self.outbox.set_status, seqs, values[0::3], values[1::3], values[2::3])


__all__ = ["SECRET_FILE", "StreamsTransport", "Target", "Transport", "WebhookDelivery", "epoch_ms",
           "load_or_create_secret"]
