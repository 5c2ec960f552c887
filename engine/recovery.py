"""Recovery: newest good snapshot + the log tail, folded into a shadow copy.

Each shard and the router rebuild themselves the same way: load the newest
snapshot whose checksum verifies (the store falls back to older ones, or to
none), then fold every later log record through the same apply path the
live system used. The rebuilt object is returned only when complete; the
caller swaps it in. A snapshot or record in a newer format than this
version reads raises :class:`engine.errors.UnsupportedFormat`. Nothing here
reads a clock or a setting that could make two replays of the same log differ.
"""

from __future__ import annotations

import logging

from engine import records as R
from engine.formats import SHARD_STATE_FORMAT, state_format
from engine.journal import JournalLost, JournalPlace
from engine.shard import ShardCore

log = logging.getLogger("flowrank.recovery")


def recover_shard(index: int, n_actors: int, event_log, store, journals: JournalPlace = JournalPlace()) -> ShardCore:
    """A ShardCore for shard ``index`` of ``n_actors`` at the log's end.
    A snapshot whose journal files are gone is set aside: the whole log is
    replayed instead (which writes the journals again)."""
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
    dead = dead_letters_from(event_log, start)
    applied = core.replay(event_log.read_from(start), dead)
    log.info("shard %d recovered: snapshot offset %d, %d records replayed (%d dead letters skipped), checksum %032x",
             index, start - 1, applied, len(dead), core.checksum_of_state() & ((1 << 128) - 1))
    return core


def dead_letters_from(event_log, start: int) -> dict:
    """The dead letters the log holds from ``start`` on, by the ``(offset, row)``
    they name: what a replay from ``start`` must skip before it reaches them
    (a dead-letter record comes after the record it names). One sequential
    scan that decodes only the dead-letter records (``EventLog.read_where``)."""
    return R.dead_letters_in(event_log.read_where(start, R.DEAD_LETTER_HEAD))


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
