"""Fixtures the engine tests share with the storage tests."""

from tests.log.conftest import outbox  # noqa: F401  (the webhook outbox fixture, for test_webhook_delivery)
