"""Waiting for replicas: Redis's ``WAIT`` after the writes a primary's loss must not take back.

Redis replicates asynchronously: a primary acknowledges a write before its replicas have it, and a
replica promoted after the primary's loss lacks what the primary had not yet sent. ``WAIT n ms`` on the
connection that wrote blocks until ``n`` replicas acknowledge that connection's writes, or ``ms``
pass; it must go on that same connection, in the same round trip as the write. It narrows the window,
it does not close it: a write acknowledged by too few replicas in time still stands on the primary
(Redis cannot take it back), so it is reported, not failed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pipelines.config.masking import mask_url

logger = logging.getLogger("pipelines.store")

#: Seconds between two warnings of writes too few replicas acknowledged (each warning counts them all).
WARN_EVERY_S = 10.0


@dataclass
class ReplicaWait:
    """``WAIT replicas timeout_ms`` after the store's durable writes on ``url``; writes acknowledged by
    fewer replicas are counted (:attr:`short`) and warned about, at most once per :data:`WARN_EVERY_S`."""

    replicas: int
    timeout_ms: int
    url: str
    short: int = 0
    _unwarned: int = 0
    _warned_at: float = field(default=-WARN_EVERY_S)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def command(self) -> tuple[str, int, int]:
        return ("WAIT", self.replicas, self.timeout_ms)

    def acknowledged(self, replicas: object, writes: int = 1) -> None:
        """Record ``WAIT``'s reply (how many replicas acknowledged) for ``writes`` writes; anything but
        an integer (an error reply, no reply) counts as none."""
        if isinstance(replicas, int) and replicas >= self.replicas:
            return
        self.unconfirmed(writes, acknowledged=replicas if isinstance(replicas, int) else 0)

    def unconfirmed(self, writes: int, *, acknowledged: int = 0) -> None:
        """Count ``writes`` that stand on the primary without the replicas asked for."""
        now = time.monotonic()
        with self._lock:
            self.short += writes
            self._unwarned += writes
            if now - self._warned_at < WARN_EVERY_S:
                return
            self._warned_at, count, self._unwarned = now, self._unwarned, 0
        logger.warning(
            "Redis at %s: %d write(s) of runs were acknowledged by %d of the %d replica(s) store.wait_for_replicas "
            "asks for within %d ms; they stand on the primary and are lost if it fails before its replicas catch "
            "up. Check the replicas' link (INFO replication), or raise store.replica_wait_ms.",
            mask_url(self.url),
            count,
            acknowledged,
            self.replicas,
            self.timeout_ms,
        )
