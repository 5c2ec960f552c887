"""gateway.metrics: the flowrank_webhook_* families, from a WebhookDelivery.stats() dict
under the engine stats' "webhooks" key (or webhook_families called directly)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import EngineStatsCollector, webhook_families

STATS = {"pending": 3, "delivered": 120, "failed": 1, "attempts": 170, "oldest_pending_age_s": 42.5, "window": 3}


def scrape(stats: dict) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineStatsCollector(lambda: stats))
    text = generate_latest(registry).decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_webhook_series_come_from_the_stats_dict():
    m = scrape({"outcomes": {}, "webhooks": dict(STATS)})
    assert {k: v for k, v in m.items() if k.startswith("flowrank_webhook")} == {
        "flowrank_webhook_pending": 3, "flowrank_webhook_delivered_total": 120, "flowrank_webhook_failed_total": 1,
        "flowrank_webhook_attempts_total": 170, "flowrank_webhook_oldest_pending_age_seconds": 42.5}
    assert "flowrank_engine_webhooks" not in m


def test_no_webhooks_no_webhook_series():
    assert not [k for k in scrape({"outcomes": {}}) if "webhook" in k]
    assert webhook_families({"pending": "odd", "failed": None}) == []


def test_a_real_worker_stats_render_every_family(tmp_path):
    from engine.log.outbox import Outbox
    from engine.runtime.webhooks import WebhookDelivery

    with Outbox.open(str(tmp_path / "outbox")) as ob:
        stats = WebhookDelivery(ob, "http://127.0.0.1:9/", b"k").stats()
    assert [f.name for f in webhook_families(stats)] == [
        "flowrank_webhook_pending", "flowrank_webhook_delivered", "flowrank_webhook_failed",
        "flowrank_webhook_attempts", "flowrank_webhook_oldest_pending_age_seconds", "flowrank_webhook_outbox_bytes"]
