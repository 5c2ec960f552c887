"""engine.runtime.compile_share: a cold cache's compile shared out among processes (issue 29)."""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core import types

from engine.runtime import compile_share as C
from engine.runtime import warm

ROOT = Path(__file__).resolve().parents[2]

#: cheap signatures of small kernels (each compiles or loads in well under a second)
CHEAP = [
    ("engine.core.partition.distinct", ("int32[1d,C]",), 0.5),
    ("engine.core.journal.zero_ranges", None, 0.4),
    ("engine.core.journal.copy_ranges", None, 0.3),
]


def _cheap() -> list:
    """CHEAP with each kernel's recorded argument types."""
    by_kernel = {k: a for k, a, _ in C.recorded()}
    return [(k, a if a is not None else by_kernel[k], c) for k, a, c in CHEAP]


def test_types_round_trip_as_text():
    for kernel, args, cost in C.recorded():
        assert tuple(C.encode(C.decode(a)) for a in args) == args, kernel
        assert cost >= 0
    assert C.decode("ro uint8[1d,C]") == types.Array(types.uint8, 1, "C", readonly=True)
    assert C.decode("int64[2d,C]") == types.Array(types.int64, 2, "C")
    assert C.decode("bool") == types.boolean and C.decode("none") == types.none and C.decode("uint32") == types.uint32
    with pytest.raises(TypeError):
        C.encode(types.Array(types.float64, 1, "C"))  # no floats in any kernel: a new kind needs a text form
    with pytest.raises(TypeError):
        C.encode(types.unicode_type)
    with pytest.raises(ValueError):
        C.decode("float64")


def test_the_recorded_list_names_live_kernels_with_their_arity():
    """A renamed kernel or a changed argument list must be recorded again (python -m gateway.record_signatures);
    tests/gateway/test_warm.py checks the other direction: every signature a warm round compiles is recorded."""
    found = warm.dispatchers()
    for kernel, args, _ in C.recorded():
        assert kernel in found, f"{kernel}: recorded but gone; record the list again"
        d = found[kernel]
        assert not warm.inlined(d)
        assert len(args) == len(inspect.signature(d.py_func).parameters), kernel
    costs = [c for _, _, c in C.recorded()]
    assert costs == sorted(costs, reverse=True)  # most expensive first: the longest compile starts first


def test_claims_skip_what_another_process_took_and_mark_everything_done(tmp_path, caplog):
    items = _cheap() + [("engine.core.partition.no_such_kernel", ("int64",), 0.1)]
    claims = str(tmp_path / "claims")
    os.makedirs(claims)
    open(os.path.join(claims, "1"), "wb").close()  # another process holds item 1
    with caplog.at_level(logging.WARNING, logger="flowrank.warm"):
        mine = C.compile_claimed(claims, items)
    assert mine == 2  # items 0 and 2; item 3 failed (logged, marked done: the warm round tries again)
    assert "no_such_kernel" in caplog.text
    names = set(os.listdir(claims))
    assert {"0.done", "2.done", "3.done"} <= names and "1.done" not in names
    assert not C.wait_claimed(claims, len(items), timeout_s=0.2)  # item 1 is still compiling elsewhere
    open(os.path.join(claims, "1.done"), "wb").close()
    assert C.wait_claimed(claims, len(items), timeout_s=0.2)


def test_two_processes_compile_each_signature_once(tmp_path):
    """The claims are taken with O_EXCL: two processes that share a list split it, nothing twice."""
    items = _cheap()
    claims = str(tmp_path / "claims")
    code = ("import json, sys; from engine.runtime import compile_share as C; "
            "items = [(k, tuple(a), c) for k, a, c in json.loads(sys.argv[1])]; "
            "n = C.compile_claimed(sys.argv[2], items); assert C.wait_claimed(sys.argv[2], len(items), 120); print(n)")
    procs = [subprocess.Popen([sys.executable, "-c", code, json.dumps(items), claims], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    counts = [int(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(counts) == len(items)
    assert sorted(os.listdir(claims)) == sorted([str(i) for i in range(len(items))] +
                                                [f"{i}.done" for i in range(len(items))])


def test_claim_folders_are_removed_when_warm_and_stale_ones_at_the_next_start(tmp_path):
    cache = str(tmp_path)
    old, new = C.claims_dir(cache, "old"), C.claims_dir(cache, "new")
    for d in (old, new):
        os.makedirs(d)
    os.utime(old, (1_000.0, 1_000.0))
    C.remove_claims(cache, stale_only=True, now=1_000.0 + C.STALE_CLAIMS_S + 1)
    assert not os.path.exists(old) and os.path.exists(new)  # a start that died an hour ago; one under way
    C.remove_claims(cache)
    assert os.listdir(os.path.join(cache, ".claims")) == []
    C.remove_claims(None)  # numba's default place: nothing to do


def test_start_claims_only_for_a_cold_cache(tmp_path):
    cache = str(tmp_path)
    claims = warm.start_claims(cache)
    assert claims is not None and claims.startswith(os.path.join(cache, ".claims"))
    assert warm.start_claims(cache) != claims  # one folder per start
    os.makedirs(claims)
    warm.mark_complete(cache)
    assert warm.start_claims(cache) is None and warm.start_claims(None) is None
    assert not os.path.exists(claims)  # marking the cache complete removed the start's claims


def test_an_unwritable_cache_shares_nothing_and_raises_nothing(tmp_path, caplog):
    """A read-only image's cache: no claim folder can be made; the warm round then compiles alone."""
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    claims = str(blocker / "claims")  # under a file: makedirs fails
    with caplog.at_level(logging.WARNING, logger="flowrank.warm"):
        assert C.share(claims) == 0
    assert "cannot share the compile" in caplog.text
