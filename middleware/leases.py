"""Long-running jobs: acknowledged on start, owned through a lease in the run store.

RabbitMQ closes the channel of a delivery left unacknowledged past its consumer timeout (30 minutes by
default) and redelivers it while the first worker still runs it. A ``long_running`` actor's message is
therefore acknowledged as soon as it starts, and the job is owned through a lease instead:

1. Before the actor runs, a lease is opened in the run store with the message in it, a watchdog
   message is scheduled (in RabbitMQ's delay queues) for when the lease would lapse, and the delivery
   is acknowledged (the consumer takes no further long-running delivery until a thread is free for it:
   ``pipelines.broker.rabbitmq.window``). A copy of the message whose lease is open, or ended, is skipped.
2. While the actor runs, a heartbeat thread renews the leases this process holds every third of a
   lease, and stops a job whose lease another holder took over. The actor may report progress and sees
   a cancel at its next report (``pipelines.progress``).
3. When the actor ends, the lease is closed, and kept as ended for the retention period, so that no
   redelivered or duplicated copy runs the job again; a failure is retried (a new attempt, with a lease
   of its own) or dead-lettered as usual.
4. The watchdog finds the lease renewed (and looks again when it would lapse next), closed (done), or
   lapsed: the worker died. It then takes the lease over (one watchdog wins) and, by the actor's
   ``on_lost`` policy, publishes the job again (``retry``, counted against ``max_retries``) or
   dead-letters it with the reason ``worker lost`` and fails its run (``fail``).

This middleware also tells ``report_progress`` which run step the current thread runs, for every
pipeline step.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from typing import Any, Protocol

import dramatiq
import orjson
from dramatiq.middleware import Middleware, SkipMessage

from pipelines import options as opt
from pipelines import progress
from pipelines.broker.common import PipelineBroker, pipeline_broker
from pipelines.dead_letters.reasons import DeadLetterReason, now_iso
from pipelines.errors import PipelinesError, ServiceUnavailable
from pipelines.flow.runtime import Runtime
from pipelines.handling.deferral import put_off_while_store_down
from pipelines.handling.outcome import outcome_of
from pipelines.handling.proxy import message_of
from pipelines.store.roles import JobLeases, StepProgress
from pipelines.wire import option_values as wire_options
from pipelines.wire.codec import decode_message, encode_message
from pipelines.wire.steps import StepAddress

logger = logging.getLogger(__name__)

#: The actor that checks a lease when it would lapse (declared with the first long-running actor).
WATCHDOG = "pipelines_lease_watchdog"
#: Dramatiq queue of the watchdog: served by every worker started without --queues.
WATCHDOG_QUEUE = "pipelines"
#: How long after a lease would lapse its watchdog looks, in ms.
WATCHDOG_MARGIN_MS = 1000


class LeaseStore(JobLeases, StepProgress, Protocol):
    """What long-running jobs need of the run store: their leases, and their steps' progress reports."""


class Leases(Middleware):
    """Owns long-running jobs through leases and watches them (see the module docstring)."""

    def __init__(
        self, *, runtime: Runtime, store: LeaseStore, default_max_retries: int, system_timeout_s: float
    ) -> None:
        self.runtime = runtime
        self.system_timeout_s = system_timeout_s
        self.store = store
        self.default_max_retries = default_max_retries
        self._held: dict[str, tuple[str, int, progress.Job]] = {}
        """lease id → (holder token, lease ms, job) of the leases this process holds."""
        self._lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        self._broker: PipelineBroker | None = None

    # -- declaration --------------------------------------------------------------------------------

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        if actor.options.get(opt.PROFILE) == "long_running" and WATCHDOG not in broker.actors:
            self._broker = pipeline_broker(broker)
            declare = dramatiq.actor(
                broker=broker,
                actor_name=WATCHDOG,
                queue_name=WATCHDOG_QUEUE,
                max_retries=20,
                timeout_s=self.system_timeout_s,
            )
            declare(self._watch)

    # -- processing ---------------------------------------------------------------------------------

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        address = StepAddress.of(message)
        actor = broker.get_actor(message.actor_name)
        if actor.options.get(opt.PROFILE) != "long_running":
            if address is not None:
                hold = outcome_of(message).scratch.step_hold
                job = (
                    progress.Job(self.store, address.run_id, address.node)
                    if hold is None
                    # lost when another worker claims the step: its progress report stops it
                    else progress.Job(self.store, address.run_id, address.node, lost=hold.lost)
                )
                self._enter(message, job)
            return
        lease_ms = int(float(actor.options[opt.LEASE]) * 1000)
        lease_id = lease_id_of(message)
        holder = uuid.uuid4().hex
        record = orjson.dumps({"message": encode_message(message_of(message)).decode()}).decode()
        try:
            opened = self.store.open_lease(lease_id, holder=holder, lease_ms=lease_ms, record=record)
        except ServiceUnavailable as e:
            put_off_while_store_down(broker, message, e)
            raise SkipMessage from None
        if opened == "open":
            # A copy of a job that runs (or whose worker died and whose watchdog owns it now).
            logger.info(
                "Skipping %s: lease %s is open, the job runs or its watchdog owns it.", message.message_id, lease_id
            )
            raise SkipMessage
        if opened == "ended":
            # A copy (redelivered or duplicated) of a job that ended: its outcome stands.
            logger.info("Skipping %s: its job ended already (lease %s).", message.message_id, lease_id)
            raise SkipMessage
        try:
            broker.enqueue(broker.get_actor(WATCHDOG).message(lease_id), delay=lease_ms + WATCHDOG_MARGIN_MS)
        except PipelinesError:
            # Without a watchdog nobody would notice this worker dying: keep the delivery unacknowledged.
            logger.exception("Could not schedule the watchdog of %s; running it unacknowledged.", lease_id)
            self.store.close_lease(lease_id)
            return
        job = progress.Job(self.store, address.run_id if address else None, address.node if address else None)
        job.lease_id = lease_id
        with self._lock:
            self._held[lease_id] = (holder, lease_ms, job)
            self._ensure_heartbeat()
        pipeline_broker(broker).acknowledge_early(message)
        self._enter(message, job)

    def _enter(self, message: dramatiq.broker.MessageProxy, job: progress.Job) -> None:
        outcome_of(message).scratch.job = job
        progress.enter(job)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._leave(message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.broker.MessageProxy) -> None:
        self._leave(message)

    def _leave(self, message: dramatiq.broker.MessageProxy) -> None:
        job = outcome_of(message).scratch.job
        if job is None:
            return
        progress.leave()
        if job.lease_id is None:
            return
        with self._lock:
            self._held.pop(job.lease_id, None)
        try:
            self.store.close_lease(job.lease_id)
        except ServiceUnavailable:
            # Its watchdog will find the lease lapsed and run the job again: at least once, as promised.
            logger.exception("Could not close lease %s; its watchdog will run the job again.", job.lease_id)

    # -- heartbeat ----------------------------------------------------------------------------------

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or not self._heartbeat.is_alive():
            self._heartbeat = threading.Thread(target=self._beat, name="pipelines-lease-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        while True:
            with self._lock:
                held = dict(self._held)
            interval_s = min((lease_ms for _, lease_ms, _ in held.values()), default=3000) / 3000
            if self._stop.wait(interval_s):
                return
            for lease_ms in {lease_ms for _, lease_ms, _ in held.values()}:
                holders = {i: holder for i, (holder, ms, _) in held.items() if ms == lease_ms}
                try:
                    lost = self.store.renew_leases(holders, lease_ms=lease_ms)
                except ServiceUnavailable:
                    logger.warning("Could not renew %d lease(s): the run store is down.", len(holders))
                    continue
                for lease_id in lost:
                    with self._lock:
                        still_held = self._held.get(lease_id) == held[lease_id]
                    if still_held:  # not ended meanwhile: another holder has it
                        logger.error(
                            "Lease %s was taken over: the job runs again elsewhere; stopping it here.", lease_id
                        )
                        held[lease_id][2].lost.set()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()

    # -- the watchdog -------------------------------------------------------------------------------

    def _watch(self, lease_id: str) -> None:
        """Look at a lease when it would lapse: wait on, or recover the job of a dead worker."""
        broker = self._broker
        assert broker is not None, "declared by after_declare_actor, which keeps the broker"
        check = self.store.take_expired_lease(lease_id)
        if check.kind == "gone":
            return
        if check.kind == "alive":
            broker.enqueue(broker.get_actor(WATCHDOG).message(lease_id), delay=check.wait_ms + WATCHDOG_MARGIN_MS)
            return
        message = decode_message(orjson.loads(check.record or "{}")["message"].encode())
        self.recover(broker, message)

    def recover(self, broker: PipelineBroker, message: dramatiq.Message[Any]) -> None:
        """The job's worker died: run it again, or dead-letter it and fail its run, by ``on_lost``."""
        actor = broker.get_actor(message.actor_name)
        retries = wire_options.retries(message.options)
        max_retries = int(
            message.options.get(opt.MAX_RETRIES, actor.options.get(opt.MAX_RETRIES, self.default_max_retries))
        )
        if actor.options.get(opt.ON_LOST) == "retry" and retries < max_retries:
            logger.warning("The worker of %s died; running it again (retry %d).", message.message_id, retries + 1)
            broker.enqueue(message.copy(options={opt.RETRIES: retries + 1, opt.TRACEBACK: "worker lost"}))
            return
        address = StepAddress.of(message)
        why = "its worker died" + (f" {retries + 1} times" if retries else "")
        logger.error("Dead-lettering %s of %s: %s.", message.message_id, message.actor_name, why)
        reason = DeadLetterReason(
            reason="worker lost",
            error_type="WorkerLost",
            error=f"The job stopped renewing its lease: {why}.",
            attempts=retries + 1,
            actor=message.actor_name,
            run_id=address.run_id if address else None,
            step=address.node if address else None,
            at=now_iso(),
        )
        home = broker.topology.actor_queues[message.actor_name]
        body = encode_message(message)
        broker.dead_letter(body, message_id=message.message_id, reason=reason, queue=home)
        if address is not None:
            self.runtime.fail(dramatiq.broker.MessageProxy(message), address, WorkerLost(reason.error), final=True)


def lease_id_of(message: dramatiq.broker.MessageProxy) -> str:
    """The lease of one attempt of a job: its message id and retry number, and which replay it is (a
    replayed dead letter keeps its message id and starts its retries again, but is a new job)."""
    lease_id = f"{message.message_id}:{message.options.get(opt.RETRIES, 0)}"
    replayed = message.options.get(opt.REPLAYED_FROM)
    if replayed is not None:
        lease_id += ":" + hashlib.sha256(str(replayed).encode()).hexdigest()[:16]
    return lease_id


class WorkerLost(PipelinesError):
    """A long-running job's worker stopped renewing its lease (it died, or lost the store)."""
