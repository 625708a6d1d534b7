"""A worker process's holds: renewed together while held, marked lost when another worker claimed them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pipelines.config.sections import StoreConfig
from pipelines.handling.holds import Holds
from pipelines.store import NewRun, RunStore, make_store
from tests.support.backends import STORE_KINDS
from tests.support.housekeeping import delete_store, fresh_namespace

LEASE_S = 2.0
#: The lease of the first claims, lapsed long before two renewals have passed.
SHORT_MS = 300


@pytest.fixture(params=sorted(STORE_KINDS))
def store(request: pytest.FixtureRequest) -> Iterator[RunStore]:
    if STORE_KINDS[request.param].needs_services:
        request.getfixturevalue("services")
    namespace = fresh_namespace()
    made = make_store(StoreConfig(**STORE_KINDS[request.param].settings(namespace)), namespace=namespace)
    yield made
    delete_store(made)
    made.close()


def started(store: RunStore) -> str:
    run = NewRun(run_id=f"r{time.monotonic_ns()}", pipeline="p", steps=[("0.0", "a")], starts={}, entries={})
    store.create_run(run)
    return run.run_id


def test_the_heartbeat_renews_what_is_held_each_quarter_lease_in_one_round_trip(store: RunStore) -> None:
    holds = Holds(store=store, lease_s=LEASE_S)
    runs = [started(store) for _ in range(3)]
    held = [
        holds.step(run_id, "0.0", store.claim_step(run_id, "0.0", attempt=1, lease_ms=2000).attempt) for run_id in runs
    ]
    store.claim_key("order-1", holder="h1", lease_ms=2000)
    key = holds.key("order-1", "h1")
    first_end = held[0].lease_end

    deadline = time.monotonic() + 10
    while holds.renewals < 2:
        assert time.monotonic() < deadline, "the heartbeat did not renew"
        time.sleep(holds.interval_s / 4)
    for hold in [*held, key]:
        holds.release(hold)

    assert held[0].lease_end > first_end
    assert not any(hold.lost.is_set() for hold in [*held, key])
    # Two renewals take half a lease at least: past the first claims' short leases, held only by renewal.
    copies = [store.claim_step(run_id, "0.0", attempt=1, lease_ms=2000) for run_id in runs]
    assert {copy.kind for copy in copies} == {"busy"}
    assert store.claim_key("order-1", holder="h2", lease_ms=2000)[0] == "busy"


def test_a_hold_claimed_again_elsewhere_is_marked_lost_and_no_longer_renewed(store: RunStore) -> None:
    holds = Holds(store=store, lease_s=LEASE_S)
    run_id = started(store)
    mine = holds.step(run_id, "0.0", store.claim_step(run_id, "0.0", attempt=1, lease_ms=1).attempt)
    deadline = time.monotonic() + 10
    while store.claim_step(run_id, "0.0", attempt=1, lease_ms=60_000).kind != "run":  # another worker, once it lapsed
        assert time.monotonic() < deadline

    holds.renew()

    assert mine.lost.is_set()
    holds.release(mine)
