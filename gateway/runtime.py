"""SEAM: how ``flowrank serve`` builds its engine.

``build_engine(settings)`` is the one place that picks the EngineClient
implementation. Today it opens the in-process ``engine.service.LocalService``;
it will switch to the Ray-backed ``engine.cluster`` client (honouring
``settings.ray_address``) once that exists. Imports are lazy so the gateway
imports without Ray or the engine service installed.
"""

from __future__ import annotations

import os
import signal

from engine.client import EngineClient

from gateway.settings import Settings


async def build_engine(settings: Settings) -> EngineClient:
    """Open the engine for ``settings``; the caller must ``await engine.close()``.

    Restores the process's SIGTERM/SIGINT handlers afterwards (``ray.init``
    installs its own, which would defeat uvicorn's graceful shutdown).
    """
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        from engine.service import LocalService  # noqa: PLC0415  (lazy: the seam)

        engine = await LocalService.open(
            data_dir=settings.data_dir,
            default_shards=settings.shards or os.cpu_count() or 1,
            dedup_retention=settings.dedup_retention,
            delta_retention=settings.delta_retention,
        )
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    return engine
