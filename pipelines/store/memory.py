"""Run store in process memory, for the embedded mode and unit tests.

It keeps exactly the semantics of the Redis scripts (see ``pipelines/store/lua``), under one lock, and
wakes waiters with a condition variable instead of pub/sub.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

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
    StepState,
    StepStatus,
    shown_step_state,
)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Step:
    actor: str
    state: StepState = "pending"
    attempts: int = 0
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    lease_until_ms: int | None = None
    error: str | None = None
    progress: float | None = None
    progress_text: str | None = None


@dataclass
class _Run:
    run_id: str
    pipeline: str
    expires_at_ms: int
    steps: dict[str, _Step]
    starts: dict[str, str]
    entries: dict[str, Sequence[str]]
    state: RunState = "pending"
    created_at_ms: int = field(default_factory=_now_ms)
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    result_json: str | None = None
    error: str | None = None
    failed_step: str | None = None
    results: dict[str, str] = field(default_factory=dict)
    barriers: dict[str, dict[int, str]] = field(default_factory=dict)
    barrier_meta: dict[str, dict[str, str]] = field(default_factory=dict)
    correlation_id: str | None = None
    trace_id: str | None = None
    deadline_at_ms: int | None = None

    def past_deadline(self, node: str) -> bool:
        """Fail the run if its deadline passed (mirrors the scripts' deadline check)."""
        now = _now_ms()
        if self.deadline_at_ms is None or now <= self.deadline_at_ms or self.state not in ("pending", "running"):
            return False
        self.state, self.error, self.failed_step, self.finished_at_ms = "failed", "deadline exceeded", node, now
        return True


class MemoryRunStore:
    """A :class:`~pipelines.store.base.RunStore` in this process's memory."""

    def __init__(self, *, retention_s: int) -> None:
        self._retention_ms = retention_s * 1000
        self._runs: dict[str, _Run] = {}
        self._keys: dict[str, str] = {}
        self._records: dict[str, tuple[str, int]] = {}
        """idempotency records and once-marks: key → (value, expiry in epoch ms)."""
        self._leases: dict[str, tuple[str, int, str]] = {}
        """long-running jobs' leases: id → (holder, expiry in epoch ms, record)."""
        self._ticks: dict[tuple[str, int], int] = {}
        self._last_ticks: dict[str, int] = {}
        self._slots: dict[str, int] = {}
        self._changed = threading.Condition()

    def _live(self, run_id: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is not None and run.expires_at_ms <= _now_ms():
            del self._runs[run_id]
            return None
        return run

    def _touch(self, run: _Run) -> None:
        run.expires_at_ms = _now_ms() + self._retention_ms
        self._changed.notify_all()

    def create_run(self, run: NewRun) -> tuple[str, bool]:
        with self._changed:
            if run.idempotency_key is not None:
                existing = self._keys.get(run.idempotency_key)
                if existing is not None and self._live(existing) is not None:
                    return existing, False
                self._keys[run.idempotency_key] = run.run_id
            self._runs[run.run_id] = _Run(
                run_id=run.run_id,
                pipeline=run.pipeline,
                expires_at_ms=_now_ms() + self._retention_ms,
                steps={node: _Step(actor) for node, actor in run.steps},
                starts=dict(run.starts),
                entries=dict(run.entries),
                correlation_id=run.correlation_id,
                trace_id=run.trace_id,
                deadline_at_ms=_now_ms() + round(run.deadline_s * 1000) if run.deadline_s else None,
            )
            return run.run_id, True

    def recent_runs(self, limit: int) -> list[str]:
        with self._changed:
            live = [run for run in self._runs.values() if run.expires_at_ms > _now_ms()]
            return [run.run_id for run in sorted(live, key=lambda r: r.created_at_ms, reverse=True)[:limit]]

    def run_for_key(self, idempotency_key: str) -> str | None:
        with self._changed:
            run_id = self._keys.get(idempotency_key)
            return run_id if run_id is not None and self._live(run_id) is not None else None

    def create_runs(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        return [self.create_run(run) for run in runs]

    def claim_step(self, run_id: str, node: str, *, attempt: int, lease_ms: int) -> Claim:
        with self._changed:
            run = self._live(run_id)
            step = run.steps.get(node) if run else None
            if run is None or step is None:
                return Claim("missing")
            now = _now_ms()
            if run.past_deadline(node):
                self._changed.notify_all()
            if run.state not in ("pending", "running"):
                if step.state in ("pending", "retrying"):
                    step.state = "skipped"
                return Claim("stopped", run_state=run.state)
            if step.state == "succeeded":
                return Claim("done")
            lease_left = (step.lease_until_ms or 0) - now
            if step.state == "running" and lease_left > 0 and step.attempts >= attempt:
                return Claim("busy", wait_ms=lease_left)
            step.state = "running"
            step.attempts += 1
            step.started_at_ms = step.started_at_ms or now
            step.lease_until_ms = now + lease_ms
            if run.state == "pending":
                run.state, run.started_at_ms = "running", now
            self._changed.notify_all()
            return Claim("run", attempt=step.attempts)

    def complete_step(
        self, run_id: str, node: str, up: Sequence[Frame], value_json: str | None, *, trace_parent: str = ""
    ) -> Advance:
        with self._changed:
            run = self._live(run_id)
            step = run.steps.get(node) if run else None
            if run is None or step is None:
                return Advance("missing")
            return self._advance(run, node, step, up, value_json, trace_parent)

    def _advance(  # noqa: PLR0911, PLR0912, PLR0917 - one branch per outcome, in the order of complete.lua
        self, run: _Run, node: str, step: _Step, up: Sequence[Frame], value_json: str | None, trace_parent: str
    ) -> Advance:
        redrive = step.state == "succeeded"
        if not redrive:
            if value_json is None:
                return Advance("missing")
            step.state, step.finished_at_ms, step.lease_until_ms, step.error = (
                "succeeded",
                _now_ms(),
                None,
                None,
            )
            self._changed.notify_all()
        if run.state not in ("pending", "running"):
            return Advance("stopped")
        first = up[0] if up else None
        value: str | None = value_json
        if redrive:
            if first is not None and first.kind == "p":
                value = run.barriers.get(first.node, {}).get(first.index)
            else:
                value = run.results.get(node)
            if value is None:
                return Advance("duplicate")
        elif first is None or first.kind == "c":
            run.results[node] = value  # type: ignore[assignment]
        assert value is not None
        links: tuple[str, ...] = ()
        wait_ms: int | None = None
        for frame in up:
            if frame.kind == "c":
                if frame.index < frame.count - 1:
                    child = f"{frame.node}.{frame.index + 1}"
                    if redrive and self._started(run, child):
                        return Advance("duplicate")
                    if run.past_deadline(node):
                        self._touch(run)
                        return Advance("stopped")
                    return Advance(
                        "start",
                        node=child,
                        value_json=value,
                        leaves_json=run.starts.get(child, "[]"),
                        member_trace_parents=links,
                        chord_wait_ms=wait_ms,
                    )
                continue
            barrier = run.barriers.setdefault(frame.node, {})
            meta = run.barrier_meta.setdefault(frame.node, {})
            if frame.index not in barrier:
                barrier[frame.index] = value
                meta.setdefault("t0", str(_now_ms()))
                if trace_parent:
                    meta[str(frame.index)] = trace_parent
            elif not redrive:
                return Advance("duplicate")
            if len(barrier) < frame.count:
                return Advance("waiting")
            value = "[" + ",".join(barrier[i] for i in range(frame.count)) + "]"
            links = tuple(parent for key, parent in meta.items() if key != "t0")
            wait_ms = _now_ms() - int(meta["t0"])
        run.state, run.result_json, run.finished_at_ms = "succeeded", value, _now_ms()
        self._touch(run)
        return Advance(
            "done",
            value_json=value,
            run_created_at_ms=run.created_at_ms,
            member_trace_parents=links,
            chord_wait_ms=wait_ms,
        )

    @staticmethod
    def _started(run: _Run, child: str) -> bool:
        return all(run.steps[node].state != "pending" for node in run.entries.get(child, ()))

    def fail_step(self, run_id: str, node: str, error: str, *, final: bool) -> int | None:
        with self._changed:
            run = self._live(run_id)
            step = run.steps.get(node) if run else None
            if run is None or step is None or step.state == "succeeded":
                return None
            failed_run = None
            step.error, step.lease_until_ms = error, None
            if final:
                step.state, step.finished_at_ms = "failed", _now_ms()
                if run.state in ("pending", "running"):
                    run.state, run.error, run.failed_step, run.finished_at_ms = (
                        "failed",
                        error,
                        node,
                        _now_ms(),
                    )
                    self._touch(run)
                    failed_run = run.created_at_ms
            else:
                step.state = "retrying"
            self._changed.notify_all()
            return failed_run

    def _finish(self, run_id: str, state: RunState, error: str | None) -> bool:
        with self._changed:
            run = self._live(run_id)
            if run is None or run.state not in ("pending", "running"):
                return False
            run.state, run.finished_at_ms = state, _now_ms()
            if error:
                run.error = error
            self._touch(run)
            return True

    def fail_run(self, run_id: str, error: str) -> None:
        self._finish(run_id, "failed", error)

    def cancel_run(self, run_id: str) -> bool:
        return self._finish(run_id, "cancelled", None)

    def get_run(self, run_id: str) -> RunStatus | None:
        with self._changed:
            run = self._live(run_id)
            return _snapshot(run) if run else None

    def run_state(self, run_id: str) -> RunState | None:
        with self._changed:
            run = self._live(run_id)
            return run.state if run else None

    def wait_run(
        self,
        run_id: str,
        timeout_s: float | None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus | None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while True:
                run = self._live(run_id)
                if run is None or run.state in FINAL_RUN_STATES:
                    break
                if on_change is not None:
                    on_change(_snapshot(run))
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._changed.wait(remaining)
            return _snapshot(run) if run else None

    def reopen_step(self, run_id: str, node: str) -> tuple[ReopenKind, str | None]:
        with self._changed:
            run = self._live(run_id)
            step = run.steps.get(node) if run else None
            if run is None or step is None:
                return "missing", None
            if step.state == "succeeded":
                return "done", run.state
            if run.state == "failed":
                run.state, run.error, run.failed_step, run.finished_at_ms, run.deadline_at_ms = (
                    "running",
                    None,
                    None,
                    None,
                    None,
                )
            elif run.state not in ("pending", "running"):
                return "stopped", run.state
            step.state, step.error, step.lease_until_ms, step.finished_at_ms = "retrying", None, None, None
            self._touch(run)
            return "reopened", run.state

    def _record(self, key: str) -> str | None:
        value = self._records.get(key)
        if value is None or value[1] <= _now_ms():
            self._records.pop(key, None)
            return None
        return value[0]

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        with self._changed:
            value = self._record(key)
            if value == "done":
                return "done", 0
            if value is not None:
                return "busy", self._records[key][1] - _now_ms()
            self._records[key] = (f"held:{holder}", _now_ms() + lease_ms)
            return "run", 0

    def finish_key(self, key: str, *, retention_s: int) -> None:
        with self._changed:
            self._records[key] = ("done", _now_ms() + retention_s * 1000)

    def release_key(self, key: str, *, holder: str) -> None:
        with self._changed:
            if self._record(key) == f"held:{holder}":
                del self._records[key]

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        with self._changed:
            once = f"once:{key}"
            if self._record(once) is not None:
                return False
            self._records[once] = ("1", _now_ms() + retention_s * 1000)
            return True

    def forget_once(self, key: str) -> None:
        with self._changed:
            self._records.pop(f"once:{key}", None)

    def report_progress(self, run_id: str, node: str, fraction: float | None, text: str) -> str | None:
        with self._changed:
            run = self._live(run_id)
            if run is None:
                return None
            step = run.steps.get(node)
            if fraction is not None and step is not None:
                step.progress, step.progress_text = float(fraction), text or None
                self._changed.notify_all()
            return run.state

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> bool:
        with self._changed:
            if lease_id in self._leases:
                return False
            self._leases[lease_id] = (holder, _now_ms() + lease_ms, record)
            return True

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        lost = []
        with self._changed:
            for lease_id, holder in holders.items():
                lease = self._leases.get(lease_id)
                if lease is None or lease[0] != holder:
                    lost.append(lease_id)
                else:
                    self._leases[lease_id] = (holder, _now_ms() + lease_ms, lease[2])
        return lost

    def close_lease(self, lease_id: str) -> None:
        with self._changed:
            self._leases.pop(lease_id, None)

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        with self._changed:
            lease = self._leases.get(lease_id)
            if lease is None:
                return LeaseCheck("gone")
            left = lease[1] - _now_ms()
            if left > 0:
                return LeaseCheck("alive", wait_ms=left)
            del self._leases[lease_id]
            return LeaseCheck("expired", record=lease[2])

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        with self._changed:
            claims = self._ticks[job, tick_ms] = self._ticks.get((job, tick_ms), 0) + 1
            if claims > 1:
                return False
            self._last_ticks[job] = max(tick_ms, self._last_ticks.get(job, 0))
            return True

    def last_tick(self, job: str) -> int | None:
        with self._changed:
            return self._last_ticks.get(job)

    def tick_claims(self, job: str, tick_ms: int) -> int:
        with self._changed:
            return self._ticks.get((job, tick_ms), 0)

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        with self._changed:
            now = _now_ms()
            tat = max(self._slots.get(key, 0), now)
            delays = [tat - now + i * interval_ms for i in range(count)]
            self._slots[key] = tat + count * interval_ms
            return delays

    def ping(self) -> None:
        """Always answers."""

    def close(self) -> None:
        """Nothing to release."""


def _snapshot(run: _Run) -> RunStatus:
    steps = tuple(
        StepStatus(
            node=node,
            actor=s.actor,
            state=shown_step_state(run.state, s.state),
            attempts=s.attempts,
            started_at_ms=s.started_at_ms,
            finished_at_ms=s.finished_at_ms,
            error=s.error,
            progress=s.progress,
            progress_text=s.progress_text,
        )
        for node, s in run.steps.items()
    )
    fields: dict[str, Any] = {
        "run_id": run.run_id,
        "pipeline": run.pipeline,
        "state": run.state,
        "created_at_ms": run.created_at_ms,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "result_json": run.result_json,
        "error": run.error,
        "failed_step": run.failed_step,
        "correlation_id": run.correlation_id,
        "trace_id": run.trace_id,
    }
    return replace(RunStatus(**fields), steps=steps)
