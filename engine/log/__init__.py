"""Durable storage: the event log (FlowRank's commit point) and snapshots.

Pure files + threads; no Ray, FastAPI or asyncio. See ``docs/storage.md``
for the on-disk layout and the recovery rules.
"""

from engine.log.memory import InMemoryLog, InMemorySnapshotStore
from engine.log.outbox import Outbox
from engine.log.port import EventLog, FaultHook, RewriteStats, SnapshotStore
from engine.log.segment_log import SegmentedFileLog, segment_file_name
from engine.log.snapshots import FileSnapshotStore

__all__ = [
    "EventLog",
    "FaultHook",
    "FileSnapshotStore",
    "InMemoryLog",
    "InMemorySnapshotStore",
    "Outbox",
    "RewriteStats",
    "SegmentedFileLog",
    "SnapshotStore",
    "segment_file_name",
]
