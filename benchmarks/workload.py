"""Deterministic, seeded score-event workloads for the benchmarks.

One call, :func:`generate`, turns a seed and a handful of knobs into a
:class:`Workload`: a list of score events as plain tuples

    (board_id, event_id, player_id, value, achieved_at_ms, submitted_at_ms)

plus an optional list of event ids to invalidate. The stream is shaped like
real game-server traffic rather than uniform noise:

* **activity skew**: every player posts once (when ``events >= players``, so
  the board holds exactly ``players`` rows); every other event's player is
  drawn from a Zipf-like law (weight of the k-th most active player ∝
  1 / k**zipf_s), so a few players post far more often than the long tail;
  which player ids are "hot" is itself seeded;
* **heavy ties**: values come from a small set (rounded to a coarse step) and
  timestamps are whole seconds, so equal values *and* equal ``achieved_at``
  happen often and every tie-break level of the comparator is exercised;
* **redeliveries**: about ``dup_rate`` of the stream repeats an earlier event
  byte for byte (same event id, same content) a little later on;
* **late events**: about ``late_rate`` of the events carry an ``achieved_at``
  earlier than the events just before them (a game server flushing a backlog);
* **invalidations**: ``invalidation_rate`` of the distinct event ids are listed
  for moderation to invalidate after ingest.

Determinism: only ``numpy.random.Generator(PCG64(seed))`` draws numbers and no
Python ``hash()`` is involved, so the same arguments give byte-identical output
in any process on any machine (check with :meth:`Workload.digest`).
Cost: O(events) vectorised; 2M events in a few seconds.

>>> w = generate(seed=7, players=1000, events=5000)
>>> len(w.events), w.events[0][0]
(5000, 'bench:solo:S1:global')
>>> w.digest() == generate(seed=7, players=1000, events=5000).digest()
True
"""

from __future__ import annotations

import gc
import hashlib
import struct
from dataclasses import dataclass, field
from itertools import repeat
from typing import Iterator, NamedTuple

import numpy as np

POLICIES = ("best_score", "cumulative", "fastest_time")
# 2026-11-01T00:00:00Z: every workload starts at the same wall-clock origin.
EPOCH0_MS = 1_793_491_200_000


class Event(NamedTuple):
    """The field names of one event tuple. The stream itself holds plain tuples
    (cheaper to build, pickle and msgpack); ``Event(*t)`` names the fields."""

    board_id: str
    event_id: str
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int


@dataclass(frozen=True)
class Workload:
    """A generated event stream and the parameters that made it.

    ``events`` is in arrival order (redeliveries and late events included);
    ``invalidations`` lists event ids (each one applied at most once in the
    stream) to invalidate after ingest, in a seeded order.
    """

    seed: int
    policy: str
    board_id: str
    players: int
    events: list[tuple]
    invalidations: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.events)

    def player_ids(self) -> list[str]:
        """Every player id that occurs in the stream, sorted (code point order)."""
        return sorted({e[2] for e in self.events})

    def batches(self, size: int) -> Iterator[list[tuple]]:
        """Consecutive slices of ``size`` events, in arrival order."""
        for i in range(0, len(self.events), size):
            yield self.events[i : i + size]

    def split(self, parts: int) -> list[list[tuple]]:
        """``parts`` disjoint sub-streams partitioned by player (stable, seed-free).

        Each player's events stay in one part and in their original order, so
        every part can be ingested by a separate load generator and the final
        state is the same as a sequential ingest.
        """
        out: list[list[tuple]] = [[] for _ in range(parts)]
        for e in self.events:
            # player ids are "p-<digits>": the number is a stable partition key
            out[_player_number(e[2]) % parts].append(e)
        return out

    def encode(self) -> bytes:
        """A canonical byte encoding of the whole workload (for digests)."""
        h = bytearray()
        for e in self.events:
            for s in (e[0], e[1], e[2]):
                b = s.encode("utf-8")
                h += struct.pack(">I", len(b)) + b
            h += struct.pack(">qqq", e[3], e[4], e[5])
        for eid in self.invalidations:
            b = eid.encode("utf-8")
            h += struct.pack(">I", len(b)) + b
        return bytes(h)

    def digest(self) -> str:
        """SHA-256 of :meth:`encode`: equal digests mean identical workloads."""
        return hashlib.sha256(self.encode()).hexdigest()

    def stats(self) -> dict:
        """Shape checks: duplicate share, late share, tie density, activity skew."""
        n = len(self.events)
        ids = [e[1] for e in self.events]
        distinct = len(set(ids))
        per_player: dict[str, int] = {}
        for e in self.events:
            per_player[e[2]] = per_player.get(e[2], 0) + 1
        counts = sorted(per_player.values(), reverse=True)
        top1 = max(1, len(counts) // 100)
        late = sum(1 for a, b in zip(self.events, self.events[1:]) if b[4] < a[4])
        values = [e[3] for e in self.events]
        return {
            "events": n,
            "distinct_event_ids": distinct,
            "dup_share": (n - distinct) / n if n else 0.0,
            "late_share": late / n if n else 0.0,
            "active_players": len(per_player),
            "top1pct_share": sum(counts[:top1]) / n if n else 0.0,
            "distinct_values": len(set(values)),
            "invalidations": len(self.invalidations),
        }


def _player_number(player_id: str) -> int:
    digits = player_id.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else sum(player_id.encode("utf-8"))


def player_id(i: int) -> str:
    """The benchmark's player id for index ``i``: ``p-00012345``."""
    return f"p-{i:08d}"


def generate(
    seed: int,
    players: int,
    events: int,
    policy: str = "best_score",
    dup_rate: float = 0.01,
    late_rate: float = 0.01,
    invalidation_rate: float = 0.0,
    tie_heavy: bool = True,
    *,
    board_id: str | None = None,
    zipf_s: float = 1.0,
    event_id_prefix: str = "e-",
) -> Workload:
    """Build a seeded workload of exactly ``events`` events over ``players`` ids.

    ``policy`` picks the value law: ``best_score`` scores in [0, 10000]
    (multiples of 50 when ``tie_heavy``), ``cumulative`` small deltas (1..100,
    multiples of 10 when ``tie_heavy``; every 50th one negative),
    ``fastest_time`` elapsed ms in [30 s, 300 s] (multiples of 100 ms when
    ``tie_heavy``). Timestamps are whole seconds when ``tie_heavy``.
    ``submitted_at`` is ``achieved_at`` plus a small seeded delay. Event ids
    are ``event_id_prefix`` + 9 digits: streams with different prefixes
    share no id (more events for the same players, ``benchmarks core``).
    O(events + players).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if players < 1 or events < 1:
        raise ValueError("players and events must be positive")
    for name, rate in (("dup_rate", dup_rate), ("late_rate", late_rate), ("invalidation_rate", invalidation_rate)):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {rate}")
    board = board_id or {
        "best_score": "bench:solo:S1:global",
        "cumulative": "bench:cumul:S1:global",
        "fastest_time": "bench:speedrun:S1:global",
    }[policy]
    rng = np.random.Generator(np.random.PCG64(seed))

    n_dup = int(round(events * dup_rate))
    n_uni = events - n_dup
    if n_uni < 1:
        raise ValueError("dup_rate leaves no distinct events")

    # Activity skew: Zipf-like weights over a seeded permutation of ids.
    weights = 1.0 / np.power(np.arange(1, players + 1, dtype=np.float64), zipf_s)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    hot_order = rng.permutation(players)
    n_base = min(players, n_uni)  # every player posts at least once when possible
    draws = np.searchsorted(cdf, rng.random(n_uni - n_base), side="right")
    pidx = np.concatenate([np.arange(n_base), hot_order[np.minimum(draws, players - 1)]])
    pidx = pidx[rng.permutation(n_uni)]

    # Values.
    if policy == "best_score":
        if tie_heavy:
            vals = rng.integers(0, 201, n_uni) * 50
        else:
            vals = rng.integers(0, 10_000_001, n_uni)
    elif policy == "cumulative":
        if tie_heavy:
            vals = rng.integers(1, 11, n_uni) * 10
        else:
            vals = rng.integers(1, 101, n_uni)
        vals = np.where(np.arange(n_uni) % 50 == 49, -vals, vals)
    else:
        if tie_heavy:
            vals = rng.integers(300, 3001, n_uni) * 100
        else:
            vals = rng.integers(30_000, 300_001, n_uni)

    # Time: roughly 4 events per second of game time, whole seconds if tie-heavy.
    step_ms = 250
    ach = EPOCH0_MS + np.arange(n_uni, dtype=np.int64) * step_ms + rng.integers(0, step_ms, n_uni)
    late = rng.random(n_uni) < late_rate
    ach = np.where(late, ach - rng.integers(60_000, 600_000, n_uni), ach)
    if tie_heavy:
        ach = (ach // 1000) * 1000
    sub = ach + rng.integers(0, 3, n_uni) * 1000 if tie_heavy else ach + rng.integers(0, 2000, n_uni)

    # Redeliveries: copies of earlier events, placed a little later in the stream.
    src = rng.integers(0, n_uni, n_dup)
    key = np.concatenate([np.arange(n_uni, dtype=np.float64), src + rng.uniform(0.5, 2000.0, n_dup)])
    order = np.argsort(key, kind="stable")
    uidx = np.concatenate([np.arange(n_uni), src])[order]

    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small immutable objects: the cyclic GC only costs time here
    try:
        eids = list(map((event_id_prefix + "{:09d}").format, range(n_uni)))
        table = list(map(player_id, range(players)))
        pids = list(map(table.__getitem__, pidx.tolist()))
        uni_events = list(zip(repeat(board, n_uni), eids, pids, vals.tolist(), ach.tolist(), sub.tolist()))
        stream = list(map(uni_events.__getitem__, uidx.tolist()))
    finally:
        if gc_was_enabled:
            gc.enable()

    n_inv = int(round(n_uni * invalidation_rate))
    inv = [eids[i] for i in rng.choice(n_uni, size=n_inv, replace=False).tolist()] if n_inv else []

    params = {
        "seed": seed,
        "players": players,
        "events": events,
        "policy": policy,
        "dup_rate": dup_rate,
        "late_rate": late_rate,
        "invalidation_rate": invalidation_rate,
        "tie_heavy": tie_heavy,
        "zipf_s": zipf_s,
        "board_id": board,
        "event_id_prefix": event_id_prefix,
    }
    return Workload(seed, policy, board, players, stream, inv, params)
