"""JobLeases, on every backend: a long-running job's lease is opened once, renewed, closed or taken over."""

from __future__ import annotations

from pipelines.store import JobLeases

LEASE_MS = 60_000


def test_a_lease_opens_once_and_is_alive_while_it_lasts(store: JobLeases) -> None:
    assert store.open_lease("job-1", holder="worker-a", lease_ms=LEASE_MS, record='{"m": 1}') == "opened"
    assert store.open_lease("job-1", holder="worker-b", lease_ms=LEASE_MS, record='{"m": 2}') == "open"

    check = store.take_expired_lease("job-1")

    assert check.kind == "alive"
    assert 0 < check.wait_ms <= LEASE_MS


def test_renewing_keeps_the_leases_a_worker_holds_and_names_those_taken_over(store: JobLeases) -> None:
    store.open_lease("job-2", holder="worker-a", lease_ms=-1, record="{}")  # lapsed already
    store.open_lease("job-3", holder="worker-b", lease_ms=LEASE_MS, record="{}")

    lost = store.renew_leases({"job-2": "worker-a", "job-3": "worker-a", "job-gone": "worker-a"}, lease_ms=LEASE_MS)

    assert lost == ["job-3"]
    assert store.take_expired_lease("job-2").kind == "alive"
    assert store.renew_leases({}, lease_ms=LEASE_MS) == []


def test_a_lapsed_lease_is_taken_over_once_with_its_record(store: JobLeases) -> None:
    store.open_lease("job-4", holder="dead-worker", lease_ms=-1, record='{"message": "m-4"}')

    taken = store.take_expired_lease("job-4")
    again = store.take_expired_lease("job-4")

    assert (taken.kind, taken.record) == ("expired", '{"message": "m-4"}')
    assert again.kind == "gone"
    assert store.renew_leases({"job-4": "dead-worker"}, lease_ms=LEASE_MS) == ["job-4"]
    assert store.open_lease("job-4", holder="worker-b", lease_ms=LEASE_MS, record="{}") == "open"


def test_a_closed_lease_is_kept_ended_so_no_copy_of_the_job_runs_again(store: JobLeases) -> None:
    store.open_lease("job-5", holder="worker-a", lease_ms=LEASE_MS, record="{}")

    store.close_lease("job-5")
    store.close_lease("never-opened")

    assert store.take_expired_lease("job-5").kind == "gone"
    assert store.open_lease("job-5", holder="worker-b", lease_ms=LEASE_MS, record="{}") == "ended"
    assert store.renew_leases({"job-5": "worker-a"}, lease_ms=LEASE_MS) == []  # ended, not taken over
    assert store.open_lease("never-opened", holder="worker-b", lease_ms=LEASE_MS, record="{}") == "opened"
