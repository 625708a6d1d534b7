"""Group commit: threads that ask at once share one commit; a failed commit is the failing thread's alone."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from pipelines.store import group_commit
from pipelines.store.group_commit import NOT_DONE, GroupCommit

TIMEOUT_S = 10


class Queued:
    """Counts the threads that wait to be woken (queued behind the commit under way), so that a test
    awaits them instead of polling the queue."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._changed = threading.Condition()
        queued = self

        class Watched(group_commit._Request[object, object]):
            def __init__(self, item: object) -> None:
                super().__init__(item)
                self.woken = _Announcing(self.woken, queued)  # type: ignore[assignment]

        monkeypatch.setattr(group_commit, "_Request", Watched)

    def arrived(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, count: int) -> None:
        """Return once ``count`` threads wait; fail after ``TIMEOUT_S``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.count >= count, TIMEOUT_S):
                raise AssertionError(f"only {self.count} of {count} threads queued behind the commit")


class _Announcing:
    """A request's lock that tells :class:`Queued` when its thread starts waiting on it."""

    def __init__(self, lock: threading.Lock, queued: Queued) -> None:
        self._lock = lock
        self._queued = queued

    def acquire(self) -> bool:
        self._queued.arrived()
        return self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


def test_a_lone_caller_commits_its_own_item_at_once() -> None:
    commits: list[list[int]] = []

    def commit(items: Sequence[int]) -> list[int]:
        commits.append(list(items))
        return [item * 10 for item in items]

    together = GroupCommit(commit)

    assert [together.submit(1), together.submit(2)] == [10, 20]
    assert commits == [[1], [2]]


def test_threads_arriving_during_a_commit_share_the_next_one_and_each_gets_its_own_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queued = Queued(monkeypatch)
    first_commit_started, release_first = threading.Event(), threading.Event()
    commits: list[list[int]] = []

    def commit(items: Sequence[int]) -> list[int]:
        commits.append(list(items))
        if len(commits) == 1:
            first_commit_started.set()
            assert release_first.wait(10)
        return [item * 10 for item in items]

    together = GroupCommit(commit)
    results: dict[int, object] = {}

    def submit(item: int) -> None:
        results[item] = together.submit(item)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    assert first_commit_started.wait(10)
    others = [threading.Thread(target=submit, args=(item,)) for item in range(1, 6)]
    for thread in others:
        thread.start()
    queued.wait_for(5)  # all five queued behind the commit under way
    release_first.set()
    for thread in [first, *others]:
        thread.join(10)

    assert results == {item: item * 10 for item in range(6)}
    assert commits[0] == [0]
    assert sorted(commits[1]) == [1, 2, 3, 4, 5]
    assert len(commits) == 2


def test_a_commit_that_raises_raises_in_its_thread_and_the_others_are_told_to_do_theirs_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queued = Queued(monkeypatch)
    started, release = threading.Event(), threading.Event()
    calls = 0

    def commit(items: Sequence[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            started.set()
            assert release.wait(10)
            return list(items)
        raise ConnectionError("broken")

    together = GroupCommit(commit)
    outcomes: dict[str, object] = {}

    def submit(item: str) -> None:
        try:
            outcomes[item] = together.submit(item)
        except ConnectionError as e:
            outcomes[item] = e

    blocker = threading.Thread(target=submit, args=("first",))
    blocker.start()
    assert started.wait(10)
    waiting = [threading.Thread(target=submit, args=(name,)) for name in ("a", "b", "c")]
    for thread in waiting:
        thread.start()
    queued.wait_for(3)
    release.set()
    for thread in [blocker, *waiting]:
        thread.join(10)

    assert outcomes["first"] == "first"
    errors = [name for name in "abc" if isinstance(outcomes[name], ConnectionError)]
    assert len(errors) == 1  # the thread that made the failed commit
    assert [outcomes[name] for name in "abc" if name not in errors] == [NOT_DONE, NOT_DONE]
    with pytest.raises(ConnectionError):
        together.submit("later")  # nothing is left committing: the next caller commits (and fails) alone


def test_a_thread_interrupted_while_waiting_leaves_nobody_waiting_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()

    def commit(items: Sequence[str]) -> list[str]:
        if "first" in items:
            started.set()
            assert release.wait(10)
        return list(items)

    class InterruptedRequest(group_commit._Request[str, str]):
        """A Ctrl-C in the waiting thread, as the interpreter raises it: from inside its wait."""

        def __init__(self, item: str) -> None:
            super().__init__(item)
            if item == "interrupted":
                self.woken = _Interrupting()  # type: ignore[assignment]

    monkeypatch.setattr(group_commit, "_Request", InterruptedRequest)
    together = GroupCommit(commit)
    blocker = threading.Thread(target=together.submit, args=("first",))
    blocker.start()
    assert started.wait(10)
    with pytest.raises(KeyboardInterrupt):
        together.submit("interrupted")
    release.set()
    blocker.join(10)
    after: list[object] = []
    later = threading.Thread(target=lambda: after.append(together.submit("after")), daemon=True)
    later.start()
    later.join(10)

    assert after == ["after"]  # not left waiting for the interrupted thread's turn to commit


class _Interrupting:
    def acquire(self) -> bool:
        raise KeyboardInterrupt

    def release(self) -> None:
        """Nothing waits on it."""
