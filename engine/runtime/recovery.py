"""Recovery: newest good snapshot + the log tail, folded into a shadow copy.

Each shard and the router rebuild themselves the same way: load the newest
snapshot whose checksum verifies (the store falls back to older ones, or to
none), then fold every later log record through the same apply path the
live system used. The rebuilt object is returned only when complete; the
caller swaps it in. A snapshot or record in a newer format than this
version reads raises :class:`engine.core.errors.UnsupportedFormat`. Nothing here
reads a clock or a setting that could make two replays of the same log differ.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from engine.core import records as R
from engine.core.formats import SHARD_STATE_FORMAT, state_format
from engine.core.journal import JournalLost, JournalPlace
from engine.log.dead_letters import DeadLetterScan
from engine.runtime.shard import ShardCore

log = logging.getLogger("flowrank.recovery")


class Recovered(NamedTuple):
    """A recovered shard and how many log records its replay applied."""

    core: ShardCore
    replayed: int


def recover_shard(index: int, n_actors: int, event_log, store, journals: JournalPlace = JournalPlace(),
                  dead: "DeadLetterIndex | None" = None) -> Recovered:
    """A ShardCore for shard ``index`` of ``n_actors`` at the log's end: the
    one recovery path of every shard, in this process (the local service) or
    in a Ray shard actor (over the log server's view of the log and the
    snapshots, :mod:`engine.cluster.actors`). A snapshot whose journal files
    are gone is set aside: the whole log is replayed instead (which writes the
    journals again). ``event_log``: ``read_from(offset)`` yields ``(offset,
    record)``; ``store``: ``load_latest(name)`` gives ``(offset, state)`` or
    None; ``dead``: the log's dead letters (``since(offset)``), shared by the
    shards of one recovery (default: scanned here)."""
    name = f"shard-{index}"
    snap = store.load_latest(name)
    core = None
    if snap is not None:
        offset, state = snap
        state_format(state, SHARD_STATE_FORMAT, f"snapshot {name}")  # a newer one refuses, whatever its shards
        if state.get("n_actors") == n_actors and state.get("index") == index:
            core = core_from_snapshot(state, journals, name)
        else:
            log.warning("snapshot %s was taken with %s shards, not %s: replaying the whole log",
                        name, state.get("n_actors"), n_actors)
    if core is None:
        core = ShardCore(index, n_actors, journals)
    start = core.applied_offset + 1
    skip = R.dead_letters_in((dead or DeadLetterIndex(event_log)).since(start))
    applied = core.replay(event_log.read_from(start), skip)
    log.info("shard %d recovered: snapshot offset %d, %d records replayed (%d dead letters known)",
             index, start - 1, applied, len(skip))
    if log.isEnabledFor(logging.DEBUG):  # O(rows) of hashing: as long as the replay itself on a big board
        log.debug("shard %d checksum after recovery %032x", index, core.checksum_of_state() & ((1 << 128) - 1))
    return Recovered(core, applied)


class DeadLetterIndex(DeadLetterScan):
    """:class:`engine.log.dead_letters.DeadLetterScan` of FlowRank's log: its dead-letter
    records begin with :data:`engine.core.records.DEAD_LETTER_HEAD`."""

    def __init__(self, event_log):
        super().__init__(event_log, R.DEAD_LETTER_HEAD)


def core_from_snapshot(state: dict, journals: JournalPlace, name: str) -> ShardCore | None:
    """The shard a snapshot holds, or None when its journal files are lost."""
    try:
        return ShardCore.from_state(state, journals)
    except JournalLost as exc:
        log.warning("snapshot %s: its journal is lost (%s): replaying the whole log", name, exc)
        return None


def recover_router(router, event_log, store) -> None:
    """Load the router's snapshot and fold the log tail into it."""
    snap = store.load_latest("router")
    if snap is not None:
        router.load_state(snap[1])
    for offset, rec in event_log.read_from(router.log_offset + 1):
        R.check_kind(offset, rec)  # an unknown kind refuses to start instead of being skipped
        router.fold(offset, rec)
    log.info("router recovered to log offset %d with %d boards", router.log_offset, len(router.boards))
