"""StoreLifecycle, on every backend, and what an unreachable Redis answers."""

from __future__ import annotations

import pytest

from pipelines.errors import StoreUnavailable
from pipelines.store import RedisRunStore, StoreLifecycle


def test_a_store_answers_a_ping_and_closes_more_than_once(store: StoreLifecycle) -> None:
    store.ping()

    store.close()
    store.close()


def test_a_redis_that_does_not_answer_is_reported_without_the_password() -> None:
    unreachable = RedisRunStore(url="redis://:s3cret@127.0.0.1:1/0", namespace="t-down", retention_s=60)

    with pytest.raises(StoreUnavailable, match=r"Redis at redis://:\*\*\*@127.0.0.1:1/0 does not answer") as raised:
        unreachable.ping()

    assert "s3cret" not in str(raised.value)
