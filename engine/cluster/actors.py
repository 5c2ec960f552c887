"""The shard actor and the log server's client side.

* ``LogServer`` (:mod:`engine.cluster.log_actor`, a module of its own so that its
  process imports only the log layer): owns the snapshot store under the data
  directory and follows the event log, pinned to the node the gateway runs on
  (the head). Every shard, wherever it runs, reads the log and stores its
  snapshots through it, so no shared filesystem is needed.
* ``ShardActor``: one :class:`engine.runtime.shard.ShardCore`. A sync actor, so it
  runs one caller's calls in submission order (RAY_NOTES). On (re)start its
  ``__init__`` loads its newest good snapshot and replays the log tail
  before it serves anything; ``max_task_retries=-1`` re-runs interrupted
  calls on the new process, which the core answers idempotently by offset.
  ``cache_dir``: the numba compile cache it uses (:mod:`engine.runtime.warm`), set
  before recovery runs a kernel. Every kernel is loaded in ``__init__`` when
  the cache is complete (a restarted actor serves nothing cold), else compiled
  or loaded by ``warm()``, which the engine awaits before it is ready.

The log server runs no kernel (log records, snapshots and dead letters are
msgpack and files), so it is not warmed.

Payloads are msgpack bytes (cheaper for Ray than nested Python lists).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import ray

from engine.cluster.log_actor import REPLAY_CHUNK, pack, unpack
from engine.core import gc_tuning
from engine.runtime import warm
from engine.core.journal import TAIL_ROWS, JournalPlace
from engine.runtime.recovery import recover_shard
from engine.core import wire as W
from engine.log.framing import pack_in_pieces
from engine.log.port import RewriteStats

log = logging.getLogger("flowrank.cluster")

#: ``enable_task_events=False``: Ray records no task event per actor call (as
#: Ray Serve does for its replicas). Every write batch and read is a call; at
#: thousands a second their events grew the GCS even with the embedded cap of
#: 1,000 kept (engine.cluster.engine), and in a joined cluster without one.
SHARD_OPTIONS = dict(num_cpus=0, max_restarts=-1, max_task_retries=-1, enable_task_events=False)


def spill_dir(namespace: str) -> str:
    """Where the shard actors of a Ray namespace keep export spill files on
    their node (one subdirectory per node and shard)."""
    return os.path.join(tempfile.gettempdir(), "flowrank-spill", namespace)


class RemoteLogView:
    """The log server's log, snapshots and dead letters as the recovery
    functions read them (``read_from``, ``load_latest``, ``since``): a shard
    actor recovers through :func:`engine.runtime.recovery.recover_shard` like the local
    service's shards, and the cluster engine's router through
    :func:`engine.runtime.recovery.recover_router`, over Ray calls."""

    def __init__(self, log_server):
        self.server = log_server

    def erase_log(self, plain: list):
        """The erasure job's log step, run by the log actor (engine.runtime.erasure.erase_log)."""
        return RewriteStats(*ray.get(self.server.erase_log.remote(pack([[o, list(r)] for o, r in plain]))))

    def delete_through(self, offset: int) -> list:
        return ray.get(self.server.delete_snapshots_through.remote(offset))

    def read_from(self, offset: int, chunk_records: int = REPLAY_CHUNK):
        while True:
            chunk = unpack(ray.get(self.server.read_chunk.remote(offset, chunk_records)))
            if not chunk:
                return
            yield from ((o, rec) for o, rec in chunk)
            offset = chunk[-1][0] + 1

    def load_latest(self, name: str):
        got = ray.get(self.server.load_snapshot.remote(name))
        return None if got is None else (got[0], unpack(got[1]))  # shard actors ship their state packed

    def since(self, offset: int) -> list:
        return unpack(ray.get(self.server.dead_letters.remote(offset)))


def journal_tail_rows() -> int:
    """Journal rows per partition a shard actor keeps in memory before a flush:
    ``FLOWRANK_JOURNAL_TAIL_ROWS`` from the environment Ray workers inherit (a
    tuning knob; benchmarks use it to make flushes and run merges happen
    sooner), else :data:`engine.core.journal.TAIL_ROWS`."""
    raw = os.environ.get("FLOWRANK_JOURNAL_TAIL_ROWS", "")
    return int(raw) if raw.strip() else TAIL_ROWS


class ShardActor:
    def __init__(self, index: int, n_actors: int, log_server_name: str, namespace: str, cache_dir: str | None = None):
        cache = warm.use_cache_dir(cache_dir)  # before recovery runs the first kernel
        gc_tuning.fix_mmap_threshold()  # before recovery allocates: freed tables leave the process
        # a filled cache (a restart after a crash, or a start after one warm round): load every kernel
        # now, before recovery and before any call is served; a cold one waits for warm(), which the
        # engine sends once one process compiled them (engine.cluster.engine)
        # (only for an engine that asked for warming by naming the cache: flowrank serve)
        self.warmed = (dataclasses.asdict(warm.serving_warm()) if cache_dir is not None and warm.cache_complete(cache)
                       else None)
        # By name, not by handle: a restart must not depend on constructor
        # arguments kept in the object store (ray-project/ray#53727).
        log_server = ray.get_actor(log_server_name, namespace=namespace)
        self.log_server = log_server
        self.name = f"shard-{index}"
        # the journals live on this node, under this Ray cluster's node id: a
        # restart here finds them; one elsewhere replays the whole log instead
        journal_root = os.path.join(tempfile.gettempdir(), "flowrank-journal", namespace,
                                    ray.get_runtime_context().get_node_id(), self.name)
        view = RemoteLogView(log_server)
        # the same recovery as the local service's shards; a shadow, served only once complete
        journals = JournalPlace(journal_root, journal_tail_rows())
        core, replayed = recover_shard(index, n_actors, view, view, journals, view)
        # export spill files: node-local, so a gateway on this node reads them directly
        core.use_spill_dir(os.path.join(spill_dir(namespace), ray.get_runtime_context().get_node_id(), self.name))
        core.merge_in_background()  # journal run merges on a merge thread, swapped in between calls
        self.core = core
        self.replayed = replayed
        # background snapshot saves (snapshot / snapshot_result): one at a time, off the request thread
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self._jobs: dict[str, Future] = {}
        self._jobs_made = 0
        self._go = threading.Event()
        self._go.set()
        gc_tuning.tune()  # a long-lived process full of long-lived objects

    def warm(self, claims: str | None = None) -> dict:
        """Compile or load every engine kernel in this process (a throwaway engine:
        this shard's state is not touched) unless ``__init__`` did; what it took
        (engine.runtime.warm.WarmReport). ``claims``: a cold cache shared out among the
        processes of this start (engine.runtime.compile_share): this one compiles its part first."""
        if self.warmed is None:
            self.warmed = dataclasses.asdict(warm.serving_warm(claims))
        return self.warmed

    def apply(self, through: int, packed_items: bytes) -> bytes:
        return pack(self.core.apply(through, unpack(packed_items)))

    def read(self, packed_requests: bytes) -> bytes:
        requests = unpack(packed_requests)
        answer = pack(self.core.read(requests))
        if any(W.request(r).op == W.DROP for r in requests):  # an archived board's rows just went
            gc_tuning.release_memory()
        return answer

    def snapshot(self) -> list:
        """Begin a snapshot of this shard: ``[offset, job, cut seconds]``. The cut (every array
        copied, :meth:`engine.runtime.shard.ShardCore.snapshot_cut`) is made here, on the request
        thread, between two calls (so it is consistent with every batch applied before it); the
        journal fsyncs, the pack and the save through the log server run on this actor's snapshot
        thread while it goes on applying and answering (docs/storage.md, "Snapshots in the
        background"). ``job``: what :meth:`snapshot_result` answers for (None: nothing applied yet,
        nothing to save). ``cut seconds``: how long this request thread was held."""
        began = time.perf_counter()
        offset, state, syncs = self.core.snapshot_cut()
        job = None
        if offset >= 0:
            self._jobs_made += 1
            job = f"{os.getpid()}-{self._jobs_made}"
            # named by the first offset not in it (docs/storage.md)
            self._jobs[job] = self._saver.submit(self._save, offset + 1, state, syncs)
        return [offset, job, time.perf_counter() - began]

    def _save(self, name_offset: int, state: dict, syncs: list) -> None:
        """On the snapshot thread: what the cut named made durable, then the state packed and saved."""
        self._go.wait()  # set unless a test holds saves (hold_saves): a save in progress to land in
        for sync in syncs:
            sync()
        ray.get(self.log_server.save_snapshot.remote(self.name, name_offset, pack_in_pieces(state)))

    def snapshot_result(self, job: str) -> list | None:
        """None while ``job`` is saving; ``[None]`` once saved durably; ``[error text]`` when it failed
        or this process does not know it (a restarted actor: the save died with the old process)."""
        fut = self._jobs.get(job)
        if fut is None:
            return [f"snapshot {job} is unknown to this shard process (it restarted)"]
        if not fut.done():
            return None
        del self._jobs[job]
        exc = fut.exception()
        return [None] if exc is None else [f"{type(exc).__name__}: {exc}"]

    def hold_saves(self, hold: bool) -> None:
        """Test seam: while held, a background save waits before it starts (a save in progress, for
        reads and batches to go on during, or a kill -9 to land in); False lets it go."""
        if hold:
            self._go.clear()
        else:
            self._go.set()

    def stats(self) -> dict:
        return self.core.stats() | {"pid": os.getpid(), "replayed": self.replayed, "warm": self.warmed is not None,
                                    "snapshots_saving": sum(not f.done() for f in self._jobs.values()),
                                    "merges_in_flight": self.core.merges_in_flight}

    def checksum(self) -> int:
        return self.core.checksum_of_state()

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


RemoteShard = ray.remote(**SHARD_OPTIONS)(ShardActor)
