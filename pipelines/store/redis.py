"""Run store on Redis: one Lua script per operation, so every decision is atomic and costs one round trip.

Keys (all under ``<namespace>:run:<id>``, all with the retention TTL): the run hash, ``:steps``
(step id → JSON state), ``:starts``/``:entries`` (chain continuations), ``:results`` (results of
steps that feed a chain) and ``:bar:<id>`` (one hash per parallel node: member index → result). State
changes are published on the run key's channel, which is how ``wait`` blocks without polling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
import redis

from pipelines.config import mask_url
from pipelines.errors import StoreUnavailable
from pipelines.naming import (
    idempotency_record_key,
    lease_key,
    once_key,
    recent_runs_key,
    run_idempotency_key,
    run_key,
    schedule_key,
    tick_key,
)
from pipelines.plan import Frame
from pipelines.store.base import (
    FINAL_RUN_STATES,
    Advance,
    Claim,
    KeyClaimKind,
    LeaseCheck,
    NewRun,
    ReopenKind,
    RunState,
    RunStatus,
    StepStatus,
    shown_step_state,
)

#: Seconds to wait for Redis to answer before reporting it unavailable.
SOCKET_TIMEOUT_S = 5.0
#: Fastest rate at which ``wait_run`` hands changes to its ``on_change`` callback.
CHANGE_CALLBACK_INTERVAL_S = 0.2
#: Longest a waiter sleeps on its subscription before re-reading the run (a dropped subscription).
LIVENESS_CHECK_S = 30.0


def _script(name: str) -> str:
    return resources.files("pipelines.store").joinpath("lua", f"{name}.lua").read_text()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisRunStore:
    """A :class:`~pipelines.store.base.RunStore` on Redis."""

    def __init__(self, *, url: str, namespace: str, retention_s: int) -> None:
        self._url = url
        self._namespace = namespace
        self._retention_ms = retention_s * 1000
        self._redis = redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=30,
        )
        self._create = self._redis.register_script(_script("create"))
        self._claim = self._redis.register_script(_script("claim"))
        self._complete = self._redis.register_script(_script("complete"))
        self._fail = self._redis.register_script(_script("fail"))
        self._finish = self._redis.register_script(_script("finish"))
        self._reopen = self._redis.register_script(_script("reopen"))
        self._key_claim = self._redis.register_script(_script("key_claim"))
        self._key_release = self._redis.register_script(_script("key_release"))
        self._progress = self._redis.register_script(_script("progress"))
        self._lease_open = self._redis.register_script(_script("lease_open"))
        self._lease_renew = self._redis.register_script(_script("lease_renew"))
        self._lease_take = self._redis.register_script(_script("lease_take"))
        self._tick_claim = self._redis.register_script(_script("tick_claim"))
        self._reserve = self._redis.register_script(_script("reserve"))

    @contextmanager
    def _answering(self) -> Iterator[None]:
        try:
            yield
        except redis.AuthenticationError as e:
            raise StoreUnavailable(
                f"Redis at {mask_url(self._url)} refused the login ({e}). Check the user name and password "
                "in store.url (or PIPELINES_STORE__URL)."
            ) from None
        except redis.ResponseError as e:
            if "DB index" not in str(e):
                raise
            raise StoreUnavailable(
                f"Redis at {mask_url(self._url)} has no database {urlsplit(self._url).path.strip('/')} ({e}). "
                "Use a database number the server has (0-15 by default) in store.url."
            ) from None
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreUnavailable(
                f"Redis at {mask_url(self._url)} does not answer ({e}). Is it running? "
                "Try `docker compose up -d redis`, or set store.url in config.toml."
            ) from None

    def _key(self, run_id: str) -> str:
        return run_key(self._namespace, run_id)

    def _create_arguments(self, run: NewRun) -> tuple[list[str], list[Any]]:
        idem = run_idempotency_key(self._namespace, run.idempotency_key) if run.idempotency_key else ""
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
        ]
        for node, actor in run.steps:
            args += [node, orjson.dumps({"a": actor, "s": "pending"})]
        for node, leaves in run.starts.items():
            args += [node, leaves, " ".join(run.entries[node])]
        return [self._key(run.run_id), idem, recent_runs_key(self._namespace)], args

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        return self.create_runs([run])[0]

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        with self._answering():
            pipe = self._redis.pipeline(transaction=False)
            for run in runs:
                keys, args = self._create_arguments(run)
                self._create(keys=keys, args=args, client=pipe)
            replies = cast(list[list[Any]], pipe.execute())
        return [(_text(run_id), bool(created)) for created, run_id in replies]

    def recent_runs(self, limit: int) -> list[str]:
        with self._answering():
            ids = self._redis.zrevrange(recent_runs_key(self._namespace), 0, limit - 1)
        return [_text(run_id) for run_id in ids]

    def run_for_key(self, idempotency_key: str) -> str | None:
        with self._answering():
            run_id = self._redis.get(run_idempotency_key(self._namespace, idempotency_key))
        return _text(run_id) if run_id is not None else None

    def claim_step(self, run_id: str, node: str, *, attempt: int, lease_ms: int) -> Claim:
        with self._answering():
            reply = cast(list[Any], self._claim(keys=[self._key(run_id)], args=[node, lease_ms, attempt]))
        kind = _text(reply[0])
        if kind == "run":
            return Claim("run", attempt=int(reply[1]))
        if kind == "busy":
            return Claim("busy", wait_ms=int(reply[1]))
        if kind == "stopped":
            return Claim("stopped", run_state=_text(reply[1]))
        return Claim(cast(Any, kind))

    def complete_step(
        self, run_id: str, node: str, up: Sequence[Frame], value_json: str | None, *, trace_parent: str = ""
    ) -> Advance:
        frames = orjson.dumps([f.to_json() for f in up])
        args: list[Any] = [node, value_json or "", frames, self._retention_ms, trace_parent]
        with self._answering():
            reply = cast(list[Any], self._complete(keys=[self._key(run_id)], args=args))
        kind = _text(reply[0])
        if kind == "start":
            leaves = _text(reply[3]) if reply[3] is not None else "[]"
            return Advance(
                "start",
                node=_text(reply[1]),
                value_json=_text(reply[2]),
                leaves_json=leaves,
                member_trace_parents=tuple(_text(reply[4]).split()),
                chord_wait_ms=int(reply[5]) if _text(reply[4]) or int(reply[5]) else None,
            )
        if kind == "done":
            return Advance(
                "done",
                value_json=_text(reply[1]),
                run_created_at_ms=int(reply[2]),
                member_trace_parents=tuple(_text(reply[3]).split()),
                chord_wait_ms=int(reply[4]) if _text(reply[3]) or int(reply[4]) else None,
            )
        return Advance(cast(Any, kind))

    def fail_step(self, run_id: str, node: str, error: str, *, final: bool) -> int | None:
        with self._answering():
            reply = cast(
                list[Any],
                self._fail(keys=[self._key(run_id)], args=[node, error, "1" if final else "0", self._retention_ms]),
            )
        return int(reply[1]) if int(reply[0]) else None

    def fail_run(self, run_id: str, error: str) -> None:
        with self._answering():
            self._finish(keys=[self._key(run_id)], args=["failed", error, self._retention_ms])

    def cancel_run(self, run_id: str) -> bool:
        with self._answering():
            return bool(self._finish(keys=[self._key(run_id)], args=["cancelled", "", self._retention_ms]))

    def get_run(self, run_id: str) -> RunStatus | None:
        key = self._key(run_id)
        with self._answering():
            pipe = self._redis.pipeline(transaction=True)
            pipe.hgetall(key)
            pipe.hgetall(key + ":steps")
            record, steps = cast(list[dict[bytes, bytes]], pipe.execute())
        if not record:
            return None
        return _snapshot(record, steps)

    def run_state(self, run_id: str) -> RunState | None:
        with self._answering():
            state = self._redis.hget(self._key(run_id), "status")
        return cast(RunState, _text(state)) if state is not None else None

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._answering():
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                # Subscribe before reading, so a change between the two is not missed.
                pubsub.subscribe(self._key(run_id))
                last_callback = 0.0
                while True:
                    if on_change is None:
                        state = self.run_state(run_id)
                        if state is None or state in FINAL_RUN_STATES:
                            break
                    else:
                        snapshot = self.get_run(run_id)
                        if snapshot is None or snapshot.is_final:
                            break
                        if time.monotonic() - last_callback >= CHANGE_CALLBACK_INTERVAL_S:
                            on_change(snapshot)
                            last_callback = time.monotonic()
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    # A bound on the wait only guards against a silently dropped subscription.
                    pubsub.get_message(timeout=min(remaining, LIVENESS_CHECK_S) if remaining else LIVENESS_CHECK_S)
            finally:
                pubsub.close()
        return self.get_run(run_id)

    def reopen_step(self, run_id: str, node: str) -> tuple[ReopenKind, str | None]:
        with self._answering():
            reply = cast(list[Any], self._reopen(keys=[self._key(run_id)], args=[node, self._retention_ms]))
        return cast(ReopenKind, _text(reply[0])), _text(reply[1]) if len(reply) > 1 else None

    def _idempotency_key(self, key: str) -> str:
        return idempotency_record_key(self._namespace, key)

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        with self._answering():
            reply = cast(list[Any], self._key_claim(keys=[self._idempotency_key(key)], args=[holder, lease_ms]))
        return cast(KeyClaimKind, _text(reply[0])), int(reply[1]) if len(reply) > 1 else 0

    def finish_key(self, key: str, *, retention_s: int) -> None:
        with self._answering():
            self._redis.set(self._idempotency_key(key), "done", ex=retention_s)

    def release_key(self, key: str, *, holder: str) -> None:
        with self._answering():
            self._key_release(keys=[self._idempotency_key(key)], args=[holder])

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        with self._answering():
            return bool(self._redis.set(once_key(self._namespace, key), "1", nx=True, ex=retention_s))

    def forget_once(self, key: str) -> None:
        with self._answering():
            self._redis.delete(once_key(self._namespace, key))

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        args = [node, "" if fraction is None else repr(float(fraction)), text]
        with self._answering():
            state = self._progress(keys=[self._key(run_id)], args=args)
        return _text(state) if state else None

    def _lease(self, lease_id: str) -> str:
        return lease_key(self._namespace, lease_id)

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> bool:
        with self._answering():
            opened = self._lease_open(keys=[self._lease(lease_id)], args=[holder, lease_ms, record, self._retention_ms])
        return bool(opened)

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        ids = list(holders)
        if not ids:
            return []
        with self._answering():
            lost = cast(
                list[int],
                self._lease_renew(keys=[self._lease(i) for i in ids], args=[lease_ms, *(holders[i] for i in ids)]),
            )
        return [ids[index - 1] for index in lost]

    def close_lease(self, lease_id: str) -> None:
        with self._answering():
            self._redis.delete(self._lease(lease_id))

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        with self._answering():
            reply = cast(list[Any], self._lease_take(keys=[self._lease(lease_id)]))
        kind = _text(reply[0])
        if kind == "alive":
            return LeaseCheck("alive", wait_ms=int(reply[1]))
        if kind == "expired":
            return LeaseCheck("expired", record=_text(reply[1]))
        return LeaseCheck("gone")

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        keys = [tick_key(self._namespace, job, tick_ms), schedule_key(self._namespace, job)]
        with self._answering():
            return bool(self._tick_claim(keys=keys, args=[tick_ms, retention_s * 1000]))

    def last_tick(self, job: str) -> int | None:
        with self._answering():
            value = self._redis.get(schedule_key(self._namespace, job))
        return int(value) if value is not None else None

    def tick_claims(self, job: str, tick_ms: int) -> int:
        with self._answering():
            value = self._redis.get(tick_key(self._namespace, job, tick_ms))
        return int(value) if value is not None else 0

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        with self._answering():
            delays = cast(list[int], self._reserve(keys=[f"{self._namespace}:{key}"], args=[count, interval_ms]))
        return [int(d) for d in delays]

    def ping(self) -> None:
        with self._answering():
            self._redis.ping()

    def close(self) -> None:
        self._redis.close()

    def delete_namespace(self) -> int:
        """Delete every key of this store's namespace (tests and `pipelines` maintenance)."""
        deleted = 0
        with self._answering():
            for key in self._redis.scan_iter(match=f"{self._namespace}:*", count=1000):
                deleted += int(self._redis.delete(key))
        return deleted


def _int(record: dict[bytes, bytes], name: str) -> int | None:
    value = record.get(name.encode())
    return int(value) if value not in (None, b"") else None


def _snapshot(record: dict[bytes, bytes], steps: dict[bytes, bytes]) -> RunStatus:
    def field(name: str) -> str | None:
        value = record.get(name.encode())
        return value.decode() if value not in (None, b"") else None

    run_state = field("status") or ""
    step_list = []
    for node, raw in steps.items():
        data = orjson.loads(raw)
        step_list.append(
            StepStatus(
                node=node.decode(),
                actor=data["a"],
                state=shown_step_state(run_state, data["s"]),
                attempts=int(data.get("n", 0)),
                started_at_ms=data.get("t0"),
                finished_at_ms=data.get("t1"),
                error=data.get("e"),
                progress=data.get("p"),
                progress_text=data.get("pt") or None,
            )
        )
    step_list.sort(key=lambda s: [int(part) for part in s.node.split(".")])
    return RunStatus(
        run_id=field("id") or "",
        pipeline=field("pipeline") or "",
        state=cast(RunState, field("status")),
        created_at_ms=_int(record, "created_at") or 0,
        started_at_ms=_int(record, "started_at"),
        finished_at_ms=_int(record, "finished_at"),
        result_json=field("result"),
        error=field("error"),
        failed_step=field("failed_step"),
        correlation_id=field("correlation_id"),
        trace_id=field("trace_id"),
        steps=tuple(step_list),
    )
