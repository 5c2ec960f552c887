"""A node's role on a shared log (docs/api.md §19): the shell around :class:`engine.log.pg_lease.Lease`.

At start a node of a ``--log postgresql://…`` takes the lease (the epoch its appends carry) or
refuses to start as active while another node holds it. While active it renews the lease every
second; when the lease turns out to be another's (a takeover after this node was paused or cut
off) it fences its log at once: every append from then on is ``503 NOT_LEADER`` naming the
active node, ``/readyz`` answers 503, and ``GET /v1/cluster`` says ``standby``. A node on the
file log is always the active one of its own log (``Leadership.single``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engine.core.errors import NotLeader

log = logging.getLogger("flowrank.cluster")

#: how long past ``lease_s`` a starting node keeps trying to take the lease before it refuses to start
ACQUIRE_GRACE_S = 2.0


@dataclass
class NodeIdentity:
    """``--node``, ``--advertise-url``, ``--lease-s`` of ``flowrank serve``."""

    node: str | None = None  # None: <hostname>:<port>
    advertise_url: str | None = None  # None: http://<host>:<port>
    lease_s: float = 3.0


async def _logged(coro) -> None:
    try:
        await coro
    except Exception:
        log.exception("stepping down failed: restart this node")


class Leadership:
    """Role, epoch and leader of one node; ``lease`` None: a file log (always active)."""

    def __init__(self, node: str, advertise_url: str | None, lease=None, event_log=None):
        self.node = node
        self.advertise_url = advertise_url
        self.lease = lease
        self.event_log = event_log
        self.role = "active"
        self.epoch = lease.epoch if lease is not None else 0
        self.leader = advertise_url
        self.lost_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._step_down: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def single(cls, advertise_url: str | None = None) -> "Leadership":
        return cls(socket.gethostname(), advertise_url)

    @classmethod
    def acquire(cls, log_url: str, identity: NodeIdentity) -> "Leadership":
        """Take the lease of ``log_url`` for this node (waiting up to ``lease_s`` + ACQUIRE_GRACE_S for a
        dead holder's lease to expire), or raise :class:`NotLeader` naming the live holder."""
        from engine.log.pg_lease import Lease  # noqa: PLC0415 - psycopg only for a database log

        node = identity.node or socket.gethostname()
        lease = Lease(log_url, node, identity.advertise_url or "", lease_s=identity.lease_s)
        # a node that died holding the lease (kill -9, a lost machine) lets it expire within lease_s: wait
        # that long (and a little) before refusing
        deadline = time.monotonic() + identity.lease_s + ACQUIRE_GRACE_S
        while (epoch := lease.try_acquire()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if epoch is None:
            holder = lease.holder()
            lease.release()
            raise NotLeader(f"node {holder.node!r} ({holder.url or 'no URL'}) holds the log's lease (renewed "
                            f"{holder.age_s or 0:.1f} s ago, lease {identity.lease_s:g} s): start this node once "
                            "it has stopped, or with --standby", leader=holder.url or None)
        return cls(node, identity.advertise_url, lease)

    @classmethod
    def follower(cls, log_url: str, identity: NodeIdentity) -> "Leadership":
        """A standby's (``--standby``): the lease is read, not taken, until :meth:`try_take_over`."""
        from engine.log.pg_lease import Lease  # noqa: PLC0415

        node = identity.node or socket.gethostname()
        lease = Lease(log_url, node, identity.advertise_url or "", lease_s=identity.lease_s)
        me = cls(node, identity.advertise_url, lease)
        me.role, me.epoch = "standby", lease.holder().epoch
        me._note_holder()
        return me

    def _note_holder(self) -> None:
        holder = self.lease.holder()
        self.epoch = max(self.epoch, holder.epoch)
        self.leader = holder.url or None if holder.node is not None and holder.age_s is not None else None

    def try_take_over(self) -> int | None:
        """A standby's turn: the lease when the active has not renewed it for ``lease_s`` (the new epoch),
        else None (and the active node's URL noted for X-FlowRank-Leader)."""
        epoch = self.lease.try_acquire()
        if epoch is None:
            self._note_holder()
            return None
        self.role, self.epoch, self.leader = "active", epoch, self.advertise_url
        return epoch

    def start(self, event_log, step_down: Callable[[], Awaitable[None]] | None = None) -> None:
        """Renew the lease from now on (called on the event loop); when it is lost, fence ``event_log`` at
        once (on the renewal thread) and run ``step_down()`` on the loop."""
        self.event_log = event_log
        self.role = "active"
        self._step_down = step_down
        self._loop = asyncio.get_running_loop() if step_down is not None else None
        if self.lease is not None:
            self.lease.start_renewing(self._lost)

    def _lost(self, holder) -> None:
        self.role, self.epoch, self.lost_at = "standby", max(self.epoch, holder.epoch), time.time()
        self.leader = holder.url or None  # (unknown while the database is out of reach: the standby loop learns it)
        log.warning("lease lost: node %s holds the log at epoch %s; this node takes no more writes",
                    holder.node, holder.epoch)
        if self.event_log is not None:
            self.event_log.fence(f"node {holder.node!r} took the log over (epoch {holder.epoch}); this node is a "
                                 "standby now", leader=self.leader)
        if self._loop is not None and self._step_down is not None:
            step_down = self._step_down
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(_logged(step_down())))

    @property
    def active(self) -> bool:
        return self.role == "active" and not getattr(self.event_log, "fenced", False)


    def info(self, log_end: int, applied: int, lag_s: float | None = None) -> dict:
        """The body of ``GET /v1/cluster``."""
        if not self.active:
            self.role = "standby"
        behind = max(0, log_end - applied)
        return {"role": self.role, "node": self.node, "epoch": self.epoch, "leader": self.leader,
                "log_end": log_end, "applied": applied, "lag_records": behind,
                "lag_s": 0.0 if behind == 0 else lag_s, "takeovers": self.lease.takeovers if self.lease else 0}

    def release(self) -> None:
        if self.lease is not None:
            self.lease.release()
