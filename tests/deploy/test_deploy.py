"""deploy/: the Grafana dashboard and the Prometheus alert rules name only series a running
server exports (scraped from the app over the real LocalService); the KubeRay manifest is a valid
RayCluster (ray.io/v1) for the CRD fields it uses, and runs real ``flowrank serve`` flags."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from gateway.cli import build_parser
from tests.gateway.conftest import BOARD, SEED_EVENTS, ROLE_KEYS, thread_server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERIES = re.compile(r"\b(flowrank_[A-Za-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(flowrank_[A-Za-z0-9_]+)\{([^}]*)\}")
BY = re.compile(r"\bby \(([^)]*)\)")
# Series Prometheus makes itself for every target (not exported by the server)
PROMETHEUS_OWN = {"up"}


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every sample name /metrics exports after a little traffic, with its label names."""
    with thread_server() as url:
        h = {"Authorization": f"Bearer {ROLE_KEYS['admin']}"}
        assert httpx.post(f"{url}/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=h).status_code == 201
        assert httpx.post(f"{url}/v1/events", json={"events": SEED_EVENTS}, headers=h).status_code == 200
        assert httpx.get(f"{url}/v1/boards/{BOARD}/top", headers=h).status_code == 200
        assert httpx.get(f"{url}/v1/boards/{BOARD}/nope", headers=h).status_code == 404
        text = httpx.get(f"{url}/metrics").text
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
    # the webhook series exist only with --webhook-url, which this server runs without: what /metrics renders then
    from gateway.metrics import webhook_families

    for fam in webhook_families({"pending": 0, "delivered": 0, "failed": 0, "attempts": 0, "oldest_pending_age_s": 0}):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


def _check_expr(expr: str, exported: dict[str, set[str]], where: str) -> set[str]:
    names = set(SERIES.findall(expr))
    assert names, f"{where}: no flowrank series in {expr!r}"
    for name in names:
        assert name in exported, f"{where}: {name} is not exported (exported: {sorted(exported)})"
    for name, selector in SELECTOR.findall(expr):
        for label in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", selector):
            # job and instance are the labels Prometheus attaches to every scraped series
            assert label in exported[name] | {"job", "instance"}, f"{where}: {name} has no label {label}"
    for group in BY.findall(expr):
        labels = {x.strip() for x in group.split(",") if x.strip()}
        assert any(labels - {"job", "instance"} <= exported[n] for n in names), f"{where}: by ({group})"
    if "histogram_quantile" in expr:  # quantiles over buckets summed across processes, never per process
        assert re.search(r"histogram_quantile\([0-9.]+, sum by \([^)]*\ble\b[^)]*\) \(rate\(flowrank_\w+_bucket", expr), expr
    return names


def test_grafana_dashboard_uses_exported_series(exported):
    dash = json.loads((DEPLOY / "grafana" / "flowrank.json").read_text())
    exprs = {(p["title"], t["refId"]): t["expr"] for p in dash["panels"] for t in p["targets"]}
    used = set()
    for where, expr in exprs.items():
        used |= _check_expr(expr, exported, str(where))
    # what issue 12 asks the dashboard to show
    for name in ("flowrank_ingest_to_rank_seconds_bucket", "flowrank_log_fsync_seconds_bucket",
                 "flowrank_http_request_seconds_bucket", "flowrank_events_total", "flowrank_http_requests_total",
                 "flowrank_shard_rows", "flowrank_ingest_queue_depth", "flowrank_live_subscribers"):
        assert name in used, name
    assert any('status=~"5.."' in e for e in exprs.values())
    assert any("by (outcome)" in e for e in exprs.values())
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_alert_rules_parse_and_use_exported_series(exported):
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert len(names) == len(rules)
    used = set()
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"} and r["annotations"]["summary"], r
        assert r["labels"]["severity"] in ("warning", "critical")
        if "for" in r:
            assert re.fullmatch(r"[0-9]+[smh]", r["for"]), r["for"]
        if SERIES.search(r["expr"]) is None:
            assert set(re.findall(r"\b([a-z_]+)\{", r["expr"])) <= PROMETHEUS_OWN, r["expr"]
            continue
        used |= _check_expr(r["expr"], exported, r["alert"])
    for name in ("flowrank_ingest_to_rank_seconds_bucket", "flowrank_log_fsync_seconds_bucket",
                 "flowrank_http_requests_total", "flowrank_ready", "flowrank_webhook_oldest_pending_age_seconds",
                 "flowrank_webhook_failed_total", "flowrank_cluster_active", "flowrank_cluster_takeovers",
                 "flowrank_cluster_lag_records"):
        assert name in used, name


def test_alert_rules_of_a_shared_log():
    """docs/api.md §19: no active node (the sum over the log's nodes, also when none answers), repeated
    takeovers (the increase of the takeovers counter), standby lag; a standby is not 'not ready'."""
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    expr = {name: " ".join(r["expr"].split()) for name, r in rules.items()}
    assert expr["FlowRankNoActiveNode"] == '(sum(flowrank_cluster_active{job="flowrank"}) or vector(0)) == 0'
    assert rules["FlowRankNoActiveNode"]["labels"]["severity"] == "critical"
    assert re.fullmatch(r'sum\(increase\(flowrank_cluster_takeovers\{job="flowrank"\}\[1h\]\)\) > [0-9]+',
                        expr["FlowRankRepeatedTakeovers"])
    assert re.fullmatch(r'max by \(instance\) \(flowrank_cluster_lag_records\{job="flowrank"\}\) > [0-9]+',
                        expr["FlowRankStandbyLagHigh"])
    assert "unless on (instance)" in expr["FlowRankNotReady"] and "flowrank_cluster_active" in expr["FlowRankNotReady"]


def test_expr_check_can_fail(exported):
    with pytest.raises(AssertionError):
        _check_expr("sum(rate(flowrank_no_such_total[5m]))", exported, "x")
    with pytest.raises(AssertionError):
        _check_expr('sum(rate(flowrank_events_total{route="/x"}[5m]))', exported, "x")  # no such label
    with pytest.raises(AssertionError):  # a quantile per process, not over summed buckets
        _check_expr("histogram_quantile(0.99, rate(flowrank_log_fsync_seconds_bucket[5m]))", exported, "x")


# ---- KubeRay -----------------------------------------------------------------------------------


def _manifest() -> dict:
    return yaml.safe_load((DEPLOY / "kuberay" / "raycluster.yaml").read_text())


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((DEPLOY / "kuberay" / "raycluster.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_raycluster_manifest_matches_the_crd_subset():
    _validator().validate(_manifest())


@pytest.mark.parametrize("break_it", [
    lambda m: m.update(apiVersion="ray.io/v1alpha1"),
    lambda m: m["spec"]["headGroupSpec"].pop("template"),
    lambda m: m["spec"]["workerGroupSpecs"][0].update(replica=3),  # a typo the API server would prune silently
    lambda m: m["spec"]["workerGroupSpecs"][0].update(replicas="3"),
    lambda m: m["spec"]["headGroupSpec"]["rayStartParams"].update({"num-cpus": 0}),  # must be a string
])
def test_the_schema_refuses_broken_manifests(break_it):
    m = _manifest()
    break_it(m)
    assert not _validator().is_valid(m)


def test_the_flowrank_container_runs_real_serve_flags():
    m = _manifest()
    head = m["spec"]["headGroupSpec"]["template"]["spec"]
    (gateway,) = [c for c in head["containers"] if c.get("command", [None])[0] == "flowrank"]
    args = build_parser().parse_args(gateway["command"][1:])  # exits (SystemExit) on an unknown flag
    assert args.command == "serve" and args.log_format == "json" and args.host == "0.0.0.0"
    port = next(p["containerPort"] for p in gateway["ports"] if p["name"] == "http")
    assert args.port == port == gateway["readinessProbe"]["httpGet"]["port"] == gateway["livenessProbe"]["httpGet"]["port"]
    assert (gateway["readinessProbe"]["httpGet"]["path"], gateway["livenessProbe"]["httpGet"]["path"]) == ("/readyz", "/healthz")
    ann = m["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(args.port) and ann["prometheus.io/path"] == "/metrics"
    # the log server actor runs in the ray-head container (the driver's Ray node): the data dir is mounted there too
    mounts = {c["name"]: {v["mountPath"]: v["name"] for v in c.get("volumeMounts", [])} for c in head["containers"]}
    assert mounts["ray-head"].get(args.data_dir) == mounts["flowrank"][args.data_dir]
    assert args.keys_file.startswith(tuple(p for p in mounts["flowrank"]))
    assert m["spec"]["rayVersion"] in Path(DEPLOY.parent / "cluster.yaml").read_text()  # the same Ray as cluster.yaml
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--no-such-flag"])



# ---- KubeRay: an active and a standby sharing one --log (docs/api.md §19) --------------------------

SAMPLE_LOG_URL = "postgresql://flowrank@pg-a,pg-b/flowrank?target_session_attrs=read-write"


def _ha() -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kuberay" / "ha.yaml").read_text()) if d]


def _nodes(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "RayCluster"}


def _services(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}


def _serve(node: dict) -> tuple[dict, argparse.Namespace, dict]:
    """The node's flowrank container, its command parsed by the real CLI ($(VAR) from its env; a Secret's
    value: a sample URL), and its env by name."""
    head = node["spec"]["headGroupSpec"]["template"]["spec"]
    (gateway,) = [c for c in head["containers"] if c.get("command", [None])[0] == "flowrank"]
    env = {e["name"]: e for e in gateway.get("env", [])}

    def value(name: str) -> str:
        e = env[name]  # KeyError: a $(VAR) the container does not define (Kubernetes would leave it as text)
        return e["value"] if "value" in e else SAMPLE_LOG_URL

    argv = [re.sub(r"\$\(([A-Z_]+)\)", lambda m: value(m.group(1)), a) for a in gateway["command"][1:]]
    return gateway, build_parser().parse_args(argv), env


def test_ha_manifest_is_two_rayclusters_and_their_services():
    docs = _ha()
    assert {d["kind"] for d in docs} == {"RayCluster", "Service"}
    nodes = _nodes(docs)
    assert len(nodes) == 2
    for node in nodes.values():
        _validator().validate(node)
        assert node["spec"]["rayVersion"] == _manifest()["spec"]["rayVersion"]
    for svc in _services(docs).values():
        assert svc["apiVersion"] == "v1" and svc["spec"]["type"] == "ClusterIP" and svc["spec"]["selector"]


@pytest.mark.parametrize("break_it", [
    lambda e: e["valueFrom"]["secretKeyRef"].pop("key"),
    lambda e: e["valueFrom"].update(secretRef={"name": "x"}),  # not a field of an env var's valueFrom
    lambda e: e.update(valueFrom={"secretKeyRef": {"name": "flowrank-log", "key": 1}}),
])
def test_the_schema_refuses_a_broken_secret_reference(break_it):
    node = next(iter(_nodes(_ha()).values()))
    gateway, _, env = _serve(node)
    break_it(env["FLOWRANK_LOG"])
    assert not _validator().is_valid(node)


def test_each_node_serves_the_log_from_a_secret_with_its_own_name_and_url():
    docs = _ha()
    nodes, services = _nodes(docs), _services(docs)
    parsed = {name: _serve(node) for name, node in nodes.items()}
    for name, (gateway, args, env) in parsed.items():
        assert args.command == "serve" and args.log_url == SAMPLE_LOG_URL  # --log $(FLOWRANK_LOG)
        assert "$(FLOWRANK_LOG)" in gateway["command"] and "value" not in env["FLOWRANK_LOG"]
        assert env["FLOWRANK_LOG"]["valueFrom"]["secretKeyRef"] == {"name": "flowrank-log", "key": "url"}
        assert args.node == name  # --node: the RayCluster's name
        # --advertise-url: the node's own Service, on the port its flowrank container serves
        assert args.advertise_url == f"http://{name}:{args.port}"
        own = services[name]["spec"]
        assert own.get("publishNotReadyAddresses") is True  # its name resolves whatever its role
        labels = nodes[name]["spec"]["headGroupSpec"]["template"]["metadata"]["labels"]
        assert own["selector"].items() <= labels.items()
        (port,) = own["ports"]
        assert port["port"] == args.port and port["targetPort"] in {p["name"] for p in gateway["ports"]}
        assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": args.port}  # the active only
        assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert args.log_format == "json" and args.host == "0.0.0.0" and args.lease_s > 0
    # one active and one standby, the same keys, the same lease, a data volume each
    assert sorted(bool(args.standby) for _, args, _ in parsed.values()) == [False, True]
    assert len({args.keys_file for _, args, _ in parsed.values()}) == 1
    assert len({args.lease_s for _, args, _ in parsed.values()}) == 1
    assert len({args.advertise_url for _, args, _ in parsed.values()}) == 2
    claims = {n["spec"]["headGroupSpec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
              for n in nodes.values()}
    assert len(claims) == 2
    # each node's own Service selects its head pod and not the other's
    for name, node in nodes.items():
        for other, svc in services.items():
            if other in nodes:
                labels = node["spec"]["headGroupSpec"]["template"]["metadata"]["labels"]
                assert (svc["spec"]["selector"].items() <= labels.items()) == (other == name)


def test_the_write_service_follows_readiness_and_the_read_service_takes_every_node():
    docs = _ha()
    nodes, services = _nodes(docs), _services(docs)
    heads = [n["spec"]["headGroupSpec"]["template"]["metadata"]["labels"] for n in nodes.values()]
    workers = [g["template"]["metadata"]["labels"] for n in nodes.values() for g in n["spec"]["workerGroupSpecs"]]
    for name in ("flowrank", "flowrank-reads"):
        sel = services[name]["spec"]["selector"].items()
        assert all(sel <= h.items() for h in heads) and not any(sel <= w.items() for w in workers), name
        (port,) = services[name]["spec"]["ports"]
        for node in nodes.values():
            gateway, args, _ = _serve(node)
            assert port["port"] == args.port and port["targetPort"] in {p["name"] for p in gateway["ports"]}
    # writes: endpoints are the Ready pods, i.e. the node whose /readyz answers 200 (the active)
    assert not services["flowrank"]["spec"].get("publishNotReadyAddresses", False)
    # reads: every node, standbys included (a standby never passes /readyz); /readyz/reads is the check in front
    assert services["flowrank-reads"]["spec"]["publishNotReadyAddresses"] is True
    assert "/readyz/reads" in (DEPLOY / "kuberay" / "ha.yaml").read_text()
