"""cluster.yaml passes the same offline checks `ray up` runs before contacting any machine.

prepare_config + validate_config from ray.autoscaler._private.util, against the
schema shipped in the ray package. Nothing here starts Ray or opens a socket.
"""

import copy
from pathlib import Path

import pytest
import yaml

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"
SERVICE = "flowrank serve --ray-address auto --host 0.0.0.0 --data-dir /var/lib/flowrank"


@pytest.fixture(scope="module")
def raw():
    with open(CLUSTER_YAML) as f:
        return yaml.safe_load(f)


def test_prepare_and_validate_like_ray_up(raw):
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)  # raises jsonschema.ValidationError / ValueError on a bad file
    assert prepared["head_node_type"] in prepared["available_node_types"]
    node = prepared["available_node_types"][prepared["head_node_type"]]
    assert node["min_workers"] == node["max_workers"] == len(raw["provider"]["worker_ips"])


def test_local_provider_shape(raw):
    p = raw["provider"]
    assert p["type"] == "local"
    assert p["head_ip"] and p["worker_ips"]
    assert raw["auth"]["ssh_user"]
    assert "available_node_types" not in raw  # provider local generates its own


def test_service_started_on_head_after_ray(raw):
    head = raw["head_start_ray_commands"]
    i_ray = next(i for i, c in enumerate(head) if "ray start --head" in c)
    i_svc = next(i for i, c in enumerate(head) if SERVICE in c)
    assert i_svc > i_ray
    assert "nohup" in head[i_svc]
    assert not any(SERVICE in c for c in raw["worker_start_ray_commands"])


def test_auth_mode_set_explicitly_everywhere(raw):
    for cmd in raw["head_start_ray_commands"] + raw["worker_start_ray_commands"]:
        if "ray start" in cmd or "flowrank serve" in cmd or "ray stop" in cmd:
            assert "RAY_AUTH_MODE=" in cmd, cmd
    assert "~/.ray/auth_token" in raw["file_mounts"]


def test_project_installed_from_checkout(raw):
    assert raw["file_mounts"]["~/flowrank"] == "."
    assert any("pip install -e" in c and "~/flowrank" in c for c in raw["setup_commands"])


def test_launch_instructions_in_comments():
    text = CLUSTER_YAML.read_text()
    assert "ray up cluster.yaml" in text
    assert "python -m benchmarks run --ray-address auto" in text
