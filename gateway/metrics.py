"""Prometheus metrics (docs/api.md §11), one :class:`CollectorRegistry` per app.

Gateway-side: requests and latency by route template, live subscribers.
Engine-side series are read at scrape time from ``engine_client.stats()``,
whose keys are those of :class:`engine.runtime.base.RouterClient` (shared
by ``LocalService`` and ``ClusterEngine``):

======================  ==============================  ===============================================
stats key               value                           exported as
======================  ==============================  ===============================================
``outcomes``            ``{outcome: count}`` (since     counter ``flowrank_events_total{outcome}``
                        process start)
``queue_depth``         events waiting to sequence      gauge ``flowrank_ingest_queue_depth``
``histograms``          ``{name: HistogramSnapshot}``   histograms ``flowrank_log_fsync_seconds``,
                        counted since start             ``flowrank_ingest_to_rank_seconds``,
                                                        ``flowrank_snapshot_pause_seconds``
                                                        (``_bucket{le}``, ``_sum``, ``_count``)
``fsync_seconds``       recent samples (≤ 4,096)        gauge ``flowrank_log_fsync_seconds_window{quantile}``
``ingest_to_rank_       recent samples: durable append  gauge ``flowrank_ingest_to_rank_seconds_window
seconds``               → visible to reads              {quantile}``
``snapshot_pause_       recent samples                  gauge ``flowrank_snapshot_pause_seconds_window
seconds``                                               {quantile}``
``shard_rows``          ``{shard index: rows}``         gauge ``flowrank_shard_rows{shard}``
``storage_errors``      count since start               counter ``flowrank_storage_errors_total``
``dead_letters``        list of dead-lettered records   gauge ``flowrank_dead_letters``
``webhooks``            ``WebhookDelivery.stats()``     :func:`webhook_families`: gauges
                        (engine.runtime.webhooks), only ``flowrank_webhook_pending``,
                        with ``--webhook-url``          ``flowrank_webhook_oldest_pending_age_seconds``,
                                                        ``flowrank_webhook_outbox_bytes``;
                                                        counters ``flowrank_webhook_delivered_total``,
                                                        ``flowrank_webhook_failed_total``,
                                                        ``flowrank_webhook_attempts_total``
``erasures``            ``ErasureJob.stats()``          :func:`erasure_families`: gauges
                        (engine.runtime.erasure)        ``flowrank_erasures_pending``,
                                                        ``flowrank_erasure_oldest_pending_age_seconds``;
                                                        counters ``flowrank_erasures_completed_total``,
                                                        ``flowrank_erasure_bytes_rewritten_total``
other numeric ``k``                                     gauge ``flowrank_engine_<k>``
other list ``k``        numbers                         ``flowrank_engine_<k>{quantile}``
======================  ==============================  ===============================================

The histograms are what dashboards and alerts use: cumulative buckets sum
across gateway processes (``histogram_quantile(0.99, sum by (le)
(rate(..._bucket[5m])))``). The sample windows stay as per-process quantile
gauges (0.5, 0.9, 0.99, 1 = max) under ``<name>_window`` plus
``<name>_window_samples`` (how many samples they cover): a quick look at one
process, never something to aggregate.

The /metrics route awaits ``engine.refresh_stats()`` (bounded) before a scrape,
so ``flowrank_shard_rows`` includes every write acknowledged before it.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from engine.core.histogram import LATENCY_BUCKETS, HistogramSnapshot

log = logging.getLogger("flowrank.gateway")

_SAFE = re.compile(r"[^a-zA-Z0-9_]")

_LAT_BUCKETS = LATENCY_BUCKETS  # the engine's histograms use the same bounds

_QUANTILES = (0.5, 0.9, 0.99, 1.0)

# stats key -> (metric name, help) for the sample-window timings
_TIMINGS = {
    "fsync_seconds": ("flowrank_log_fsync_seconds", "Event-log append + fsync latency per batch."),
    "ingest_to_rank_seconds": ("flowrank_ingest_to_rank_seconds",
                               "Seconds from durable append to visibility in reads."),
    "snapshot_pause_seconds": ("flowrank_snapshot_pause_seconds",
                               "How long ingestion paused for a snapshot."),
}


# WebhookDelivery.stats() key -> (counter?, metric name, help); the counts are the outbox's durable ones,
# so the counters never go back, not even across a restart
_WEBHOOK = {
    "pending": (False, "flowrank_webhook_pending", "Webhook messages neither delivered nor failed yet."),
    "delivered": (True, "flowrank_webhook_delivered", "Webhook messages delivered (answered 2xx), durable."),
    "failed": (True, "flowrank_webhook_failed", "Webhook messages given up (--webhook-give-up-s passed)."),
    "attempts": (True, "flowrank_webhook_attempts", "Webhook delivery attempts (POSTs), durable."),
    "oldest_pending_age_s": (False, "flowrank_webhook_oldest_pending_age_seconds",
                             "Age of the oldest webhook message not yet delivered or failed (0: none)."),
    "outbox_bytes": (False, "flowrank_webhook_outbox_bytes",
                     "Bytes of the webhook outbox's files: the undelivered messages' segments and the compact "
                     "record of finished ones."),
}


_ERASURE = {  # key of ErasureJob.stats() -> (counter?, name, help); docs/api.md §17
    "pending": (False, "flowrank_erasures_pending", "Player erasures not yet complete on disk."),
    "oldest_pending_age_seconds": (False, "flowrank_erasure_oldest_pending_age_seconds",
                                   "Age of the oldest erasure not yet complete on disk (0: none); alert well "
                                   "before --erasure-deadline-s."),
    "complete": (True, "flowrank_erasures_completed", "Player erasures complete on disk (every one the log holds)."),
    "bytes_rewritten": (True, "flowrank_erasure_bytes_rewritten",
                        "Bytes the erasure job rewrote (log segments, journal runs) since start."),
}


def erasure_families(stats: dict) -> list:
    """The ``flowrank_erasure*`` families of one ``ErasureJob.stats()`` (engine.runtime.erasure).

    >>> [f.name for f in erasure_families({"pending": 1, "oldest_pending_age_seconds": 2.5})]
    ['flowrank_erasures_pending', 'flowrank_erasure_oldest_pending_age_seconds']
    """
    out = _families(_ERASURE, stats)
    steps = stats.get("steps")
    if isinstance(steps, dict) and steps:
        secs = GaugeMetricFamily("flowrank_erasure_last_run_step_seconds",
                                 "How long each step of the erasure job's last run took.", labels=["step"])
        began = GaugeMetricFamily("flowrank_erasure_last_run_step_started_seconds",
                                  "When each step of the erasure job's last run started (epoch seconds).",
                                  labels=["step"])
        for name, (start, seconds) in steps.items():
            secs.add_metric([name], seconds)
            began.add_metric([name], start)
        out += [secs, began]
    return out


def _families(table: dict, stats: dict) -> list:
    """A gauge or counter family per key of ``table`` that ``stats`` has a number for."""
    out = []
    for key, (counter, name, doc) in table.items():
        value = stats.get(key)
        if _num(value):
            out.append((CounterMetricFamily if counter else GaugeMetricFamily)(name, doc, value=value))
    return out


def webhook_families(stats: dict) -> list:
    """The ``flowrank_webhook_*`` families of one ``WebhookDelivery.stats()``
    (engine.runtime.webhooks); keys it lacks are left out.

    >>> [f.name for f in webhook_families({"pending": 2, "failed": 0})]
    ['flowrank_webhook_pending', 'flowrank_webhook_failed']
    """
    return _families(_WEBHOOK, stats)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def quantiles(samples: list[float], qs=_QUANTILES) -> list[tuple[float, float]]:
    """Nearest-rank quantiles of ``samples`` (non-empty), O(n log n).

    >>> quantiles([3.0, 1.0, 2.0], (0.5, 1.0))
    [(0.5, 2.0), (1.0, 3.0)]
    """
    s = sorted(samples)
    return [(q, s[min(len(s) - 1, int(q * len(s)))]) for q in qs]


class EngineStatsCollector:
    """Turns ``stats()`` into metric families on every scrape; never raises."""

    def __init__(self, stats: Callable[[], dict]):
        self._stats = stats

    def describe(self):
        return []

    def collect(self):
        try:
            stats = dict(self._stats() or {})
        except Exception:  # a broken stats() must not break /metrics
            log.warning("engine stats() failed", exc_info=True)
            return
        try:
            yield from self._families(stats)
        except Exception:
            log.warning("engine stats() had an unexpected shape", exc_info=True)

    def _families(self, stats: dict):
        outcomes = stats.pop("outcomes", None)
        fam = CounterMetricFamily("flowrank_events", "Score events by outcome (engine, since process start).",
                                  labels=["outcome"])
        if isinstance(outcomes, dict):
            for outcome, n in sorted(outcomes.items()):
                if _num(n):
                    fam.add_metric([str(outcome)], n)
        yield fam
        depth = stats.pop("queue_depth", None)
        if _num(depth):
            yield GaugeMetricFamily("flowrank_ingest_queue_depth", "Events admitted but not yet sequenced.",
                                    value=depth)
        rows = stats.pop("shard_rows", None)
        if isinstance(rows, dict):
            fam = GaugeMetricFamily("flowrank_shard_rows", "Rows held per shard (all boards).", labels=["shard"])
            for shard, n in sorted(rows.items(), key=lambda kv: str(kv[0])):
                if _num(n):
                    fam.add_metric([str(shard)], n)
            yield fam
        errors = stats.pop("storage_errors", None)
        if _num(errors):
            yield CounterMetricFamily("flowrank_storage_errors", "Event-log append failures since start.",
                                      value=errors)
        dead = stats.pop("dead_letters", None)
        if isinstance(dead, (list, tuple)) or _num(dead):
            yield GaugeMetricFamily("flowrank_dead_letters", "Records a shard could not apply (dead letters).",
                                    value=len(dead) if isinstance(dead, (list, tuple)) else dead)
        webhooks = stats.pop("webhooks", None)
        if isinstance(webhooks, dict):
            yield from webhook_families(webhooks)
        erasures = stats.pop("erasures", None)
        if isinstance(erasures, dict):
            yield from erasure_families(erasures)
        histograms = stats.pop("histograms", None)
        if isinstance(histograms, dict):
            for key, (name, doc) in _TIMINGS.items():
                snap = histograms.get(key)
                if snap is not None:
                    yield self._histogram(name, f"{doc} Counted since process start.", snap)
        for key, (name, doc) in _TIMINGS.items():
            value = stats.pop(key, None)
            if value is not None:
                yield from self._window(name, f"{doc} Recent samples of this process (aggregate the "
                                        "histogram instead).", value, "_window")
        for key, value in stats.items():
            name = "flowrank_engine_" + _SAFE.sub("_", str(key))
            if _num(value):
                yield GaugeMetricFamily(name, f"Engine stat {key}.", value=value)
            elif isinstance(value, (list, tuple)) and value and all(_num(x) for x in value):
                yield from self._window(name, f"Engine stat {key} (recent samples).", value)

    @staticmethod
    def _histogram(name: str, doc: str, snap: HistogramSnapshot) -> HistogramMetricFamily:
        bounds, cumulative = tuple(snap.bounds), tuple(snap.cumulative)
        if len(cumulative) != len(bounds) + 1:
            raise ValueError(f"{name}: {len(bounds)} bounds but {len(cumulative)} cumulative counts")
        buckets = [(floatToGoString(b), n) for b, n in zip(bounds, cumulative)] + [("+Inf", cumulative[-1])]
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=snap.sum)

    @staticmethod
    def _window(name: str, doc: str, value, suffix: str = ""):
        """``<name><suffix>{quantile}`` gauges and ``<name>_window_samples``."""
        samples = [float(x) for x in value if _num(x)] if isinstance(value, (list, tuple)) else (
            [float(value)] if _num(value) else [])
        fam = GaugeMetricFamily(name + suffix, doc, labels=["quantile"])
        if samples:
            for q, v in quantiles(samples):
                fam.add_metric([str(q)], v)
        yield fam
        yield GaugeMetricFamily(f"{name}_window_samples", f"Samples behind {name}{suffix}.", value=len(samples))


class Metrics:
    def __init__(self, stats: Callable[[], dict], live_subscribers: Callable[[], int]):
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("flowrank_http_requests", "HTTP requests by route template, method and status.",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("flowrank_http_request_seconds", "Request latency by route template.",
                                 ["route", "method"], buckets=_LAT_BUCKETS, registry=self.registry)
        live = Gauge("flowrank_live_subscribers", "Connected live (SSE) subscribers.", registry=self.registry)
        live.set_function(lambda: float(live_subscribers()))
        # set by the /metrics route from engine.ready() just before each scrape (what /readyz answers)
        self.ready = Gauge("flowrank_ready", "1 when the engine accepts writes (/readyz 200), else 0.",
                           registry=self.registry)
        # set by the /metrics route from the engine's cluster_info() (docs/api.md §19)
        self.cluster_active = Gauge("flowrank_cluster_active", "1 on the active node of its log, 0 on a standby.",
                                    registry=self.registry)
        self.cluster_epoch = Gauge("flowrank_cluster_epoch", "The log epoch this node knows (fencing).",
                                   registry=self.registry)
        self.cluster_lag_records = Gauge("flowrank_cluster_lag_records",
                                         "Records in the log this node has not applied yet.", registry=self.registry)
        self.cluster_takeovers = Gauge("flowrank_cluster_takeovers", "Times this node took the log's lease.",
                                       registry=self.registry)
        self.registry.register(EngineStatsCollector(stats))
        self._children: dict = {}

    def set_cluster(self, info: dict) -> None:
        self.cluster_active.set(1.0 if info["role"] == "active" else 0.0)
        self.cluster_epoch.set(float(info["epoch"]))
        self.cluster_lag_records.set(float(info["lag_records"]))
        self.cluster_takeovers.set(float(info.get("takeovers", 0)))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        pair = self._children.get(key)
        if pair is None:  # labels() costs a lock and a dict walk; cache the children
            pair = (self.requests.labels(route, method, str(status)), self.latency.labels(route, method))
            self._children[key] = pair
        pair[0].inc()
        pair[1].observe(seconds)


class MetricsMiddleware:
    """Pure ASGI: time each HTTP request, label it by the matched route template.

    Streaming responses (SSE) are labelled when their headers go out.
    """

    def __init__(self, app, metrics_getter: Callable[[], Metrics | None]):
        self.app = app
        self._metrics = metrics_getter

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500, False]  # code, recorded

        def record():
            if status[1]:
                return
            status[1] = True
            metrics = self._metrics()
            if metrics is None:
                return
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            metrics.observe(template, scope.get("method", ""), status[0], time.perf_counter() - start)

        async def wrapped_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                for name, value in message.get("headers") or ():  # no dict per response: find one header
                    if name == b"content-type":
                        if value.startswith(b"text/event-stream"):
                            record()
                        break
            await send(message)

        try:
            await self.app(scope, receive, wrapped_send)
        finally:
            record()
