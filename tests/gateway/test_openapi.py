"""The app's own /openapi.json: complete, and honoured (schemathesis: no 5xx,
conforming responses) by the app over the real LocalService, served on a
loopback socket (the engine lives on the server's event loop)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings as hsettings

from gateway.app import create_app
from tests.gateway.conftest import settings, thread_server


def _settings():
    return settings(read_rate_per_s=1e9, read_burst=1e9, write_rate_per_s=1e9, write_burst=1e9)


def _spec() -> dict:
    """The schema only: an app that is never served needs no engine."""
    return create_app(_settings(), engine_client=None).openapi()


SPEC = _spec()


def test_every_route_is_documented_with_error_bodies():
    spec = SPEC
    assert {"ErrorBody", "ErrorDetail", "EventBatchIn", "EventIn"} <= set(spec["components"]["schemas"])
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op.get("summary"), (method, path)
            if path.startswith("/v1/"):
                for status in ("401", "403", "422", "429"):
                    ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorBody"), (method, path, status)
    events = spec["paths"]["/v1/events"]["post"]
    assert events["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/EventBatchIn")
    assert "413" in events["responses"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


@pytest.fixture(scope="module")
def base_url():
    with thread_server(_settings) as url:
        yield url


schema = schemathesis.openapi.from_dict(SPEC)


@schema.exclude(path_regex=r".*/live$").parametrize()
@hsettings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case, base_url):
    case.headers = {**(case.headers or {}), "Authorization": "Bearer admin-key"}
    response = case.call(base_url=base_url)
    assert response.status_code < 500, (case.method, case.path, response.text)
    case.validate_response(response, checks=(
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_schema_conformance,
    ))
