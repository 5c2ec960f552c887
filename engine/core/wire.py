"""What the router and the shard actors say to each other, as named tuples.

Both sides use these types: the router's read fan-out (:mod:`engine.router.reads`)
builds read requests, a shard actor (:class:`engine.runtime.shard.ShardCore`) answers
them; the sequencer (:mod:`engine.router.ingest`) sends log records
(:mod:`engine.core.records`) and reads the apply results. Across Ray they travel as
msgpack arrays (a tuple packs as an array and comes back a list), in process
as the tuples themselves, so a receiver names what it got with the type's
``_make`` (or ``Type(*items)`` where trailing fields have defaults) and reads
fields by name, never by position.

Read requests: one op name per kind of read (the constants below, the only
spelling of an op on either side), the request's first item; the board id is
always the second. Every reply starts with the board's local version on that
shard actor (the sum of the ``changes`` of its partitions there).

Rows, entries and changes carry the row's metadata (bytes of compact JSON,
docs/api.md §13), None when the row has none; on a board with subscores
(§14) entries and rows also carry the wire key's subscores (``mid``: each
negated when descending, so ``(primary, *mid, tie, player_id)`` sorts in
rank order) and the row's subscores as they are, after it (None elsewhere,
so other boards' messages do not grow).
"""

from __future__ import annotations

from typing import Awaitable, NamedTuple, Protocol


class ApplyItem(NamedTuple):
    """One log record sent to a shard actor to apply. ``ids_new``: the
    sequencer's word that no event of a score record was seen before (its
    board's dedup table had never evicted an id), so the partition may skip
    the journal's search for older redeliveries (``Partition.apply_columns``).
    A plain ``[offset, record]`` pair reads as ``ids_new=False``. ``record``:
    the bytes the sequencer packed the record into once, which are also what
    the log framed and wrote (:func:`engine.log.framing.pack_payload`), or the
    record itself."""

    offset: int
    record: object
    ids_new: bool = False


class ShardTransport(Protocol):
    """Submits calls to shard actor ``actor`` (0 .. n-1) in order; each returns an awaitable answer."""

    n: int  # how many shard actors

    def apply(self, actor: int, through: int, items: list) -> Awaitable:
        """Apply log records (:class:`ApplyItem`): an :class:`ApplyAnswer`
        (:meth:`engine.runtime.shard.ShardCore.apply`)."""
        ...

    def read(self, actor: int, requests: list) -> Awaitable:
        """Answer read requests: a :class:`ReadAnswer` (:meth:`engine.runtime.shard.ShardCore.read`)."""
        ...

# ------------------------------------------------------------------ read ops

TOP = "top"  # the best n ranked rows of the board's partitions on the actor
MGET = "mget"  # the ranked rows of some players
SIZE = "size"  # how many rows
GET = "get"  # one player's row and how many rows rank before it there
COUNT = "count"  # how many ranked rows come before a wire key
NBRS = "nbrs"  # the rows just before and after a wire key
SAMPLE = "sample"  # every step-th ranked key (approximate ranks)
HIST = "hist"  # one player's event history
EFPS = "efps"  # one player's event ids and content fingerprints (an erasure, docs/api.md §17); a Hist request
SUM = "sum"  # the checksum of the board's partitions
ROWS = "rows"  # every row as columns (an archive's rows)
HCOLS = "hcols"  # one chunk of one partition's journal (an archive's history)
RCOLS = "rcols"  # one chunk of one partition's rows (an unchanging board's rows: awards, an archive)
SPILL = "spill"  # write every partition's ranked rows to a spill file (an export's cut)
SPILL_READ = "spill_read"  # one frame of a spill file
SPILL_DROP = "spill_drop"  # remove an export's spill files
SPILL_WAIT = "spill_wait"  # whether an export's spill files are whole yet (a SpillDrop request)
DROP = "drop"  # control, not a read: forget an archived board's partitions
SCRUB = "scrub"  # control, not a read: the journals' run files lose the entries of erased events (a Drop, board "")

#: Requests that change what later reads see: reads batched before one answer first.
CHANGES_STATE = frozenset({DROP})


class Top(NamedTuple):
    op: str
    board_id: str
    n: int


class MGet(NamedTuple):
    op: str
    board_id: str
    player_ids: list


class Size(NamedTuple):
    op: str
    board_id: str


class Get(NamedTuple):
    op: str
    board_id: str
    player_id: str


class Count(NamedTuple):
    op: str
    board_id: str
    key: list  # a wire key: [primary, tie, player_id]


class Nbrs(NamedTuple):
    op: str
    board_id: str
    key: list  # a wire key: [primary, tie, player_id]
    above: int
    below: int


class Sample(NamedTuple):
    op: str
    board_id: str
    step: int


class Hist(NamedTuple):
    op: str
    board_id: str
    player_id: str


class Sum(NamedTuple):
    op: str
    board_id: str


class Rows(NamedTuple):
    op: str
    board_id: str


class HCols(NamedTuple):
    op: str
    board_id: str
    partition: int
    start: int
    count: int


class RCols(NamedTuple):
    op: str
    board_id: str
    partition: int
    start: int
    count: int


class Spill(NamedTuple):
    op: str
    board_id: str
    token: str
    block_rows: int


class SpillRead(NamedTuple):
    op: str
    board_id: str
    token: str
    partition: int
    at: int | None  # where the next frame starts (None: the first)


class SpillDrop(NamedTuple):
    op: str
    board_id: str
    token: str


class Drop(NamedTuple):
    op: str
    board_id: str


#: The request type of each op.
REQUESTS: dict[str, type] = {
    TOP: Top, MGET: MGet, SIZE: Size, GET: Get, COUNT: Count, NBRS: Nbrs, SAMPLE: Sample, HIST: Hist, SUM: Sum,
    ROWS: Rows, HCOLS: HCols, RCOLS: RCols, SPILL: Spill, SPILL_READ: SpillRead, SPILL_DROP: SpillDrop, DROP: Drop,
    SPILL_WAIT: SpillDrop, EFPS: Hist, SCRUB: Drop,
}


def request(raw) -> tuple:
    """A read request as the named tuple of its op (KeyError: an unknown op)."""
    return REQUESTS[raw[0]]._make(raw)


# --------------------------------------------------------------------- replies


class Reply(NamedTuple):
    """The reply to most reads: the version, then the answer (entries for
    TOP / MGET, a count for SIZE / COUNT, ...)."""

    version: int
    value: object


class RowReply(NamedTuple):
    """GET: the player's row (None: no row here) and, when ranked, how many
    rows rank before it on this shard actor."""

    version: int
    row: list | None  # a RowWire as sent
    local: int | None


class WindowReply(NamedTuple):
    """NBRS: the entries just before and just after the key, and how many rank before it."""

    version: int
    before: list
    after: list
    above: int


class SampleReply(NamedTuple):
    """SAMPLE: how many rows, and every step-th ranked wire key in order."""

    version: int
    size: int
    keys: list


#: The reply type of each op (:func:`reply`).
REPLIES: dict[str, type] = {op: Reply for op in REQUESTS} | {GET: RowReply, NBRS: WindowReply, SAMPLE: SampleReply}


def reply(op: str, raw) -> tuple:
    """A shard actor's answer to an ``op`` request as its named reply."""
    return REPLIES[op]._make(raw)


class ReadAnswer(NamedTuple):
    """A shard actor's answer to one batch of read requests."""

    offset: int  # the last log offset it has applied: answers of one cut agree on it
    replies: list


class Entry(NamedTuple):
    """A ranked row as a read sends it: its wire key ``(primary, tie,
    player_id)`` first, so entries sort in rank order."""

    primary: int
    tie: int
    player_id: str
    value: int
    achieved_at: int
    metadata: bytes | None = None
    mid: list | None = None  # subscores boards: the wire key's subscores (signed)
    subscores: list | None = None  # subscores boards: the row's subscores


class RowWire(NamedTuple):
    """A player's row (ranked or not) as a read sends it."""

    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    ranked: bool
    row_version: int
    primary: int | None  # None when not ranked
    tie: int | None
    metadata: bytes | None = None
    mid: list | None = None  # subscores boards: the wire key's subscores (signed); None when not ranked
    subscores: list | None = None  # subscores boards: the row's subscores

    @property
    def key(self) -> list | None:
        """The row's wire key ``[primary, tie, player_id]``, or ``[primary,
        *mid, tie, player_id]`` on a board with subscores (None: not ranked)."""
        if not self.ranked:
            return None
        if self.mid:
            return [self.primary, *self.mid, self.tie, self.player_id]
        return [self.primary, self.tie, self.player_id]


class ChangeWire(NamedTuple):
    """A row's change as an apply result sends it (a delta's row)."""

    player_id: str
    value: int | None
    achieved_at: int | None
    status: str  # a RowStatus value
    metadata: bytes | None = None
    subscores: list | None = None  # subscores boards: the row's subscores


class HistoryItem(NamedTuple):
    """HIST: one event of a player's history, in application order."""

    event_id: str
    kind: str  # "score" | "invalidation" | "decision"
    value: int | None
    achieved_at: int | None
    submitted_at: int | None
    outcome: str
    invalidated: bool  # a later invalidation made the event invalid
    metadata: bytes  # b"": none


class HistoryChunk(NamedTuple):
    """HCOLS: a chunk of a partition's journal (None instead when the partition is not there)."""

    total: int  # rows the journal has
    columns: list  # engine.core.journal.JournalColumns.to_wire
    ids: list | None  # [UTF-8 bytes, int64 offsets] of every player the partition knows; first chunk only


class SpillFile(NamedTuple):
    """SPILL: one partition's spill file on the shard actor."""

    partition: int
    path: str
    rows: int


# ---------------------------------------------------------------- apply results


class ScoresApplied(NamedTuple):
    """The result of a columnar score record (``C`` / ``M``), as bytes: each
    event's outcome code (uint8), then the rows that changed the ranking
    (int32, in record order) with their new values and achieved times (int64)."""

    codes: bytes
    rows: bytes
    values: bytes
    achieved: bytes


class EventApplied(NamedTuple):
    """The result of one event's record (``S``, ``D`` / ``E``): its outcome
    code (0 for a rejected decision) and the change it made, if any."""

    code: int
    change: list | None  # a ChangeWire as sent


class Invalidated(NamedTuple):
    """The result of an invalidation on the shard actor whose partition owns the event."""

    player_id: str
    ranked: bool
    value: int | None
    change: list | None  # a ChangeWire as sent
    refused: bool  # the player's total would leave the int64 range: nothing changed


class ShardDeadLetter(NamedTuple):
    """A dead letter as a shard actor keeps and reports it (in ``ApplyAnswer.unlogged``,
    its stats and its snapshot state): a list of four items, or five with the row
    of a columnar score record, so ``ShardDeadLetter(*items)`` names either."""

    offset: int
    board_id: str | None
    event_id: str | None
    error: str
    row: int | None = None

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.offset, self.row)


class ApplyAnswer(NamedTuple):
    """A shard actor's answer to one apply call."""

    results: list  # per record sent, in order: its result (None for records with none)
    unlogged: list  # its dead letters the log holds no dead-letter record of yet
