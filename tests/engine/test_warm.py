"""engine.runtime.warm: every kernel warmed, the compile cache's place and key (issue 29).

Warming is checked in a fresh interpreter: in this one, kernels compiled by
other tests would hide a kernel the warm round misses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.runtime import warm

ROOT = Path(__file__).resolve().parents[2]


def _fresh_python(code: str, env: dict | None = None, timeout: float = 600) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **(env or {})},
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_every_module_with_a_kernel_is_listed():
    """A new module with numba kernels must join engine.runtime.warm's list (and so be warmed and checked)."""
    found = set()
    for package in ("engine", "gateway"):
        for path in (ROOT / package).rglob("*.py"):
            if re.search(r"^@numba\.(njit|jit)", path.read_text(encoding="utf-8"), re.M):
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    assert found == set(warm.KERNEL_MODULES)


def test_a_warmed_engine_process_leaves_no_kernel_to_compile(tmp_path):
    """What a shard actor runs (warm_engine) reaches every kernel of the engine but the
    tests' own invariant checks; and it leaves nothing behind in the temp directory."""
    got = json.loads(_fresh_python(
        "import json; from engine.runtime import warm; r = warm.warm_engine(); "
        "print(json.dumps([warm.unwarmed(warm.ENGINE_KERNEL_MODULES), r.kernels]))",
        env={"TMPDIR": str(tmp_path)}))
    assert got[0] == sorted(warm.TEST_ONLY)
    assert got[1] >= 30
    assert list(tmp_path.iterdir()) == []  # the throwaway engine's directory is gone


def test_unwarmed_counts_a_kernel_only_its_callers_reach():
    """A kernel called only from kernels is warm once a caller is (compiled into it, or loaded with it)."""
    out = _fresh_python(
        "import json; from engine.runtime import warm; from engine.core import dedup; "
        "before = warm.unwarmed(['engine.core.dedup']); "
        "import numpy as np; t = dedup.DedupTable(10); t.remember('e1', 7); "
        "print(json.dumps([before, warm.unwarmed(['engine.core.dedup'])]))")
    before, after = json.loads(out)
    assert "engine.core.dedup._put" in before and "engine.core.dedup._find" in before
    assert "engine.core.dedup._put" not in after and "engine.core.dedup._find" not in after  # _find: only _put calls it


def test_cache_root_resolution():
    env = {warm.ENV_CACHE_ROOT: "/env/cache"}
    assert warm.resolve_cache_root("/explicit", "/data", env) == "/explicit"
    assert warm.resolve_cache_root(None, "/data", env) == "/env/cache"
    assert warm.resolve_cache_root(None, "/data", {}) == os.path.join("/data", ".numba-cache")
    assert warm.resolve_cache_root("rel", None, {}) == os.path.abspath("rel")
    assert warm.resolve_cache_root(None, None, {}) is None  # no data directory: numba's default place
    assert warm.cache_dir_for(None) is None


def test_cache_key_names_numba_python_machine_and_the_kernel_sources(monkeypatch, tmp_path):
    key = warm.cache_key()
    assert key == warm.cache_key()
    assert key.startswith("numba") and f"py{sys.version_info.major}{sys.version_info.minor}" in key
    assert warm.cache_dir_for("/r") == os.path.join("/r", key)
    # another kernel source (a change in engine.core.xxh3, which engine.core.dedup inlines): another folder
    monkeypatch.setattr(warm, "KERNEL_MODULES", warm.KERNEL_MODULES + ("engine.core.model",))
    assert warm.cache_key() != key
    monkeypatch.undo()
    # the same sources installed elsewhere: numba files kernels by source path, so another folder too
    real = warm.importlib.util.find_spec
    copy = tmp_path / "xxh3.py"
    copy.write_bytes(Path(real("engine.core.xxh3").origin).read_bytes())

    def elsewhere(name):
        spec = real(name)
        return type(spec)(spec.name, spec.loader, origin=str(copy)) if name == "engine.core.xxh3" else spec

    monkeypatch.setattr(warm.importlib.util, "find_spec", elsewhere)
    assert warm.cache_key() != key


def test_use_cache_dir_repoints_kernels_imported_before(tmp_path):
    """A Ray actor imports the kernel modules before its __init__ runs: pointing numba at the
    cache then must still send the next compile there."""
    out = _fresh_python(
        "import numpy as np, sys; from engine.core import partition; "
        f"from engine.runtime import warm; warm.use_cache_dir({str(tmp_path)!r}); "
        "print(partition.distinct(np.array([3, 1, 3], np.int32)))")
    assert out.strip()
    assert list(tmp_path.rglob("partition.distinct-*.nbi")), sorted(p.name for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("complete", [False, True])
def test_complete_mark(tmp_path, complete):
    d = str(tmp_path)
    assert not warm.cache_complete(d) and not warm.cache_complete(None)
    if complete:
        warm.mark_complete(d)
    assert warm.cache_complete(d) is complete


def test_a_warm_round_logs_nothing_and_leaves_other_logging_alone(caplog):
    """The throwaway engine's lines ("router recovered ...") must not read as the service's."""
    import asyncio
    import logging

    router_log = logging.getLogger("flowrank.router")

    async def round_that_logs():
        router_log.warning("from the warm round")
        await asyncio.to_thread(router_log.warning, "from a thread of the warm round")

    with caplog.at_level(logging.INFO):
        warm.run_round(round_that_logs())
        router_log.warning("from the service")
    assert [r.getMessage() for r in caplog.records if r.name == "flowrank.router"] == ["from the service"]


def test_a_mark_of_another_cpu_is_not_complete_here(tmp_path, monkeypatch):
    """numba keys cached code by CPU: a cache filled on another CPU compiles again here,
    so its processes must not all compile at once as if they only had to load."""
    warm.mark_complete(str(tmp_path))
    assert warm.cache_complete(str(tmp_path))
    monkeypatch.setattr(warm, "_cpu_name", lambda: "another-cpu")
    assert not warm.cache_complete(str(tmp_path))
