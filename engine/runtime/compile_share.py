"""Compile a cold cache in parallel: the recorded kernel signatures, shared out (issue 29).

On a fresh install every kernel must be compiled once, about 60 signatures,
most of a cold start. A warm round (:mod:`engine.runtime.warm`) finds them by
running a throwaway engine, one call after another, so it can only compile on
one core. This module compiles them from a list recorded ahead of time
(:mod:`engine.runtime.kernel_signatures`, written by ``python -m
gateway.record_signatures``; tests/gateway/test_warm.py checks it against
what a warm round compiles), in every process that starts at once (the
gateway, the shard actors), each taking the next signature not yet taken:

- :func:`compile_claimed` walks the list, most expensive first, and compiles
  each signature whose claim file it creates first (``O_EXCL`` in a folder of
  this start, beside the cache: every process of the start sees it);
- :func:`wait_claimed` waits until every claimed signature is done, so the
  warm round that follows in each process only loads from the cache.

A signature numba no longer produces (a kernel changed since the list was
recorded) costs a compile nobody uses; one missing from the list is compiled
by the warm round, in every process that reaches it: both only cost time. The
list is types as text (:func:`encode`): integers, booleans, none and arrays of
them, which is all the kernels take.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time

log = logging.getLogger("flowrank.warm")

#: A claim folder older than this is a start that died: removed by the next one.
STALE_CLAIMS_S = 3600.0

_ARRAY = re.compile(r"^(ro )?([a-z0-9_]+)\[(\d)d,([CFA])\]$")


# ------------------------------------------------------------------ types as text


def encode(t) -> str:
    """A numba type as text: ``int64``, ``bool``, ``none``, ``int64[1d,C]``, ``ro uint8[1d,C]``
    (``ro``: a read-only array, as ``np.frombuffer`` gives). Raises TypeError for any other type."""
    from numba.core import types  # noqa: PLC0415

    if isinstance(t, types.Array):
        if not isinstance(t.dtype, (types.Integer, types.Boolean)) or not t.aligned:
            raise TypeError(f"no text form for {t}")
        return f"{'' if t.mutable else 'ro '}{t.dtype}[{t.ndim}d,{t.layout}]"
    if isinstance(t, (types.Integer, types.Boolean, types.NoneType)):
        return str(t)
    raise TypeError(f"no text form for {t}")


def decode(text: str):
    from numba.core import types  # noqa: PLC0415

    m = _ARRAY.match(text)
    if m:
        return types.Array(_scalar(m.group(2)), int(m.group(3)), m.group(4), readonly=bool(m.group(1)))
    return _scalar(text)


def _scalar(name: str):
    from numba.core import types  # noqa: PLC0415

    if name == "bool":
        return types.boolean
    if name == "none":
        return types.none
    t = getattr(types, name, None)
    if not isinstance(t, types.Integer):
        raise ValueError(f"not a kernel argument type: {name!r}")
    return t


# ------------------------------------------------------------------ the recorded list


def recorded() -> list[tuple[str, tuple[str, ...], float]]:
    """The recorded signatures: (kernel, argument types, compile seconds when recorded),
    most expensive first; an empty list if the module cannot be read."""
    try:
        from engine.runtime.kernel_signatures import SIGNATURES  # noqa: PLC0415
    except Exception:  # pragma: no cover - a broken install: the warm round compiles instead
        log.exception("the recorded kernel signatures cannot be read; kernels compile one at a time")
        return []
    return sorted(SIGNATURES, key=lambda s: (-s[2], s[0], s[1]))


def compile_one(kernel: str, args: tuple[str, ...]) -> None:
    """Compile (or load from the cache) one recorded signature of ``kernel`` (``module.name``)."""
    import importlib  # noqa: PLC0415

    module, _, name = kernel.rpartition(".")
    d = getattr(importlib.import_module(module), name)
    d.compile(tuple(decode(a) for a in args))


def compile_claimed(claims: str, items: list | None = None) -> int:
    """Compile every signature of ``items`` (default :func:`recorded`) whose claim this process
    takes first in the folder ``claims`` (created if missing); the number compiled here. A
    signature that fails to compile is logged and marked done (the warm round tries it again)."""
    items = recorded() if items is None else items
    try:
        os.makedirs(claims, exist_ok=True)
    except OSError:  # a read-only cache: no sharing; each process's warm round compiles what it needs
        log.warning("cannot share the compile through %s; each process compiles on its own", claims, exc_info=True)
        return 0
    mine = 0
    for i, (kernel, args, _cost) in enumerate(items):
        try:
            fd = os.open(os.path.join(claims, f"{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        try:
            compile_one(kernel, args)
            mine += 1
        except Exception:
            log.warning("compiling %s%s failed; the warm round compiles it", kernel, args, exc_info=True)
        finally:
            open(os.path.join(claims, f"{i}.done"), "wb").close()
    return mine


def wait_claimed(claims: str, n: int, timeout_s: float = 600.0, poll_s: float = 0.05) -> bool:
    """Until every one of ``n`` signatures claimed in ``claims`` is done (a process that died with a
    claim: until ``timeout_s``); False on the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            names = set(os.listdir(claims))
        except OSError:
            return True  # another process cleaned up (everything was done), or no folder could be made
        if all(f"{i}.done" in names or f"{i}" not in names for i in range(n)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def share(claims: str) -> int:
    """This process's part of a parallel cold compile: claim and compile, then wait for the
    others' claims; the number compiled here."""
    items = recorded()
    mine = compile_claimed(claims, items)
    if not wait_claimed(claims, len(items)):
        log.warning("a process sharing the compile in %s stopped before its part was done", claims)
    return mine


def claims_dir(cache_dir: str, start: str) -> str:
    """The claim folder of one start (``start``: an id every process of the start is given)."""
    return os.path.join(cache_dir, ".claims", start)


def remove_claims(cache_dir: str | None, stale_only: bool = False, now: float | None = None) -> None:
    """Remove the claim folders under ``cache_dir``: every one (the start that made them is
    warm), or with ``stale_only`` those older than :data:`STALE_CLAIMS_S` (starts that died)."""
    if cache_dir is None:
        return
    root = os.path.join(cache_dir, ".claims")
    now = time.time() if now is None else now
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if stale_only and now - os.path.getmtime(path) <= STALE_CLAIMS_S:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
