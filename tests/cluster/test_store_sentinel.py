"""The run store on a Redis primary with one replica, found through three Redis Sentinels
(``redis+sentinel://``): the store's whole contract, and a failover. A store that waits for its replica
(``store.wait_for_replicas = 1``) loses nothing it returned before the primary's SIGKILL: every run
created and every step completed is on the promoted replica, and the store serves again once the
sentinels have promoted it. Figures are printed (``-s``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from pipelines.errors import StoreUnavailable
from pipelines.store import NewRun, RedisRunStore
from tests.pipelines.store.conftest import chord_maker
from tests.pipelines.store.test_job_leases import *  # noqa: F403
from tests.pipelines.store.test_key_claims import *  # noqa: F403
from tests.pipelines.store.test_message_counts import *  # noqa: F403
from tests.pipelines.store.test_once_marks import *  # noqa: F403
from tests.pipelines.store.test_rate_slots import *  # noqa: F403
from tests.pipelines.store.test_run_deadlines import *  # noqa: F403
from tests.pipelines.store.test_run_feeds import *  # noqa: F403
from tests.pipelines.store.test_run_index import *  # noqa: F403
from tests.pipelines.store.test_run_plans import *  # noqa: F403
from tests.pipelines.store.test_run_steps import *  # noqa: F403
from tests.pipelines.store.test_run_views import *  # noqa: F403
from tests.pipelines.store.test_schedule_ticks import *  # noqa: F403
from tests.pipelines.store.test_stall_checks import *  # noqa: F403
from tests.pipelines.store.test_step_logs import *  # noqa: F403
from tests.pipelines.store.test_step_progress import *  # noqa: F403
from tests.pipelines.store.test_step_replays import *  # noqa: F403
from tests.pipelines.store.test_store_lifecycle import *  # noqa: F403
from tests.support.backends import STORE_KINDS, StoreKind
from tests.support.cluster.local_sentinel import LocalSentinel
from tests.support.cluster.local_slot import wait_for
from tests.support.housekeeping import fresh_namespace

pytestmark = pytest.mark.cluster

RETENTION_S = 3600
#: Longest the store may take to serve again after the primary's loss.
SERVE_AGAIN_S = 45.0


@pytest.fixture
def store_backend(redis_sentinel: LocalSentinel) -> Iterator[str]:
    """The store kind's name, for the contract's tests that make a store of their own from ``STORE_KINDS``."""
    STORE_KINDS["sentinel"] = StoreKind(url=redis_sentinel.url, partner=None, needs_services=False)
    yield "sentinel"
    del STORE_KINDS["sentinel"]


@pytest.fixture
def store_namespace() -> str:
    return fresh_namespace()


@pytest.fixture
def store(redis_sentinel: LocalSentinel, store_namespace: str) -> Iterator[RedisRunStore]:
    made = RedisRunStore(url=redis_sentinel.url, namespace=store_namespace, retention_s=RETENTION_S)
    yield made
    made.delete_namespace()
    made.close()


@pytest.fixture
def script_store(store: RedisRunStore) -> RedisRunStore:
    """The store behind Sentinel runs the Redis store's scripts: the tests of what only they do run on it too."""
    return store


@pytest.fixture
def new_chord(store_namespace: str) -> Callable[..., NewRun]:
    return chord_maker(store_namespace)


def _one_step_runs(count: int) -> list[NewRun]:
    return [
        NewRun(run_id=uuid.uuid4().hex, pipeline="one", steps=[("0", "a")], starts={}, entries={}) for _ in range(count)
    ]


def test_what_a_store_waiting_for_its_replica_returned_survives_the_primarys_sigkill(
    redis_sentinel: LocalSentinel, store_namespace: str
) -> None:
    store = RedisRunStore(
        url=redis_sentinel.url,
        namespace=store_namespace,
        retention_s=RETENTION_S,
        wait_for_replicas=1,
        replica_wait_ms=1000,
    )
    try:
        runs = _one_step_runs(40)
        store.create_runs(runs)
        finished, started = runs[:20], runs[20:]
        for run in finished:
            assert store.claim_step(run.run_id, "0", attempt=1, lease_ms=60_000).kind == "run"
            assert store.complete_step(run.run_id, "0", (), '"done"').kind == "done"
        assert store.replica_wait is not None
        assert store.replica_wait.short == 0  # every write above was on the replica when the call returned

        former = redis_sentinel.primary_port()
        redis_sentinel.kill(former)
        killed_at = time.monotonic()
        unavailable = 0

        def serves() -> bool:
            nonlocal unavailable
            try:
                store.create_runs(_one_step_runs(1))
            except StoreUnavailable:
                unavailable += 1
                return False
            return True

        wait_for(serves, "the store to serve again", SERVE_AGAIN_S, 0.2)
        served_s = time.monotonic() - killed_at
        promoted = redis_sentinel.wait_promoted(former)
        promoted_s = time.monotonic() - killed_at

        assert promoted != former
        assert [store.run_state(run.run_id) for run in finished] == ["succeeded"] * len(finished)
        assert [store.run_state(run.run_id) for run in started] == ["pending"] * len(started)
        # The promoted primary has no replica until the former one is back: what it takes now stands on
        # it alone, and is counted.
        assert store.replica_wait.short >= 1
        print(
            f"figures: primary on port {former} SIGKILLed; port {promoted} promoted (seen by {promoted_s:.1f} s); "
            f"the store served again after {served_s:.1f} s ({unavailable} calls refused as StoreUnavailable "
            f"before); {len(runs)}/{len(runs)} runs and {len(finished)}/{len(finished)} completions returned before "
            "the kill were on the promoted replica"
        )
    finally:
        redis_sentinel.ensure_whole()
        store.delete_namespace()
        store.close()
