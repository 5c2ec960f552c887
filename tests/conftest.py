"""Session-wide fixtures. One local Ray instance serves every test that
needs Ray (RAY_NOTES: ray.init costs ~4 s); unit tests never start it."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

# Property tests draw the same examples on every CI run (derandomize: a red run
# always reproduces from the commit alone, and main never goes red on a lucky
# draw). HYPOTHESIS_PROFILE=explore draws fresh random examples: run it locally
# to hunt for new counterexamples, then keep any it finds as @example cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# One numba compile cache for the whole run, in this process, in every `flowrank serve`
# it starts and in every Ray worker (they inherit the environment): without it each
# serve on a temporary data directory would compile every kernel into
# <data-dir>/.numba-cache (engine.runtime.warm). A run that sets FLOWRANK_CACHE_DIR keeps it.
def _shared_compile_cache() -> None:
    from engine.runtime import warm

    root = os.environ.setdefault(warm.ENV_CACHE_ROOT, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), ".numba-cache"))
    warm.use_cache_dir(warm.cache_dir_for(root))


_shared_compile_cache()


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
