"""Each Lua script's reply, decoded by one typed function named after the script.

The shapes are documented at the top of each script in ``lua/``. Redis hands a script's strings over
as bytes, its numbers as ints, its tables as lists and ``false``/``nil`` as None; nothing outside
this module indexes a reply.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, cast

import orjson

from pipelines.errors import ClaimLost, InvalidQuery
from pipelines.store.base import (
    Advance,
    AdvanceKind,
    Claim,
    ClaimKind,
    DeadlineCheck,
    KeyClaimKind,
    LeaseCheck,
    LeaseOpenKind,
    ReopenKind,
    RunState,
    RunStatus,
    RunSummary,
    SlotTake,
    StallCheck,
    StalledGroup,
    StepStatus,
    shown_step_state,
)
from pipelines.store.step_history import FAILURE_OVERTAKEN, history_of
from pipelines.wire.steps import AddressNotInPlan

#: A runs page's cursor: the creation time (epoch ms) it stopped at, and how many entries at it it passed.
_CURSOR_TOP, _CURSOR_PASSED = re.compile(r"[0-9]{1,15}"), re.compile(r"[0-9]{1,9}")


def text(value: Any) -> str:
    """A reply's string (bytes from Redis, or an int Redis sent as a number)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def create(reply: Any) -> tuple[str, bool]:
    """``create.lua``: (run id, created), the id being that of the existing run for a known key."""
    created, run_id = reply
    return text(run_id), bool(created)


def claim(reply: Any, run_id: str, node: str) -> Claim:
    """``claim.lua``: whether the step runs now.

    Raises:
        AddressNotInPlan: The message's actor or address is not the stored plan's.
    """
    _check_in_plan(reply, run_id, node)
    kind = cast(ClaimKind, text(reply[0]))
    if kind == "run":
        return Claim("run", attempt=int(reply[1]))
    if kind == "busy":
        return Claim("busy", wait_ms=int(reply[1]))
    if kind == "stopped":
        return Claim("stopped", run_state=text(reply[1]))
    return Claim(kind)


def complete(reply: Any, run_id: str, node: str) -> Advance:
    """``complete.lua``: what follows the step; the barrier fields only when it released one.

    Raises:
        AddressNotInPlan: The frames given are not the step's ancestors in the stored plan.
    """
    _check_in_plan(reply, run_id, node)
    kind = cast(AdvanceKind, text(reply[0]))
    if kind == "start":
        _, node, value, leaves, *barrier = reply
        parents, wait_ms = _barrier(*barrier)
        leaves_json = text(leaves) if leaves is not None else "[]"
        return Advance(
            "start",
            node=text(node),
            value_json=text(value),
            leaves_json=leaves_json,
            member_trace_parents=parents,
            chord_wait_ms=wait_ms,
        )
    if kind == "local":
        _, node, value, leaves, *barrier, claim = reply
        parents, wait_ms = _barrier(*barrier)
        return Advance(
            "local",
            node=text(node),
            value_json=text(value),
            leaves_json=text(leaves),
            member_trace_parents=parents,
            chord_wait_ms=wait_ms,
            claim=int(claim),
        )
    if kind == "done":
        _, value, created_at, *barrier = reply
        parents, wait_ms = _barrier(*barrier)
        return Advance(
            "done",
            value_json=text(value),
            run_created_at_ms=int(created_at),
            member_trace_parents=parents,
            chord_wait_ms=wait_ms,
        )
    return Advance(kind)


def _check_in_plan(reply: Any, run_id: str, node: str) -> None:
    if text(reply[0]) == "malformed":
        raise AddressNotInPlan(run_id, node, text(reply[1]))


def _barrier(released: Any, links: Any, wait_ms: Any) -> tuple[tuple[str, ...], int | None]:
    if not int(released):
        return (), None
    return tuple(text(links).split()), int(wait_ms)


def fail(reply: Any) -> int | None:
    """``fail.lua``: the run's creation time (epoch ms) when this failure failed the run, else None.

    Raises:
        ClaimLost: The attempt had lost its claim; only its own history entry and logs were recorded.
    """
    code = int(reply[0])
    if code < 0:
        raise ClaimLost(FAILURE_OVERTAKEN)
    return int(reply[1]) if code else None


def step_renew(reply: Any) -> Literal["renewed", "lost", "ended"]:
    """``step_renew.lua``: whether a step's lease was renewed, lost to a later claim, or ended."""
    return "renewed" if int(reply) == 1 else "lost" if int(reply) == 0 else "ended"


def key_renew(reply: Any) -> bool:
    """``key_renew.lua``: whether an idempotency key's claim was renewed."""
    return bool(int(reply))


def finish(reply: Any) -> bool:
    """``finish.lua``: whether the run was still going (and now ended)."""
    return bool(reply)


def reopen(reply: Any) -> tuple[ReopenKind, str | None]:
    """``reopen.lua``: (outcome, run state of a stopped run or the continuation a step not due waits for)."""
    return cast(ReopenKind, text(reply[0])), text(reply[1]) if len(reply) > 1 else None


def key_claim(reply: Any) -> tuple[KeyClaimKind, int]:
    """``key_claim.lua``: (outcome, ms the holder's lease has left when busy)."""
    return cast(KeyClaimKind, text(reply[0])), int(reply[1]) if len(reply) > 1 else 0


def key_finish(reply: Any) -> bool:
    """``key_finish.lua``: whether the key is recorded done (it always is)."""
    return bool(reply)


def rerun_link(reply: Any) -> bool:
    """``rerun_link.lua``: whether the link was recorded (not when the original run is past its retention)."""
    return bool(reply)


def counts_add(reply: Any) -> int:
    """``counts_add.lua``: how many of the minute's fields it changed."""
    return int(reply)


def key_release(reply: Any) -> bool:
    """``key_release.lua``: whether this holder still held the key (and let it go)."""
    return bool(reply)


def deadline(reply: Any) -> DeadlineCheck:
    """``deadline.lua``: what checking the run's deadline did."""
    kind = text(reply[0])
    if kind == "failed":
        return DeadlineCheck("failed", step=text(reply[1]) or None)
    if kind == "wait":
        return DeadlineCheck("wait", wait_ms=int(reply[1]))
    return DeadlineCheck("none")


def progress(reply: Any) -> str | None:
    """``progress.lua``: the run's state, or None for an unknown run."""
    return text(reply) if reply else None


def lease_open(reply: Any) -> LeaseOpenKind:
    """``lease_open.lua``: ``opened``, ``open`` or ``ended``."""
    kind = text(reply)
    if kind not in ("opened", "open", "ended"):
        raise ValueError(f"lease_open.lua replied {kind!r}")
    return cast(LeaseOpenKind, kind)


def lease_close(reply: Any) -> bool:
    """``lease_close.lua``: whether there was a lease to close."""
    return bool(reply)


def lease_renew(reply: Any, lease_ids: Sequence[str]) -> list[str]:
    """``lease_renew.lua``: the leases of ``lease_ids`` (in the order sent) another holder took over."""
    return [lease_ids[int(index) - 1] for index in reply]


def lease_take(reply: Any) -> LeaseCheck:
    """``lease_take.lua``: the watchdog's look at the lease."""
    kind = text(reply[0])
    if kind == "alive":
        return LeaseCheck("alive", wait_ms=int(reply[1]))
    if kind == "expired":
        return LeaseCheck("expired", record=text(reply[1]))
    return LeaseCheck("gone")


def tick_claim(reply: Any) -> bool:
    """``tick_claim.lua``: whether this was the tick's first claim."""
    return bool(reply)


def tick_sweep(reply: Any) -> list[int]:
    """``tick_sweep.lua``: the missed ticks (epoch ms), oldest first."""
    return [int(tick) for tick in reply]


def reserve(reply: Any) -> list[int]:
    """``reserve.lua``: ms until each reserved slot."""
    return [int(delay) for delay in reply]


def rate_take(reply: Any) -> SlotTake:
    """``rate_take.lua``: run now, or wait for the slot reserved."""
    return SlotTake(wait_ms=int(reply[0]), slot_ms=int(reply[1]))


def touch(replies: Sequence[Any]) -> int:
    """``touch.lua``, one reply per run: how many of the runs were still going (and were touched)."""
    return sum(int(reply) for reply in replies)


def stall_clock(reply: Any) -> tuple[int, int]:
    """``stall_clock.lua``: the store's time now, and since when the sweep has looked without a gap (ms)."""
    now_ms, resumed_ms = reply
    return int(now_ms), int(resumed_ms)


def stall(run_id: str, reply: Any) -> StallCheck:
    """``stall.lua``: what the stall sweep found of one run."""
    kind = text(reply[0])
    if kind == "alive":
        return StallCheck(run_id, "alive", touched_ms=int(reply[1]))
    if kind == "redrive":
        _, redrive, touched_ms, pipeline, correlation_id, *flat = reply
        groups = tuple(
            StalledGroup(text(node), text(leaves), text(given), tuple(text(ids).split()))
            for node, leaves, given, ids in zip(flat[::4], flat[1::4], flat[2::4], flat[3::4], strict=True)
        )
        return StallCheck(
            run_id,
            "redrive",
            touched_ms=int(touched_ms),
            pipeline=text(pipeline),
            correlation_id=text(correlation_id) or None,
            redrive=int(redrive),
            groups=groups,
        )
    if kind == "failed":
        _, step, created_at, pipeline, error = reply
        return StallCheck(
            run_id,
            "failed",
            pipeline=text(pipeline),
            step=text(step) or None,
            error=text(error),
            created_at_ms=int(created_at),
        )
    return StallCheck(run_id, "gone")


def lapsed(run_id: str, reply: Any) -> StallCheck:
    """``lapsed.lua``: a run with a local step due, as the lapse sweep found it (``gone`` also when no
    step of it runs any more)."""
    if text(reply[0]) == "none":
        return StallCheck(run_id, "gone")
    return stall(run_id, reply)


def run_summary(run_id: str, fields: Sequence[Any], steps_total: Any) -> RunSummary | None:
    """A run as a list shows it, from ``HMGET`` of ``redis.SUMMARY_FIELDS`` and its steps' count (None: gone)."""
    (pipeline, status, created, started, finished, error, failed_step, key, correlation, trace, done) = fields
    if status is None:
        return None

    def optional(value: Any) -> str | None:
        return text(value) if value not in (None, b"") else None

    return RunSummary(
        run_id=run_id,
        pipeline=text(pipeline),
        state=cast(RunState, text(status)),
        created_at_ms=int(created),
        started_at_ms=int(started) if started is not None else None,
        finished_at_ms=int(finished) if finished is not None else None,
        error=optional(error),
        failed_step=optional(failed_step),
        idempotency_key=optional(key),
        correlation_id=optional(correlation),
        trace_id=optional(trace),
        steps_done=int(done) if done is not None else 0,
        steps_total=int(steps_total),
    )


def parse_cursor(cursor: str | None) -> tuple[str, int]:
    """A runs page's cursor as (highest creation time, index entries at it passed); None: the newest.

    Raises:
        InvalidQuery: Not a cursor this store handed out.
    """
    if cursor is None:
        return "+inf", 0
    top, _, passed = cursor.partition("~")
    if _CURSOR_TOP.fullmatch(top) is None or _CURSOR_PASSED.fullmatch(passed) is None:
        raise InvalidQuery(f"{cursor!r} is not a cursor of a runs page: pass the one the previous page returned.")
    return top, int(passed)


def step_logs(reply: Any) -> int:
    """``step_logs.lua``: how many attempts' logs the step keeps (0: none kept)."""
    return int(reply)


def run_status(record: dict[bytes, bytes], steps: dict[bytes, bytes], reruns: Sequence[bytes] = ()) -> RunStatus | None:
    """A run from its hash, its steps hash and its re-runs (``get_run``), or None when the run is unknown."""
    if not record:
        return None

    def field(name: str) -> str | None:
        value = record.get(name.encode())
        return value.decode() if value not in (None, b"") else None

    def number(name: str) -> int | None:
        value = field(name)
        return int(value) if value is not None else None

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
                worker=data.get("w") or None,
                history=history_of(data.get("h")),
            )
        )
    step_list.sort(key=lambda s: [int(part) for part in s.node.split(".")])
    return RunStatus(
        run_id=field("id") or "",
        pipeline=field("pipeline") or "",
        state=cast(RunState, field("status")),
        created_at_ms=number("created_at") or 0,
        started_at_ms=number("started_at"),
        finished_at_ms=number("finished_at"),
        result_json=field("result"),
        error=field("error"),
        failed_step=field("failed_step"),
        correlation_id=field("correlation_id"),
        trace_id=field("trace_id"),
        trace_sampled=field("trace_sampled") != "0",  # a run created before the flag was kept: as sampled
        steps=tuple(step_list),
        input_json=field("input"),
        registered=field("registered") == "1",
        rerun_of=field("rerun_of"),
        reruns=tuple(text(run_id) for run_id in reruns),
    )
