"""A store whose Redis does not answer is made all the same (a worker boots), and each call then says
so as ``StoreUnavailable``, naming the URL without its password: one Redis, a Redis Cluster (whose
client redis-py would otherwise connect, and fail, when it is made) and a primary behind Sentinel.
"""

from __future__ import annotations

import pytest

from pipelines.errors import StoreUnavailable
from pipelines.store import RedisRunStore


@pytest.mark.parametrize(
    ("url", "reported"),
    [
        ("redis://:s3cret@127.0.0.1:1/0", r"Redis at redis://:\*\*\*@127.0.0.1:1/0 does not answer"),
        (
            "redis+cluster://:s3cret@127.0.0.1:1",
            r"Redis Cluster at redis\+cluster://:\*\*\*@127.0.0.1:1 does not answer",
        ),
        (
            "redis+sentinel://:s3cret@127.0.0.1:1/main/0",
            r"Redis at redis\+sentinel://:\*\*\*@127.0.0.1:1/main/0: no sentinel named there answered",
        ),
    ],
)
def test_a_redis_that_does_not_answer_is_reported_without_the_password(url: str, reported: str) -> None:
    unreachable = RedisRunStore(url=url, namespace="t-down", retention_s=60)  # made: nothing connects yet

    with pytest.raises(StoreUnavailable, match=reported) as raised:
        unreachable.claim_step("r", "0", attempt=1, lease_ms=1)
    assert "s3cret" not in str(raised.value)
    unreachable.close()
