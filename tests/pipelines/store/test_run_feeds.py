"""RunFeeds, on every backend: one subscription hears the changes of the runs it follows, and only those."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipelines.store import NewRun, RunStore
from pipelines.store.base import RunFeed

NewChord = Callable[..., NewRun]
LEASE_MS = 60_000
#: Longest a change may take to arrive (a deadline, not a measurement).
ARRIVAL_S = 10.0


def _changes(feed: RunFeed, quiet_s: float = 0.2) -> list[str]:
    """Every change the feed reports until it has been quiet for ``quiet_s`` (subscribe replies are skipped)."""
    seen: list[str] = []
    deadline = time.monotonic() + ARRIVAL_S
    while time.monotonic() < deadline:
        run_id = feed.next_change(quiet_s)
        if run_id is None and seen:
            break
        if run_id is not None:
            seen.append(run_id)
    return seen


def test_a_feed_hears_each_followed_run_change_and_nothing_of_the_others(store: RunStore, new_chord: NewChord) -> None:
    followed, other, dropped = new_chord(1), new_chord(1), new_chord(1)
    for run in (followed, other, dropped):
        store.create_run(run)
    feed = store.run_feed()
    try:
        feed.follow(followed.run_id)
        feed.follow(dropped.run_id)
        feed.unfollow(dropped.run_id)

        store.claim_step(other.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
        store.claim_step(dropped.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
        store.claim_step(followed.run_id, "0.0.0", attempt=1, lease_ms=LEASE_MS)
        store.cancel_run(followed.run_id)

        assert set(_changes(feed)) == {followed.run_id}
        assert feed.next_change(0.1) is None
    finally:
        feed.close()


def test_a_feed_following_nothing_answers_at_once(store: RunStore) -> None:
    feed = store.run_feed()
    try:
        assert feed.next_change(0.0) is None
    finally:
        feed.close()
