"""Session-wide fixtures. One local Ray instance serves every test that
needs Ray (RAY_NOTES: ray.init costs ~4 s); unit tests never start it. Likewise one
PostgreSQL primary + standby (pg_cluster, ~2 s to start) serves every test that asks
for a database (pg_url)."""

from __future__ import annotations

import itertools
import os
import re
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


@pytest.fixture(scope="session")
def pg_cluster():
    """One PostgreSQL primary + synchronous hot standby for the whole run
    (benchmarks.pg_cluster.PgCluster), under its own short directory in /tmp, stopped and
    removed at the end. Missing PostgreSQL binaries fail the test, never skip it: CI
    installs Debian's postgresql (.ci/run)."""
    from benchmarks.pg_cluster import PgCluster, find_bindir

    try:
        find_bindir()
    except RuntimeError as e:
        pytest.fail(f"pg_cluster: {e}", pytrace=False)
    tmp = tempfile.mkdtemp(prefix="fr-pg-", dir="/tmp")
    os.chmod(tmp, 0o755)  # the servers run as the postgres OS user when we are root
    cluster = PgCluster(os.path.join(tmp, "pg"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


_PG_DATABASES = itertools.count(1)


@pytest.fixture
def pg_url(pg_cluster, request):
    """The multi-host URL (target_session_attrs=read-write) of a fresh empty database on the
    session's pg_cluster, replicated to its standby; dropped after the test."""
    import psycopg

    stem = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())[:40]
    name = f"t{next(_PG_DATABASES)}_{stem}"
    url = pg_cluster.create_database(name)
    yield url
    try:
        with psycopg.connect(pg_cluster.url_for("postgres", "primary"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except psycopg.Error:
        pass  # a test that took the session's primary down has failed already
