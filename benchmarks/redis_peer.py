"""The Redis side of every FlowRank-vs-Redis ratio.

Three pieces:

* :func:`ensure_redis_server` and :class:`RedisServer`: a private
  ``redis-server`` on 127.0.0.1 (free port, temp dir, chosen persistence),
  started and stopped by the benchmark itself, so both sides of a ratio run on
  the same machine in the same run.
* :class:`RedisBoard`: the **exact-semantics peer**. It does what a careful
  Redis user would have to do to get FlowRank's contract (docs/api.md §6-7) out of
  Redis: one Redis FUNCTION call (Lua, ``FUNCTION LOAD``) per event that

  1. deduplicates the event id with ``SET NX`` on a per-board key holding the
     content fingerprint (with a TTL): same content → ``DUPLICATE_IGNORED``,
     other content → ``REJECTED_EVENT_ID_CONFLICT``;
  2. keeps the strict tie-break order in a *lexicographic* sorted set: every
     score is 0 and the member is the fixed-width big-endian key
     ``u64(primary) ‖ u64(tie1 + 2**63) ‖ utf8(player_id)`` where the primary
     is ``(2**63 - 1) - value`` on descending boards and ``value + 2**63`` on
     ascending ones, so Redis' memcmp order of members *is* the comparator;
  3. guards a player's row through a hash player → current member: the row is
     replaced only when the new member sorts strictly before the old one.

  Ranks come from ``ZRANK`` (0-based, + 1), windows from ``ZRANGE``.
* :class:`NaiveRedisBoard`: the textbook ``ZADD GT`` + ``ZREVRANK`` board. It
  is faster and **wrong**: equal values are ordered by member name in reverse
  (design doc, Component 02: Chloe ahead of Ben), and it has no dedup, so a
  cumulative redelivery double counts. It is measured only as a reference
  point; :func:`naive_tie_demo` shows the wrong order on the design example.

Lua in Redis 7 computes with doubles. All 64-bit encodings of client-supplied
values are therefore done in Python; only the cumulative peer re-encodes a
running total inside Lua, which is exact while ``|total| < 2**53`` (the API
allows the full int64 range; the benchmark workloads stay far below).
Invalidations are not implemented by the peer (they need a per-player event
history, which plain Redis does not keep).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from typing import Iterable, Sequence

from benchmarks.processes import Owned

INT64_MAX = 2**63 - 1
_OFF = 2**63
_QQ = struct.Struct(">QQ")
_QQQ = struct.Struct(">qqq")
DEFAULT_DEDUP_TTL_S = 7 * 24 * 3600
DEFAULT_MAX_PLAUSIBLE_TIME_MS = 86_400_000

LIBRARY_NAME = "flowrank_peer"
LIBRARY_VERSION = "2"  # 2: fr_apply_best_many (one event on several boards)

# Codes returned by the Lua functions, mapped to docs/api.md §7 outcomes per policy.
_CODES = {
    "best_score": {"F": "APPLIED_FIRST_SCORE", "B": "APPLIED_NEW_BEST", "R": "REJECTED_NOT_AN_IMPROVEMENT"},
    "fastest_time": {"F": "APPLIED_NEW_BEST_TIME", "B": "APPLIED_NEW_BEST_TIME", "R": "REJECTED_NOT_FASTER"},
    "cumulative": {"A": "APPLIED"},
}
_COMMON = {"D": "DUPLICATE_IGNORED", "C": "REJECTED_EVENT_ID_CONFLICT", "T": "REJECTED_INVALID_TIMING"}

LUA_LIBRARY = f"""#!lua name={LIBRARY_NAME}
-- FlowRank exact-semantics peer, library version {LIBRARY_VERSION}.
-- Members of the zset are memcmp-ordered keys; every zset score is 0.

-- strict byte order a < b (what ZRANK uses for equal scores)
local function lt(a, b)
  if a == b then return false end
  local la, lb = #a, #b
  local n = la < lb and la or lb
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return la < lb
end

-- dedup: nil when the id is new (and now remembered), else 'D' or 'C'
local function dedup(key, fingerprint, ttl)
  local ok
  if ttl == '0' then
    ok = redis.call('SET', key, fingerprint, 'NX')
  else
    ok = redis.call('SET', key, fingerprint, 'NX', 'EX', ttl)
  end
  if ok then return nil end
  if redis.call('GET', key) == fingerprint then return 'D' end
  return 'C'
end

-- KEYS: zset, row hash, version, dedup key
-- ARGV: player, member, fingerprint, ttl, [time_ms, max_plausible_ms]
local function apply_best(keys, args)
  local seen = dedup(keys[4], args[3], args[4])
  if seen then return {{seen, tonumber(redis.call('GET', keys[3]) or '0')}} end
  if args[5] and args[5] ~= '' then
    local t = tonumber(args[5])
    if t <= 0 or t > tonumber(args[6]) then
      return {{'T', tonumber(redis.call('GET', keys[3]) or '0')}}
    end
  end
  local old = redis.call('HGET', keys[2], args[1])
  local code = 'F'
  if old then
    if not lt(args[2], old) then
      return {{'R', tonumber(redis.call('GET', keys[3]) or '0')}}
    end
    redis.call('ZREM', keys[1], old)
    code = 'B'
  end
  redis.call('ZADD', keys[1], 0, args[2])
  redis.call('HSET', keys[2], args[1], args[2])
  return {{code, redis.call('INCR', keys[3])}}
end

local TWO32 = 4294967296
-- u64 big-endian bytes of v + 2^63 (desc: of 2^63 - 1 - v); exact for |v| < 2^53
local function enc(v, desc)
  local hi, lo
  if v >= 0 then
    hi = 2147483648 + math.floor(v / TWO32)
    lo = v % TWO32
  else
    local a = -v
    lo = (TWO32 - a % TWO32) % TWO32
    hi = 2147483648 - math.ceil(a / TWO32)
  end
  if desc then hi = 4294967295 - hi; lo = 4294967295 - lo end
  return struct.pack('>I4I4', hi, lo)
end

-- KEYS: zset, row hash, version, dedup key, totals hash, latest hash
-- ARGV: player, delta, achieved_at, fingerprint, ttl
local function apply_cumulative(keys, args)
  local seen = dedup(keys[4], args[4], args[5])
  if seen then return {{seen, tonumber(redis.call('GET', keys[3]) or '0')}} end
  local total = redis.call('HINCRBY', keys[5], args[1], args[2])
  local at = tonumber(args[3])
  local prev = redis.call('HGET', keys[6], args[1])
  if prev and tonumber(prev) > at then at = tonumber(prev) end
  redis.call('HSET', keys[6], args[1], string.format('%d', at))
  local old = redis.call('HGET', keys[2], args[1])
  if old then redis.call('ZREM', keys[1], old) end
  local member = enc(total, true) .. enc(at, false) .. args[1]
  redis.call('ZADD', keys[1], 0, member)
  redis.call('HSET', keys[2], args[1], member)
  return {{'A', redis.call('INCR', keys[3])}}
end

-- KEYS: zset, row hash; ARGV: player -> 0-based rank or nil
local function rank(keys, args)
  local m = redis.call('HGET', keys[2], args[1])
  if not m then return nil end
  return redis.call('ZRANK', keys[1], m)
end

-- KEYS: zset, row hash; ARGV: player, radius -> {{first 0-based rank, members...}} or nil
local function around(keys, args)
  local m = redis.call('HGET', keys[2], args[1])
  if not m then return nil end
  local r = redis.call('ZRANK', keys[1], m)
  if not r then return nil end
  local lo = r - tonumber(args[2])
  if lo < 0 then lo = 0 end
  local out = redis.call('ZRANGE', keys[1], lo, r + tonumber(args[2]))
  table.insert(out, 1, lo)
  return out
end

-- one event on several boards in one call (a game writing a score to its all-time, daily, weekly and
-- regional boards itself): KEYS are 4 per board (zset, row hash, version, dedup key), ARGV the event's
-- player, member, fingerprint and ttl; returns code, version per board, flat
local function apply_best_many(keys, args)
  local out = {{}}
  for b = 0, #keys / 4 - 1 do
    local got = apply_best({{keys[4 * b + 1], keys[4 * b + 2], keys[4 * b + 3], keys[4 * b + 4]}}, args)
    out[#out + 1] = got[1]
    out[#out + 1] = got[2]
  end
  return out
end

redis.register_function('fr_apply_best', apply_best)
redis.register_function('fr_apply_best_many', apply_best_many)
redis.register_function('fr_apply_cumulative', apply_cumulative)
redis.register_function{{function_name='fr_rank', callback=rank, flags={{'no-writes'}}}}
redis.register_function{{function_name='fr_around', callback=around, flags={{'no-writes'}}}}
"""


# --------------------------------------------------------------------------- server


def ensure_redis_server() -> str:
    """Path of a ``redis-server`` binary, installing the Debian package if needed.

    Installs with ``apt-get install -y redis-server`` only when running as
    root; otherwise raises :class:`RuntimeError` saying what to install.
    """
    path = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
    if path:
        return path
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "update"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "redis-server"], check=True, capture_output=True)
        path = shutil.which("redis-server") or "/usr/bin/redis-server"
        if os.path.exists(path):
            return path
    raise RuntimeError(
        "redis-server not installed: the Redis peer needs a local redis-server >= 7.0 "
        "(Debian: `apt-get install -y redis-server`, run as root)"
    )


def redis_server_version(path: str | None = None) -> str | None:
    """``7.0.15``-style version of the redis-server binary, or None if absent."""
    path = path or shutil.which("redis-server")
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip() or None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private ``redis-server`` on loopback, for one benchmark scenario.

    ``appendonly``/``appendfsync`` (``always``, ``everysec``, ``no``) choose
    AOF durability; ``save`` is the RDB ``save`` rule (``""``: no snapshots).
    The data lives in a temp dir removed on exit unless ``data_dir`` is given.

    >>> with RedisServer() as srv:            # doctest: +SKIP
    ...     srv.client().ping()
    True
    """

    def __init__(
        self,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        save: str = "",
        data_dir: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 30.0,
    ):
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always/everysec/no, got {appendfsync!r}")
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.save = save
        self.extra_args = list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.host = "127.0.0.1"
        self.port = 0
        self._own_dir = data_dir is None
        self.data_dir = data_dir
        self._proc: subprocess.Popen | None = None
        self._owned: Owned | None = None  # its own session + marker: stopped on every exit path
        self._path: str | None = None

    # lifecycle ------------------------------------------------------------
    def __enter__(self) -> "RedisServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _argv(self) -> list[str]:
        assert self._path and self.data_dir
        return [
            self._path,
            "--bind", self.host,
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", self.data_dir,
            "--logfile", os.path.join(self.data_dir, "redis.log"),
            "--save", self.save,
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            *self.extra_args,
        ]

    def start(self) -> None:
        """Start the server and wait until it answers PING with its data loaded.
        A failed start (even a missing ``redis`` module) stops the server first."""
        self._path = ensure_redis_server()
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="flowrank-redis-")
        if not self.port:
            self.port = _free_port()
        try:
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> None:
        self._owned = Owned(self._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._proc = self._owned.start()

    def _wait_ready(self) -> None:
        import redis

        deadline = time.monotonic() + self.startup_timeout_s
        c = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=1)
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                log = os.path.join(self.data_dir or "", "redis.log")
                tail = open(log).read()[-2000:] if os.path.exists(log) else ""
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}: {err}{tail}")
            try:
                if c.ping() and int(c.info("persistence").get("loading", 0)) == 0:
                    c.close()
                    return
            except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} not ready after {self.startup_timeout_s}s")
            time.sleep(0.005)

    def _shutdown(self, save: bool) -> None:
        if self._proc is None:
            return
        try:
            self._graceful_shutdown(save)
        finally:
            if self._owned is not None:
                self._owned.stop()  # SIGKILL whatever is left of it; closes its pipes
            self._proc = self._owned = None

    def _graceful_shutdown(self, save: bool) -> None:
        if self._proc.poll() is None:
            # Raw RESP over a socket: redis-py retries (with backoff) on the
            # connection drop that a successful SHUTDOWN causes.
            word = b"SAVE" if save else b"NOSAVE"
            cmd = b"*2\r\n$8\r\nSHUTDOWN\r\n$%d\r\n%s\r\n" % (len(word), word)
            try:
                with socket.create_connection((self.host, self.port), timeout=60) as s:
                    s.sendall(cmd)
                    reply = s.recv(4096)  # b"" when the server closed: it is going down
                if reply.startswith(b"-"):
                    self._proc.terminate()
            except OSError:
                return  # not listening (yet, or any more): Owned.stop() signals it
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass

    def stop(self) -> None:
        """Stop the server (no final save) and remove its temp dir."""
        self._shutdown(save=False)
        if self._own_dir and self.data_dir and os.path.isdir(self.data_dir):
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def restart(self) -> float:
        """Stop (persisting per the configured rules) and start on the same data.

        Returns the seconds from spawning the new process until it answers
        PING with ``INFO persistence`` ``loading:0``, i.e. the dataset is back.
        With neither AOF nor ``save`` configured, SHUTDOWN SAVE writes an RDB
        first so there is something to load.
        """
        self._shutdown(save=not self.appendonly)
        t0 = time.perf_counter()
        try:
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return time.perf_counter() - t0

    # access ---------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def client(self, **kwargs):
        """A ``redis.Redis`` connected to this server (bytes replies)."""
        import redis

        kwargs.setdefault("socket_timeout", 120)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def info(self, section: str | None = None) -> dict:
        c = self.client()
        try:
            return c.info(section) if section else c.info()
        finally:
            c.close()

    def used_memory(self) -> int:
        """``INFO memory`` ``used_memory`` in bytes."""
        return int(self.info("memory")["used_memory"])

    def version(self) -> str:
        return str(self.info("server")["redis_version"])


# --------------------------------------------------------------------------- peers


def load_library(client, replace: bool = True) -> None:
    """``FUNCTION LOAD [REPLACE]`` the peer's Lua library into ``client``'s server."""
    client.function_load(LUA_LIBRARY, replace=replace)


def _desc(v: int) -> int:
    return INT64_MAX - v


def encode_member(policy: str, value: int, tie_ms: int, player_id: str) -> bytes:
    """The memcmp-ordered zset member for one row (see module docstring).

    >>> a = encode_member("best_score", 9500, 1000, "p-ben")
    >>> b = encode_member("best_score", 9500, 2000, "p-chloe")
    >>> a < b
    True
    """
    primary = value + _OFF if policy == "fastest_time" else INT64_MAX - value
    return _QQ.pack(primary, tie_ms + _OFF) + player_id.encode("utf-8")


def decode_member(policy: str, member: bytes) -> tuple[str, int, int]:
    """``(player_id, value, tie_ms)`` back from :func:`encode_member` bytes."""
    p, t = _QQ.unpack_from(member)
    value = p - _OFF if policy == "fastest_time" else INT64_MAX - p
    return member[16:].decode("utf-8"), value, t - _OFF


def fingerprint(event: Sequence) -> bytes:
    """The content a redelivery must repeat: value, achieved_at, submitted_at, player."""
    return _QQQ.pack(event[3], event[4], event[5]) + event[2].encode("utf-8")


class RedisBoard:
    """One FlowRank board reproduced exactly on Redis (best_score, cumulative, fastest_time).

    ``ingest`` sends one FCALL per event, pipelined ``batch`` at a time, and
    returns docs/api.md §7 outcome names. Reads: ``rank`` (1-based, one FCALL_RO),
    ``ranks`` (pipelined), ``top``, ``around`` (clamped window, one FCALL_RO),
    ``friends`` (HMGET the friends' members, rank locally by bytes).
    Entries are ``(rank, player_id, value, tie_ms)`` tuples where ``tie_ms``
    is achieved_at (best_score), the latest achieved_at (cumulative) or
    submitted_at (fastest_time).
    """

    def __init__(
        self,
        client,
        board_id: str,
        policy: str = "best_score",
        dedup_ttl_s: int = DEFAULT_DEDUP_TTL_S,
        max_plausible_time_ms: int = DEFAULT_MAX_PLAUSIBLE_TIME_MS,
        load: bool = True,
    ):
        if policy not in _CODES:
            raise ValueError(f"unknown policy {policy!r}")
        self.client = client
        self.board_id = board_id
        self.policy = policy
        self.dedup_ttl = str(int(dedup_ttl_s))
        self.max_plausible = str(int(max_plausible_time_ms))
        tag = "{" + board_id + "}"  # one hash slot per board (Redis Cluster friendly)
        self.k_zset = f"fr:{tag}:z"
        self.k_rows = f"fr:{tag}:m"
        self.k_version = f"fr:{tag}:v"
        self.k_totals = f"fr:{tag}:tot"
        self.k_latest = f"fr:{tag}:lat"
        self.k_event = f"fr:{tag}:e:"
        self._outcomes = {**_CODES[policy], **_COMMON}
        if load:
            load_library(client)

    # writes ---------------------------------------------------------------
    def _queue(self, pipe, e: Sequence) -> None:
        _, eid, pid, value, ach, sub = e[:6]
        if self.policy == "best_score":
            member = _QQ.pack(INT64_MAX - value, ach + _OFF) + pid.encode("utf-8")
            pipe.fcall("fr_apply_best", 4, self.k_zset, self.k_rows, self.k_version, self.k_event + eid,
                       pid, member, fingerprint(e), self.dedup_ttl)
        elif self.policy == "fastest_time":
            # out-of-range values are rejected by Lua before their member is used
            member = _QQ.pack(min(max(value, -_OFF), INT64_MAX) + _OFF, sub + _OFF) + pid.encode("utf-8")
            pipe.fcall("fr_apply_best", 4, self.k_zset, self.k_rows, self.k_version, self.k_event + eid,
                       pid, member, fingerprint(e), self.dedup_ttl, value, self.max_plausible)
        else:
            pipe.fcall("fr_apply_cumulative", 6, self.k_zset, self.k_rows, self.k_version, self.k_event + eid,
                       self.k_totals, self.k_latest, pid, value, ach, fingerprint(e), self.dedup_ttl)

    def ingest(self, events: Iterable[Sequence], batch: int = 1000) -> list[str]:
        """Apply events in arrival order; one outcome name per event.

        One FCALL per event, ``batch`` FCALLs per pipeline round trip.
        """
        return [o for o, _ in self.ingest_versions(events, batch)]

    def ingest_versions(self, events: Iterable[Sequence], batch: int = 1000) -> list[tuple[str, int]]:
        """Like :meth:`ingest` but ``(outcome, board version after it)`` pairs."""
        out: list[tuple[str, int]] = []
        names = self._outcomes
        pipe = self.client.pipeline(transaction=False)
        n = 0
        for e in events:
            self._queue(pipe, e)
            n += 1
            if n == batch:
                out.extend((names[c.decode()], v) for c, v in pipe.execute())
                n = 0
        if n:
            out.extend((names[c.decode()], v) for c, v in pipe.execute())
        return out

    # reads ----------------------------------------------------------------
    def version(self) -> int:
        return int(self.client.get(self.k_version) or 0)

    def size(self) -> int:
        return int(self.client.zcard(self.k_zset))

    def rank(self, player_id: str) -> int | None:
        """1-based rank, or None when the player has no row. One round trip."""
        r = self.client.fcall_ro("fr_rank", 2, self.k_zset, self.k_rows, player_id)
        return None if r is None else int(r) + 1

    def ranks(self, player_ids: Iterable[str], batch: int = 1000) -> list[int | None]:
        """:meth:`rank` for many players, pipelined ``batch`` per round trip."""
        out: list[int | None] = []
        pipe = self.client.pipeline(transaction=False)
        n = 0
        for pid in player_ids:
            pipe.fcall_ro("fr_rank", 2, self.k_zset, self.k_rows, pid)
            n += 1
            if n == batch:
                out.extend(None if r is None else int(r) + 1 for r in pipe.execute())
                n = 0
        if n:
            out.extend(None if r is None else int(r) + 1 for r in pipe.execute())
        return out

    def _entries(self, first_rank: int, members: Sequence[bytes]) -> list[tuple[int, str, int, int]]:
        pol = self.policy
        return [(first_rank + i, *decode_member(pol, m)) for i, m in enumerate(members)]

    def top(self, n: int, offset: int = 0) -> list[tuple[int, str, int, int]]:
        """Ranks ``offset+1 .. offset+n``: one ZRANGE. O(log N + n)."""
        if n <= 0:
            return []
        return self._entries(offset + 1, self.client.zrange(self.k_zset, offset, offset + n - 1))

    def around(self, player_id: str, radius: int) -> list[tuple[int, str, int, int]] | None:
        """Entries of ranks ``[r - radius, r + radius]`` clamped to the board; None if unranked."""
        r = self.client.fcall_ro("fr_around", 2, self.k_zset, self.k_rows, player_id, radius)
        if r is None:
            return None
        return self._entries(int(r[0]) + 1, r[1:])

    def friends(self, player_id: str, friend_ids: Sequence[str]) -> list[tuple[int, str, int, int]]:
        """The friends' rows ranked locally 1..k by the board comparator.

        ``player_id`` is the requester; the eligible set is exactly
        ``friend_ids`` (docs/api.md §8: the provider decides, the requester is not
        added). One HMGET, then a local sort of the members' bytes.
        """
        if not friend_ids:
            return []
        members = [m for m in self.client.hmget(self.k_rows, list(friend_ids)) if m is not None]
        members.sort()
        return self._entries(1, members)

    def memory_per_player(self) -> float:
        """Bytes per ranked player of the ranking state (zset + row hashes).

        ``MEMORY USAGE ... SAMPLES 0`` (exact, O(N)). Dedup keys are per event,
        not per player, and are excluded: see :meth:`dedup_memory`.
        """
        n = self.size()
        if n == 0:
            return 0.0
        total = 0
        for k in (self.k_zset, self.k_rows, self.k_totals, self.k_latest):
            total += int(self.client.memory_usage(k, samples=0) or 0)
        return total / n

    def dedup_memory(self, sample: int = 1000) -> float:
        """Estimated bytes per remembered event id (MEMORY USAGE over a SCAN sample)."""
        sizes = []
        for key in self.client.scan_iter(match=self.k_event + "*", count=1000):
            sizes.append(int(self.client.memory_usage(key) or 0))
            if len(sizes) >= sample:
                break
        return sum(sizes) / len(sizes) if sizes else 0.0

    def clear(self) -> None:
        """Delete the board's keys (dedup keys included)."""
        self.client.delete(self.k_zset, self.k_rows, self.k_version, self.k_totals, self.k_latest)
        batch = []
        for key in self.client.scan_iter(match=self.k_event + "*", count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)


class NaiveRedisBoard:
    """The textbook sorted-set board: ``ZADD GT`` + ``ZREVRANK``. **Wrong on ties.**

    Equal values are ordered by member bytes in *reverse* (ZREVRANK), ignoring
    ``achieved_at``; there is no dedup (a cumulative redelivery double counts)
    and no conflict detection. Kept only as a speed reference.
    """

    def __init__(self, client, board_id: str, policy: str = "best_score"):
        self.client = client
        self.board_id = board_id
        self.policy = policy
        self.key = f"naive:{{{board_id}}}"

    def ingest(self, events: Iterable[Sequence], batch: int = 1000) -> int:
        """ZADD GT / ZADD LT / ZINCRBY per event, pipelined; returns events sent."""
        pipe = self.client.pipeline(transaction=False)
        n = total = 0
        for e in events:
            pid, value = e[2], e[3]
            if self.policy == "best_score":
                pipe.zadd(self.key, {pid: value}, gt=True)
            elif self.policy == "fastest_time":
                pipe.zadd(self.key, {pid: value}, lt=True)
            else:
                pipe.zincrby(self.key, value, pid)
            n += 1
            if n == batch:
                pipe.execute()
                total += n
                n = 0
        if n:
            pipe.execute()
            total += n
        return total

    def rank(self, player_id: str) -> int | None:
        r = (self.client.zrank if self.policy == "fastest_time" else self.client.zrevrank)(self.key, player_id)
        return None if r is None else int(r) + 1

    def ranks(self, player_ids: Iterable[str], batch: int = 1000) -> list[int | None]:
        out: list[int | None] = []
        pipe = self.client.pipeline(transaction=False)
        cmd = pipe.zrank if self.policy == "fastest_time" else pipe.zrevrank
        n = 0
        for pid in player_ids:
            cmd(self.key, pid)
            n += 1
            if n == batch:
                out.extend(None if r is None else int(r) + 1 for r in pipe.execute())
                n = 0
        if n:
            out.extend(None if r is None else int(r) + 1 for r in pipe.execute())
        return out

    def top(self, n: int) -> list[tuple[int, str, int]]:
        rng = self.client.zrange if self.policy == "fastest_time" else self.client.zrevrange
        rows = rng(self.key, 0, n - 1, withscores=True)
        return [(i + 1, m.decode(), int(s)) for i, (m, s) in enumerate(rows)]

    def clear(self) -> None:
        self.client.delete(self.key)


# --------------------------------------------------------------------------- design example

_T0 = 1_793_527_200_000  # 2026-11-01T10:00:00Z
DESIGN_BOARD = "arena-clash:solo:S7:global"
# The design's canonical board (Component 02/03): (player, value, achieved_at ms).
DESIGN_ROWS = [
    ("p-ava", 9800, _T0 - 2 * 60_000),   # 09:58
    ("p-ben", 9500, _T0 + 1 * 60_000),   # 10:01
    ("p-chloe", 9500, _T0 + 2 * 60_000), # 10:02
    ("p-dev", 9100, _T0 + 3 * 60_000),   # 10:03
    ("p-eli", 8700, _T0 + 4 * 60_000),   # 10:04
]
DESIGN_ORDER = ["p-ava", "p-ben", "p-chloe", "p-dev", "p-eli"]


def design_events(board_id: str = DESIGN_BOARD) -> list[tuple]:
    """The design example as event tuples (event ids ``evt-<player>-1``)."""
    return [(board_id, f"evt-{p[2:]}-1", p, v, t, t) for p, v, t in DESIGN_ROWS]


def naive_tie_demo(client, board_id: str = "demo:naive:S1:ties") -> dict:
    """Load the design example into both peers and return their orders.

    ``{"expected", "exact", "naive", "exact_ok", "naive_ok"}``; on Redis the
    naive board puts p-chloe ahead of p-ben (reverse member order on a tie),
    although Ben reached 9,500 one minute earlier.
    """
    events = design_events(board_id)
    exact = RedisBoard(client, board_id)
    naive = NaiveRedisBoard(client, board_id)
    exact.clear()
    naive.clear()
    try:
        exact.ingest(events)
        naive.ingest(events)
        exact_order = [e[1] for e in exact.top(5)]
        naive_order = [e[1] for e in naive.top(5)]
    finally:
        exact.clear()
        naive.clear()
    return {
        "expected": DESIGN_ORDER,
        "exact": exact_order,
        "naive": naive_order,
        "exact_ok": exact_order == DESIGN_ORDER,
        "naive_ok": naive_order == DESIGN_ORDER,
    }
