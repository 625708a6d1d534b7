"""The outbox relay: each worker process publishes the runs started in callers' transactions once they commit.

With the PostgreSQL run store, ``app.start(..., connection=conn)`` leaves a run's first messages in the
store's outbox, in the caller's transaction. A thread of each worker process hears each commit (a
notification the commit sends), publishes the committed entries with confirms and deletes them; every
``OUTBOX_SWEEP_S`` it also looks without being told (a commit while no worker listened, entries a killed
relay left). A start is published at least once; its steps' claims run it once.
"""

from __future__ import annotations

import logging
import threading
import time

import dramatiq
from dramatiq.middleware import Middleware

from pipelines.broker.common import pipeline_broker
from pipelines.errors import PipelinesError
from pipelines.flow.outbox import publish_entries
from pipelines.store.roles.transactions import OutboxRelaying, OutboxWakeups

logger = logging.getLogger(__name__)

#: Seconds between two looks at the outbox when no commit was heard.
OUTBOX_SWEEP_S = 2.0
#: Seconds before a relay that could not reach the store or the broker tries again.
OUTBOX_RETRY_S = 1.0
#: Longest a relay waits before it looks whether its worker is stopping, in seconds.
STOP_CHECK_S = 0.2


class OutboxRelay(Middleware):
    """Publishes the outbox's committed entries from a thread of each worker process (see the module docstring)."""

    #: Background work: its failures are logged and retried, never stop a message.
    fails_open = True

    def __init__(self, *, store: OutboxRelaying, sweep_s: float = OUTBOX_SWEEP_S) -> None:
        self.store = store
        self.sweep_s = sweep_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._relay, args=(broker,), name="pipelines-outbox-relay", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.sweep_s + 1)

    def relay_once(self, broker: dramatiq.Broker) -> int:
        """Publish what the outbox holds now, batch after batch; how many entries were published."""
        relayed = 0
        while True:
            count = self.store.relay_outbox(lambda entries: publish_entries(pipeline_broker(broker), entries))
            relayed += count
            if count == 0 or self._stop.is_set():
                return relayed

    def _relay(self, broker: dramatiq.Broker) -> None:
        wakeups: OutboxWakeups | None = None
        while not self._stop.is_set():
            try:
                if wakeups is None:
                    wakeups = self.store.outbox_wakeups()  # before relaying: no commit between the two is missed
                self.relay_once(broker)
                self._await_commit(wakeups)
            except Exception as e:
                if isinstance(e, PipelinesError):  # the store or the broker is down: said in one line
                    logger.warning("The outbox relay could not publish yet (%s); trying again.", e)
                else:
                    logger.exception("The outbox relay failed; trying again.")
                _close(wakeups)
                wakeups = None
                self._stop.wait(OUTBOX_RETRY_S)
        _close(wakeups)

    def _await_commit(self, wakeups: OutboxWakeups) -> None:
        """Until a commit is heard or a sweep is due, in short waits, so a shutdown stops the relay at once."""
        due = time.monotonic() + self.sweep_s
        while not self._stop.is_set() and (left := due - time.monotonic()) > 0:
            if wakeups.wait(min(left, STOP_CHECK_S)):
                return


def _close(wakeups: OutboxWakeups | None) -> None:
    """Close a subscription (a new one is made at the next try)."""
    if wakeups is not None:
        try:
            wakeups.close()
        except Exception as e:
            logger.debug("Closing the outbox subscription failed: %s", e)
