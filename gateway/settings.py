"""Gateway configuration: every ``flowrank serve`` option plus the knobs
docs/api.md leaves to the implementation (limits, live fan-out, view caches).

A :class:`Settings` is a frozen record; build one with keyword arguments or
from parsed CLI arguments (:func:`gateway.cli.parse_args`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.model import DEFAULT_DEDUP_RETENTION, DEFAULT_DELTA_RETENTION
from engine.core.webhooks import DEFAULT_GIVE_UP_S

MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    # --- docs/api.md §1 options -------------------------------------------------
    data_dir: str | None = "./flowrank-data"
    host: str = "127.0.0.1"
    port: int = 8000
    shards: int | None = None  # None: number of CPUs the engine sees
    keys_file: str | None = None
    friends_file: str | None = None
    friends_url: str | None = None
    delta_retention: int = DEFAULT_DELTA_RETENTION
    dedup_retention: int = DEFAULT_DEDUP_RETENTION
    ray_address: str | None = None
    # --engine-host NAME: a gateway of the engine host actor NAME (flowrank serve --workers N), no engine here
    engine_host: str | None = None
    # "ray" (default: shards are Ray actors, embedded local Ray unless
    # --ray-address) or "local" (every shard in this process, no Ray).
    engine: str = "ray"
    n_shard_actors: int | None = None  # None: one per CPU Ray sees
    snapshot_every_events: int = 1_000_000
    snapshot_every_seconds: float = 300.0
    prune_log: bool = False  # delete log segments wholly before every snapshot (default: keep for audit)
    appends_in_flight: int = 2  # --appends-in-flight: log appends the sequencer keeps in flight (1: serial)
    ray_dashboard: bool = False  # embedded Ray only: start Ray's dashboard (default: lean, no dashboard)
    # --cors-origin (docs/api.md §12): origins ("*" allowed) that get CORS headers on /v1 routes; () = none
    cors_origins: tuple[str, ...] = ()
    # --cache-dir: root of the numba compile cache (None: $FLOWRANK_CACHE_DIR, else <data_dir>/.numba-cache;
    # engine.runtime.warm.resolve_cache_root)
    cache_dir: str | None = None
    # --webhook-url (docs/api.md §16 "Webhooks"): awards and board state changes are POSTed there; None: no webhooks
    webhook_url: str | None = None
    # --webhook-secret-file: its bytes (less one trailing newline) key the signatures; None: <data_dir>/webhook_secret,
    # created on first start (engine.runtime.webhooks.load_or_create_secret)
    webhook_secret_file: str | None = None
    # --webhook-give-up-s: a message not delivered this long after it was created is failed
    webhook_give_up_s: float = float(DEFAULT_GIVE_UP_S)
    # --erasure-deadline-s (docs/api.md §17): an erasure is complete on disk within this long of its request
    erasure_deadline_s: float = 3600.0
    # --rank-mirror-rows: a board with at most this many rows answers exact rank from a mirror beside the
    # router, built on its first exact-rank read (engine.core.rank_mirror; ~90 B a row); 0: always the shard actors
    rank_mirror_rows: int = 4_000_000
    # --log postgresql://… (docs/api.md §19): the event log and snapshots in PostgreSQL; None: under data_dir
    log_url: str | None = None
    node: str | None = None  # --node: this node's name among the nodes of one log (default: the host name)
    advertise_url: str | None = None  # --advertise-url: its base URL for X-FlowRank-Leader (default http://host:port)
    lease_s: float = 3.0  # --lease-s: a standby may take over this long after the active's last renewal
    standby: bool = False  # --standby (with --log): follow the log, answer reads, take over when the lease frees

    # --- credentials ----------------------------------------------------
    # Inline key entries (same shape as the keys file entries). When set they
    # win over ``keys_file``; meant for embedding and tests.
    keys: tuple[dict, ...] | None = None

    # --- request limits (docs/api.md §3/§8) -------------------------------------
    max_body_bytes: int = 8 * MIB
    max_batch_events: int = 10_000
    max_ranked_subset: int = 10_000
    max_limit: int = 1000
    max_radius: int = 100

    # --- rate limits: per credential token buckets ------------------------
    read_rate_per_s: float = 5000.0
    read_burst: float = 10000.0
    write_rate_per_s: float = 200.0
    write_burst: float = 400.0

    # --- live updates (docs/api.md §9) --------------------------------------------
    live_window_ms: int = 50
    live_queue_size: int = 64
    live_max_subscribers: int = 10_000
    live_max_per_board: int = 2_000
    live_heartbeat_s: float = 15.0
    live_default_top: int = 100

    # --- cached views for ?max_staleness_ms -------------------------------
    view_cache_entries: int = 1024
    view_cache_max_age_ms: int = 10_000  # never serve anything older, whatever N says
    lean_routes: bool = True  # hot routes through gateway.hot's ASGI dispatcher (False: all through FastAPI)

    # --- friends provider ---------------------------------------------------
    friends_timeout_s: float = 1.0
    friends_cache_ttl_s: float = 30.0
    friends_cache_entries: int = 10_000

    # --- misc ----------------------------------------------------------------
    retry_after_overloaded_s: int = 1
    extra: dict = field(default_factory=dict)
