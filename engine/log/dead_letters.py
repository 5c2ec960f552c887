"""The dead-letter records of a log, found by a scan that decodes only them.

Here, in the log layer, and given the records' first bytes by its caller
(:data:`engine.core.records.DEAD_LETTER_HEAD`): the log actor scans for them
without importing the engine's core (engine.cluster.log_actor)."""

from __future__ import annotations


class DeadLetterScan:
    """The dead-letter records of a log, found by a scan that decodes only
    them (``EventLog.read_where``): what a replay must know before it reaches
    the records they name (each comes after the record it names).

    :meth:`since` scans once from the lowest offset asked and then only what
    was appended since its last call, so the shards of one recovery (or a
    shard actor restarted later) share one sequential pass over the log.
    Memory: the dead-letter records only."""

    def __init__(self, event_log, head: bytes):
        self.event_log = event_log
        self.head = head  # the first bytes of a dead-letter record, and of no other
        self.start: int | None = None  # the scan covers [start, end)
        self.end = 0
        self.found: list[tuple[int, list]] = []

    def since(self, start: int) -> list[tuple[int, list]]:
        """``(offset, record)`` of every dead-letter record at ``start`` or later."""
        if self.start is None or start < self.start:
            self.start, self.end, self.found = start, start, []
        end = self.event_log.durable_offset()
        if end > self.end:
            last = self.found[-1][0] if self.found else -1
            self.found += [(o, rec) for o, rec in self.event_log.read_where(self.end, self.head) if o > last]
            self.end = end
        return [(o, rec) for o, rec in self.found if o >= start]
