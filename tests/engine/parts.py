"""The router's parts assembled by hand, without :class:`engine.router.router.Router`,
over in-process shard actors and a log kept in a list (tests of
engine.router.ingest and engine.router.control)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engine.router.control import BoardControl
from engine.router.registry import BoardRegistry, RouterConfig
from engine.router.reads import ReadFanOut
from engine.router.ingest import Sequencer
from engine.log.framing import unpack_payload
from engine.runtime.local import InProcessShards
from engine.runtime.shard import ShardCore


class ListLog:
    """A LogPort keeping records in a list; ``fail`` makes every append raise."""

    def __init__(self):
        self.records: list = []
        self.fail = False

    async def append(self, payloads: list[bytes], at: int | None = None) -> int:
        await asyncio.sleep(0)  # another append may be issued meanwhile, as with a real log
        if self.fail:
            raise OSError("disk full")
        first = len(self.records)
        if at is not None and at != first:  # the log contract (engine.log.port): never out of place
            raise OSError(f"append at {at}, log at {first}")
        self.records.extend(unpack_payload(p) for p in payloads)
        return first


class RecordingShards(InProcessShards):
    """In-process shard actors that remember which log offsets each was sent."""

    def __init__(self, cores: list[ShardCore]):
        super().__init__(cores)
        self.sent: dict[int, list[int]] = {i: [] for i in range(len(cores))}
        self.ids_new: list[int] = []  # offsets sent with the sequencer's ids_new word

    def apply(self, actor: int, through: int, items: list):
        self.sent[actor].extend(item[0] for item in items)
        self.ids_new.extend(item.offset for item in items if item.ids_new)
        return super().apply(actor, through, items)


@dataclass
class Parts:
    transport: RecordingShards
    log: ListLog
    registry: BoardRegistry
    fanout: ReadFanOut
    sequencer: Sequencer
    control: BoardControl
    clock: list = field(default_factory=lambda: [1_800_000_000_000])  # epoch ms of the fake wall clock
    tasks: list = field(default_factory=list)

    async def close(self) -> None:
        await self.sequencer.drain()
        if self.control.keeping is not None:
            self.tasks.append(self.control.keeping)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def assemble(n_actors: int = 3, config: RouterConfig | None = None) -> Parts:
    """Started parts wired as the Router wires them (call inside a running loop)."""
    transport = RecordingShards([ShardCore(i, n_actors) for i in range(n_actors)])
    log = ListLog()
    registry = BoardRegistry(n_actors, config)
    fanout = ReadFanOut(transport, registry)
    sequencer = Sequencer(transport, log, registry, fanout.cut)
    parts = Parts(transport, log, registry, fanout, sequencer, None)  # type: ignore[arg-type]
    parts.control = BoardControl(registry, sequencer, fanout, wall_clock=lambda: parts.clock[0])
    sequencer.resync = parts.control.sync_versions
    sequencer.wall_clock = fanout.wall_clock = lambda: parts.clock[0]
    parts.tasks = sequencer.start() + parts.control.start()
    return parts
