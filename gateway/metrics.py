"""Prometheus metrics (API §11), one :class:`CollectorRegistry` per app.

Gateway-side: requests and latency by route template, events by outcome,
live subscribers. Engine-side numbers are read at scrape time from
``engine_client.stats()`` (a dict); whatever keys are present are exported,
see docs/http.md for the keys we expect:

* ``ingest_queue_depth``: number
* ``ingest_to_rank_lag_seconds``: number or list of recent samples
* ``log_fsync_seconds``: number or list of recent samples
* ``shard_rows``: ``{board_id: {shard: rows}}`` or ``{shard: rows}``
* ``dead_letters``: number
* any other numeric key ``k``: exported as gauge ``flowrank_engine_<k>``
"""

from __future__ import annotations

import logging
import re
import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily

log = logging.getLogger("flowrank.gateway")

_SAFE = re.compile(r"[^a-zA-Z0-9_]")

_LAT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _quantiles(samples: list[float]) -> list[tuple[str, float]]:
    s = sorted(samples)
    out = []
    for q in (0.5, 0.9, 0.99):
        out.append((str(q), s[min(len(s) - 1, int(q * len(s)))]))
    return out


class EngineStatsCollector:
    """Turns ``stats()`` into metric families on every scrape; never raises."""

    def __init__(self, stats: Callable[[], dict]):
        self._stats = stats

    def describe(self):
        return []

    def collect(self):
        try:
            stats = self._stats() or {}
        except Exception:  # a broken stats() must not break /metrics
            log.warning("engine stats() failed", exc_info=True)
            return
        for key, value in stats.items():
            name = _SAFE.sub("_", str(key))
            if key in ("ingest_to_rank_lag_seconds", "log_fsync_seconds") or name.endswith("_seconds"):
                yield from self._timing(name, value)
            elif key == "shard_rows" and isinstance(value, dict):
                fam = GaugeMetricFamily("flowrank_shard_rows", "Rows held per shard.", labels=["board", "shard"])
                for k, v in value.items():
                    if isinstance(v, dict):
                        for shard, n in v.items():
                            if _num(n):
                                fam.add_metric([str(k), str(shard)], n)
                    elif _num(v):
                        fam.add_metric(["", str(k)], v)
                yield fam
            elif _num(value):
                yield GaugeMetricFamily(f"flowrank_engine_{name}", f"Engine stat {key}.", value=value)

    @staticmethod
    def _timing(name: str, value):
        metric = f"flowrank_{name}"
        if _num(value):
            yield GaugeMetricFamily(metric, f"Latest {name}.", value=value)
        elif isinstance(value, (list, tuple)):
            samples = [float(x) for x in value if _num(x)]
            fam = SummaryMetricFamily(metric, f"Recent samples of {name}.", count_value=len(samples),
                                      sum_value=sum(samples))
            yield fam
            q = GaugeMetricFamily(f"{metric}_quantile", f"Quantiles of recent {name} samples.", labels=["quantile"])
            if samples:
                for label, v in _quantiles(samples):
                    q.add_metric([label], v)
            yield q


class Metrics:
    def __init__(self, stats: Callable[[], dict], live_subscribers: Callable[[], int]):
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("flowrank_http_requests", "HTTP requests by route template, method and status.",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("flowrank_http_request_seconds", "Request latency by route template.",
                                 ["route", "method"], buckets=_LAT_BUCKETS, registry=self.registry)
        self.events = Counter("flowrank_events", "Score events by outcome.", ["outcome"], registry=self.registry)
        live = Gauge("flowrank_live_subscribers", "Connected live (SSE) subscribers.", registry=self.registry)
        live.set_function(lambda: float(live_subscribers()))
        self.registry.register(EngineStatsCollector(stats))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)


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
        status = {"code": 500, "done": False}

        def record():
            if status["done"]:
                return
            status["done"] = True
            metrics = self._metrics()
            if metrics is None:
                return
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            metrics.observe(template, scope.get("method", ""), status["code"], time.perf_counter() - start)

        async def wrapped_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                    record()
            await send(message)

        try:
            await self.app(scope, receive, wrapped_send)
        finally:
            record()
