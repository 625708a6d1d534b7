"""The roles about what the store keeps beside runs: marks, idempotency keys, job leases, schedule ticks,
rate-limit slots, worker processes' beats and message counts, and the store's connection (the table of
every role is in :mod:`pipelines.store.roles`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pipelines.store.base import (
    KeyClaimKind,
    LeaseCheck,
    LeaseOpenKind,
    SlotTake,
    WorkerBeat,
)
from pipelines.store.counts import ActorCounts, MinuteCounts


class OnceMarks(Protocol):
    """Marks that something happened once within a retention."""

    def mark_once(self, key: str, *, retention_s: int) -> bool:
        """True the first time ``key`` is marked within ``retention_s`` (replays, for instance)."""

    def forget_once(self, key: str) -> None:
        """Undo :meth:`mark_once` (what was marked did not happen after all)."""

    def is_marked(self, key: str) -> bool:
        """Whether ``key`` is marked (within the retention it was marked with)."""


class KeyClaims(Protocol):
    """Idempotency keys of standalone messages: claimed, finished or released."""

    def claim_key(self, key: str, *, holder: str, lease_ms: int) -> tuple[KeyClaimKind, int]:
        """Claim an idempotency key: ("run", 0), ("done", 0) or ("busy", ms the lease has left)."""

    def finish_key(self, key: str, *, retention_s: int) -> None:
        """Remember ``key`` as done for ``retention_s``: later messages with it are skipped."""

    def release_key(self, key: str, *, holder: str) -> None:
        """Give up a claim after a failure (if ``holder`` still holds it), so a retry may claim it."""


class JobLeases(Protocol):
    """Leases of long-running jobs: opened, renewed by their worker, closed, taken over by a watchdog."""

    def open_lease(self, lease_id: str, *, holder: str, lease_ms: int, record: str) -> LeaseOpenKind:
        """Open a long-running job's lease with its ``record`` (JSON), unless one is open or the job ended."""

    def renew_leases(self, holders: Mapping[str, str], *, lease_ms: int) -> list[str]:
        """Extend the leases (lease id → holder) this worker holds; returns those another holder took over
        (a lease closed meanwhile is not one of them)."""

    def close_lease(self, lease_id: str) -> None:
        """The job ended (or was handed to a retry): its watchdog has nothing left to do, and the lease is
        kept closed for the retention period so that no copy of the job's message runs it again."""

    def take_expired_lease(self, lease_id: str) -> LeaseCheck:
        """Take over a lease whose holder stopped renewing it (atomically: one watchdog wins)."""


class ScheduleTicks(Protocol):
    """Claims of scheduled jobs' ticks, so two schedulers run a tick once."""

    def claim_tick(self, job: str, tick_ms: int, *, retention_s: int) -> bool:
        """True for the first claim of a scheduled job's tick (which also becomes its last tick)."""

    def last_tick(self, job: str) -> int | None:
        """The latest tick of ``job`` that was claimed (epoch ms), if any."""

    def tick_claims(self, job: str, tick_ms: int) -> int:
        """How many times one tick was claimed (more than one: a second scheduler sent it too)."""

    def swept_through(self, job: str) -> int | None:
        """The tick up to which ``job``'s ticks were claimed or counted missed; None before its first claim."""

    def sweep_ticks(self, job: str, ticks: Sequence[int], *, cutoff_ms: int, through_ms: int) -> list[int]:
        """Of the cron's ``ticks`` after the sweep mark, those unclaimed up to ``cutoff_ms`` are missed:
        return them (each once, whoever sweeps) and move the mark to ``through_ms``."""


class RateSlots(Protocol):
    """Slots of rate limits: reserved by producers, taken by workers before the actor runs."""

    def reserve_slots(self, key: str, *, count: int, interval_ms: int) -> list[int]:
        """Reserve the next ``count`` slots ``interval_ms`` apart; returns the ms until each (rate limits)."""

    def take_slot(
        self, key: str, *, interval_ms: int, window_count: int, window_ms: int, held_ms: int, grace_ms: int
    ) -> SlotTake:
        """Take a slot for a message about to run, atomically, or reserve it the next free one.

        It runs now when fewer than ``window_count`` messages ran in the last ``window_ms`` and either
        the slot it holds (``held_ms``, epoch ms; 0 for none) is due within ``grace_ms`` or no reserved
        slot is ahead of it (then the next free slot moves ``interval_ms`` on). Otherwise it must wait:
        for the window alone when its held slot is due, else for the next free slot, which it reserves.
        """


class WorkerBeats(Protocol):
    """Worker processes' heartbeats: what each one reads and runs, kept a while after its last beat."""

    def beat(self, worker: WorkerBeat, *, keep_ms: int) -> None:
        """Record ``worker``'s heartbeat, kept ``keep_ms`` unless it beats again."""

    def forget_worker(self, worker_id: str) -> None:
        """Drop a worker's heartbeat (it stopped cleanly)."""

    def worker_beats(self) -> list[WorkerBeat]:
        """Each worker's latest heartbeat still kept, latest first (see :meth:`WorkerBeat.alive`)."""


class MessageCounts(Protocol):
    """Messages each actor processed, failed and dead-lettered, minute by minute (see ``store.counts``)."""

    def add_counts(self, minutes: Mapping[int, Mapping[str, ActorCounts]], *, keep_ms: int) -> None:
        """Add one process's counts, by minute (epoch ms of its start) and actor, to every other's; each
        minute written is kept ``keep_ms`` from now."""

    def message_counts(self, from_ms: int, to_ms: int) -> list[MinuteCounts]:
        """Every minute from the one ``from_ms`` falls in to the one ``to_ms`` falls in, oldest first, a day
        at most (the last), with each actor's counts (none for a minute not kept)."""


class StoreLifecycle(Protocol):
    """The store's connection: checked, and released at the end."""

    def ping(self) -> None:
        """Raise StoreUnavailable if the store does not answer."""

    def close(self) -> None:
        """Release connections."""
