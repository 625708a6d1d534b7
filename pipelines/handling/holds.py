"""What a worker process holds while it runs messages, kept alive by one heartbeat.

A step a worker claims is held by a short lease in the run store (``store.step_lease_s``), and so is an
idempotency key it claims. While the process lives, one heartbeat thread renews every lease it holds
each quarter of a lease, all in one round trip (``Holds.renew_holds`` of the store), so a step runs as
long as its time limit allows. When the process dies, its leases lapse within one lease, and a copy of
the message (RabbitMQ redelivers it at once) claims the step or the key again.

A renewal that finds a step claimed again since (its lease had lapsed while this process was frozen or
cut off from the store) marks the hold lost: another worker runs the step now. Its attempt here can no
longer complete or fail the step (the store refuses it: ``ClaimLost``), and its actor sees a cancel at
its next progress report.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pipelines.errors import ServiceUnavailable
from pipelines.store.roles import Holds as HoldRenewals

logger = logging.getLogger(__name__)

#: Renewals per lease: a lease survives a store that does not answer for three quarters of it.
RENEWALS_PER_LEASE = 4


@dataclass(eq=False)
class Hold:
    """One lease this process holds: a step's (run, step id and the claim it runs under) or a key's."""

    step: tuple[str, str] | None
    claim: int
    key: str | None
    holder: str
    lease_end: float
    """When (``time.monotonic()``, s) the lease lapses unless it is renewed again."""
    lost: threading.Event = field(default_factory=threading.Event)
    """Set when a renewal found the lease taken over: another worker runs the step (or holds the key)."""


class Holds:
    """The leases one worker process holds, renewed together by one heartbeat thread."""

    def __init__(self, *, store: HoldRenewals, lease_s: float) -> None:
        self.store = store
        self.lease_s = lease_s
        self.interval_s = lease_s / RENEWALS_PER_LEASE
        self.renewals = 0
        """Renewals made so far (each one round trip, whatever it renewed)."""
        self._held: set[Hold] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def step(self, run_id: str, node: str, claim: int) -> Hold:
        """Hold step ``node`` of ``run_id``, claimed as ``claim``, until :meth:`release`."""
        return self._hold(Hold((run_id, node), claim, None, "", time.monotonic() + self.lease_s))

    def key(self, key: str, holder: str) -> Hold:
        """Hold idempotency key ``key``, claimed by ``holder``, until :meth:`release`."""
        return self._hold(Hold(None, 0, key, holder, time.monotonic() + self.lease_s))

    def release(self, hold: Hold) -> None:
        """Stop renewing ``hold`` (its step or key ended here)."""
        with self._changed:
            self._held.discard(hold)

    def _hold(self, hold: Hold) -> Hold:
        with self._changed:
            self._held.add(hold)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="pipelines-holds-heartbeat", daemon=True)
                self._thread.start()
            self._changed.notify()
        return hold

    def _beat(self) -> None:
        while True:
            with self._changed:
                while not self._held:  # idle until something is held (nothing to renew, no round trips)
                    self._changed.wait()
            time.sleep(self.interval_s)
            self.renew()

    def renew(self) -> None:
        """Renew every lease held now, in one round trip (what the heartbeat does each turn)."""
        with self._changed:
            held = list(self._held)
        steps = {hold.step: hold.claim for hold in held if hold.step is not None}
        keys = {hold.key: hold.holder for hold in held if hold.key is not None}
        if not steps and not keys:
            return
        started = time.monotonic()
        try:
            renewal = self.store.renew_holds(steps, keys, lease_ms=int(self.lease_s * 1000))
        except ServiceUnavailable as e:
            logger.warning("Could not renew %d lease(s): %s", len(held), e)
            return
        self.renewals += 1
        lost = set(renewal.lost_steps) | set(renewal.lost_keys)
        for hold in held:
            name = hold.step if hold.step is not None else hold.key
            if name in lost:
                if not hold.lost.is_set():
                    logger.error(
                        "Lost the lease of %s: it lapsed here (this process stood still or could not reach the store) "
                        "and another worker may hold it now.",
                        _text(hold),
                    )
                hold.lost.set()
            elif hold.step not in renewal.ended_steps:
                hold.lease_end = started + self.lease_s


def _text(hold: Hold) -> str:
    if hold.step is not None:
        return f"step {hold.step[1]} of run {hold.step[0]}"
    return f"idempotency key {hold.key!r}"
