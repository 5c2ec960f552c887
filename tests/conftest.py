"""Session-wide fixtures. One local Ray instance serves every test that
needs Ray (RAY_NOTES: ray.init costs ~4 s); unit tests never start it."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """A private local Ray for the whole run: address="local" (never attach to
    someone else's cluster), its own short temp dir, token auth off on loopback.
    Owned through benchmarks.processes.owned_ray (issue 14: nothing outlives the run)."""
    from benchmarks.processes import owned_ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    tmp = tempfile.mkdtemp(prefix="fr-ray-", dir="/tmp")  # short: unix socket paths are limited
    os.environ["RAY_TMPDIR"] = tmp
    try:
        # owned: shut down and swept on every exit path; SIGTERM unwinds the run like Ctrl-C
        with owned_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=tmp) as ray:
            yield ray
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
