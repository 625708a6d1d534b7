"""Run store on Redis: one Lua script per operation, so every decision is atomic and costs one round trip.

Keys (all under ``<namespace>:run:<id>``, all with the retention TTL): the run hash, ``:steps``
(step id → JSON state), ``:starts``/``:entries`` (where steps start: the first steps and each chain
continuation), ``:inputs`` (what the steps that started there receive), ``:results`` (results of
steps that feed a chain), ``:bar:<id>`` (one hash per parallel node: member index → result) and
``:logs`` (step id → its attempts' log records, :mod:`~pipelines.store.step_history`). State
changes are published on the run key's channel, which is how ``wait`` blocks without polling. Each
script's reply is decoded by its function in :mod:`pipelines.store.replies`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

import orjson
import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from pipelines.config.redis_urls import is_cluster_url, is_sentinel_url
from pipelines.store import replies
from pipelines.store.base import (
    Advance,
    Claim,
    DeadlineCheck,
    LocalOffer,
    NewRun,
    Renewal,
    ReopenKind,
    StallCheck,
)
from pipelines.store.redis_cluster import cluster_client
from pipelines.store.redis_reads import RedisRunReads
from pipelines.store.redis_sentinel import sentinel_primary
from pipelines.store.replica_wait import ReplicaWait
from pipelines.store.scripting import Scripts
from pipelines.store.stall_checks import LAPSE_MARGIN_MS, RunStalls
from pipelines.store.step_history import AttemptLog
from pipelines.store.thread_clients import ThreadClients
from pipelines.wire.naming import (
    local_steps_key,
    run_id_for_key,
)
from pipelines.wire.steps import ROOT, Frame, frames_json

#: Seconds to wait for Redis to answer before reporting it unavailable.
SOCKET_TIMEOUT_S = 5.0


def _plain_client(url: str, **options: Any) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        health_check_interval=30,
        **options,
    )


class RedisRunStore(RedisRunReads):
    """Every role of :class:`~pipelines.store.roles.RunStore`, on Redis.

        ``client`` is a client built already (the embedded mode's in-process server); ``url`` then only
        names it in errors. A step keeps its newest log records, ``step_log_records`` and ``step_log_bytes``
    at most over its attempts. With ``wait_for_replicas``, run creation, a step's completion or failure, a run's
        end and an idempotency key recorded done wait up to ``replica_wait_ms`` for that many replicas
        (:mod:`~pipelines.store.replica_wait`).
    """

    def __init__(
        self,
        *,
        url: str,
        namespace: str,
        retention_s: int,
        client: redis.Redis | RedisCluster | None = None,
        wait_for_replicas: int = 0,
        replica_wait_ms: int = 100,
        step_log_records: int = 200,
        step_log_bytes: int = 65_536,
    ) -> None:
        self._thread_clients: ThreadClients | None = None
        if client is None and is_cluster_url(url):
            client = cluster_client(url, timeout_s=SOCKET_TIMEOUT_S)
        elif client is None and is_sentinel_url(url):
            client = sentinel_primary(url, timeout_s=SOCKET_TIMEOUT_S)
            self._thread_clients = ThreadClients(
                lambda: sentinel_primary(url, timeout_s=SOCKET_TIMEOUT_S, single_connection=True)
            )
        elif client is None:
            client = _plain_client(url)
            self._thread_clients = ThreadClients(lambda: _plain_client(url, single_connection_client=True))
        self.replica_wait = (
            ReplicaWait(replicas=wait_for_replicas, timeout_ms=replica_wait_ms, url=url) if wait_for_replicas else None
        )
        scripts = Scripts(
            client, cluster=is_cluster_url(url), thread_clients=self._thread_clients, replica_wait=self.replica_wait
        )
        super().__init__(client=client, scripts=scripts, url=url, namespace=namespace, retention_ms=retention_s * 1000)
        self._log_bounds = (step_log_records, step_log_bytes)
        self._step_logs = self._scripts.register("step_logs")
        self._create = self._scripts.register("create")
        self._claim = self._scripts.register("claim")
        self._complete = self._scripts.register("complete")
        self._fail = self._scripts.register("fail")
        self._finish = self._scripts.register("finish")
        self._reopen = self._scripts.register("reopen")
        self._progress = self._scripts.register("progress")
        self._deadline = self._scripts.register("deadline")
        self._step_renew = self._scripts.register("step_renew")
        self._stalls = RunStalls(
            client=self._redis,
            scripts=self._scripts,
            namespace=namespace,
            retention_ms=self._retention_ms,
            answering=self._answering,
        )

    def _create_arguments(self, run: NewRun) -> tuple[list[str], list[Any]]:
        if run.idempotency_key and run.run_id != run_id_for_key(self._namespace, run.idempotency_key):
            raise ValueError(
                f"Run {run.run_id} has idempotency key {run.idempotency_key!r} but not its id: a keyed run's id "
                "is naming.run_id_for_key(namespace, key), so that a second start finds the first run."
            )
        args: list[Any] = [
            run.run_id,
            run.pipeline,
            self._retention_ms,
            run.idempotency_key or "",
            len(run.steps),
            len(run.starts),
            run.correlation_id or "",
            round((run.deadline_s or 0) * 1000),
            run.trace_id or "",
            run.first_input or "",
            run.delay_ms,
            "1" if run.trace_sampled else "0",
            run.input or "",
            "1" if run.registered else "0",
            run.rerun_of or "",
        ]
        # A step of the stored plan (u: its ancestors) started by a chain continuation (r) runs once that is
        # released (claim.lua); the run's first steps, at once.
        starts_in = {node: start for start, nodes in run.entries.items() if start != ROOT for node in nodes}
        for node, actor in run.steps:
            step: dict[str, str] = {"a": actor, "s": "pending"}
            if (up := run.frames.get(node)) is not None:
                step["u"] = up
                if node in starts_in:
                    step["r"] = starts_in[node]
            args += [node, orjson.dumps(step)]
        for node, leaves in run.starts.items():
            args += [node, leaves, " ".join(run.entries[node])]
        return [self._key(run.run_id)], args

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        return self.create_runs([run])[0]

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        if not runs:  # nothing to index: an empty ZADD is an error, not a no-op
            return []
        arguments = [self._create_arguments(run) for run in runs]

        def fill(pipe: Any) -> None:
            for keys, args in arguments:
                self._scripts.queue(pipe, self._create, keys, args)
            self._index.add(pipe, runs)

        with self._answering():
            if self._scripts.waits_per_node:  # each shard's creations with their WAIT, then the index
                created = self._scripts.run_many(self._create, arguments, replicated=True)
                self._scripts.execute(lambda pipe: self._index.add(pipe, runs))
            else:
                created = self._scripts.execute(fill, replicated=True)[: len(runs)]
        return [replies.create(reply) for reply in created]

    def claim_step(
        self,
        run_id: str,
        node: str,
        *,
        attempt: int,
        lease_ms: int,
        worker: str = "",
        actor: str | None = None,
        up: Sequence[Frame] | None = None,
    ) -> Claim:
        args: list[Any] = [node, lease_ms, attempt, worker]
        if actor is not None and up is not None:
            args += [actor, frames_json(up)]
        return replies.claim(self._run(self._claim, [self._key(run_id)], args), run_id, node)

    def complete_step(
        self,
        run_id: str,
        node: str,
        up: Sequence[Frame],
        value_json: str | None,
        *,
        trace_parent: str = "",
        claim: int | None = None,
        local: LocalOffer | None = None,
        local_after: str | None = None,
        worker: str = "",
        logs: AttemptLog | None = None,
    ) -> Advance:
        frames = frames_json(up)
        args: list[Any] = [node, value_json or "", frames, self._retention_ms, trace_parent, _claim(claim), worker]
        if local is not None:
            args += [local.actors, local.lease_ms]
        index = local_steps_key(self._namespace)
        added = {f"{run_id} {node}": time.time() * 1000 + local.lease_ms + LAPSE_MARGIN_MS} if local else {}
        done = f"{run_id} {local_after}" if local_after is not None else None

        # The index of local steps is written in the same round trip, before the completion that may claim
        # one: a worker that dies right after the claim has it in the index already.
        def index_local(pipe: Any) -> None:
            if done is not None:
                pipe.zrem(index, done)
            if added:
                pipe.zadd(index, cast(dict[Any, Any], added))

        first = index_local if added or done is not None else None
        reply = self._after(self._complete, run_id, args, logs=self._logs_call(node, claim, logs), first=first)
        return replies.complete(reply, run_id, node)

    def _logs_call(
        self, node: str, claim: int | None, logs: AttemptLog | None, *, overtaken: bool = False
    ) -> list[Any] | None:
        """The arguments of ``step_logs.lua`` that keep ``logs`` (None when there are none to keep); with
        ``overtaken``, also when a later claim holds the step."""
        if logs is None or not logs.records or self._log_bounds[0] == 0:
            return None
        return [node, _claim(claim), logs.to_json(), *self._log_bounds, self._retention_ms, "1" if overtaken else "0"]

    def _after(
        self,
        script: Script,
        run_id: str,
        args: list[Any],
        *,
        logs: list[Any] | None,
        first: Callable[[Any], None] | None = None,
    ) -> Any:
        """The reply of ``script`` (replicated) on ``run_id``'s key, sent in one round trip after what
        ``first`` queues and the step's ``logs`` (``step_logs.lua``'s arguments). A Redis Cluster that
        waits for replicas waits per primary: there the script goes alone, after the rest."""
        keys = [self._key(run_id)]
        if first is None and logs is None:
            return self._run(script, keys, args, replicated=True)

        def before(pipe: Any) -> None:
            if first is not None:
                first(pipe)
            if logs is not None:
                self._scripts.queue(pipe, self._step_logs, keys, logs)

        def fill(pipe: Any) -> None:
            before(pipe)
            self._scripts.queue(pipe, script, keys, args)

        with self._answering():
            if self._scripts.waits_per_node:
                answers = [*self._scripts.execute(before), self._scripts.run(script, keys, args, replicated=True)]
            else:
                answers = self._scripts.execute(fill, replicated=True)
        if logs is not None:
            replies.step_logs(answers[-2])
        return answers[-1]

    def fail_step(
        self,
        run_id: str,
        node: str,
        error: str,
        *,
        final: bool,
        claim: int | None = None,
        logs: AttemptLog | None = None,
    ) -> int | None:
        args = [node, error, "1" if final else "0", self._retention_ms, _claim(claim)]
        logs_call = self._logs_call(node, claim, logs, overtaken=True)
        return replies.fail(self._after(self._fail, run_id, args, logs=logs_call))

    def fail_run(self, run_id: str, error: str) -> None:
        args = ["failed", error, self._retention_ms]
        replies.finish(self._run(self._finish, [self._key(run_id)], args, replicated=True))

    def enforce_deadline(self, run_id: str) -> DeadlineCheck:
        return replies.deadline(self._run(self._deadline, [self._key(run_id)], [self._retention_ms]))

    def cancel_run(self, run_id: str) -> bool:
        args = ["cancelled", "", self._retention_ms]
        return replies.finish(self._run(self._finish, [self._key(run_id)], args, replicated=True))

    def reopen_step(self, run_id: str, node: str, *, reason: str = "") -> tuple[ReopenKind, str | None]:
        return replies.reopen(self._run(self._reopen, [self._key(run_id)], [node, self._retention_ms, reason]))

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        args = [node, "" if fraction is None else repr(float(fraction)), text]
        return replies.progress(self._run(self._progress, [self._key(run_id)], args))

    def renew_holds(self, steps: Mapping[tuple[str, str], int], keys: Mapping[str, str], *, lease_ms: int) -> Renewal:
        step_ids, key_ids = list(steps), list(keys)
        if not step_ids and not key_ids:
            return Renewal()

        # One script per hold (each atomic), all in one round trip: they are in different Redis Cluster
        # slots, which one script may not span.
        def fill(pipe: Any) -> None:
            for run_id, node in step_ids:
                self._scripts.queue(pipe, self._step_renew, [self._key(run_id)], [node, steps[run_id, node], lease_ms])
            for key in key_ids:
                self._scripts.queue(pipe, self._key_renew, [self._idempotency_key(key)], [keys[key], lease_ms])

        with self._answering():
            answers = self._scripts.execute(fill)
        kinds = [replies.step_renew(answer) for answer in answers[: len(step_ids)]]
        renewed = [replies.key_renew(answer) for answer in answers[len(step_ids) :]]
        return Renewal(
            lost_steps=tuple(step for step, kind in zip(step_ids, kinds, strict=True) if kind == "lost"),
            ended_steps=tuple(step for step, kind in zip(step_ids, kinds, strict=True) if kind == "ended"),
            lost_keys=tuple(key for key, kept in zip(key_ids, renewed, strict=True) if not kept),
        )

    def keep_alive(self, run_ids: Collection[str]) -> int:
        return self._stalls.keep_alive(run_ids)

    def sweep_lapsed(self, *, lease_ms: int, limit: int) -> list[StallCheck]:
        return self._stalls.sweep_lapsed(lease_ms=lease_ms, limit=limit)

    def sweep_stalled(self, *, stalled_after_ms: int, redrives: int, gap_ms: int, limit: int) -> list[StallCheck]:
        return self._stalls.sweep(stalled_after_ms=stalled_after_ms, redrives=redrives, gap_ms=gap_ms, limit=limit)

    def ping(self) -> None:
        with self._answering():
            self._redis.ping()

    def close(self) -> None:
        if self._thread_clients is not None:
            self._thread_clients.close()
        self._redis.close()

    def delete_namespace(self) -> int:
        """Delete every key of this store's namespace (tests and `pipelines` maintenance)."""
        deleted = 0
        with self._answering():
            for key in self._redis.scan_iter(match=f"{self._namespace}:*", count=1000):
                deleted += int(self._redis.delete(key))
        return deleted


def _claim(claim: int | None) -> str:
    """A claim as the scripts take it ('' for none: the call is not fenced)."""
    return "" if claim is None else str(claim)
