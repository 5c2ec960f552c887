"""Adaptive batching by event-loop turn: one message per destination per round.

Calls made in one event-loop turn go out together, one message per
destination. While ``max_rounds`` rounds are in flight new calls wait, and
then all go in the next round: no added latency when idle, bigger messages
under load. Used by the router's shard reads (:class:`engine.router.reads.TurnBatcher`:
a destination is a shard actor) and by a gateway's calls to its engine host
(:class:`engine.runtime.remote.RemoteEngine`: one destination).

A round starts every destination's message in one synchronous step (``send``
is called for each before any of them is awaited), so what one round asks of
several shard actors is one cut: no batch dispatch can fall between them.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

T = TypeVar("T")


class RoundBatcher(Generic[T]):
    """``send(destination, [(item, future), ...])`` starts one message now and
    returns an awaitable that settles every future of it (an error included)."""

    def __init__(self, send: Callable[[Hashable, list[tuple[T, asyncio.Future]]], Awaitable[None]],
                 max_rounds: int = 2):
        self.send = send
        self.max_rounds = max_rounds
        self.pending: dict[Hashable, list[tuple[T, asyncio.Future]]] = {}
        self.scheduled = False
        self.rounds = 0  # rounds in flight
        self.messages = 0  # messages sent

    def submit(self, destination: Hashable, item: T) -> asyncio.Future:
        """Queue ``item`` for ``destination``; its future answers it."""
        fut = asyncio.get_running_loop().create_future()
        self.pending.setdefault(destination, []).append((item, fut))
        self._schedule()
        return fut

    def _schedule(self) -> None:
        if not self.scheduled and self.pending and self.rounds < self.max_rounds:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send everything pending now, as one round."""
        self.scheduled = False
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        self.rounds += 1
        self.messages += len(pending)
        waits = [self.send(dest, items) for dest, items in pending.items()]  # all started in this step
        asyncio.ensure_future(self._round(waits))

    async def _round(self, waits: list) -> None:
        try:
            await asyncio.gather(*waits)
        finally:
            self.rounds -= 1
            self._schedule()
