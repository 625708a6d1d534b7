"""OnceMarks, on every backend: the first mark of a key wins until it is forgotten."""

from __future__ import annotations

from pipelines.store import OnceMarks


def test_only_the_first_mark_of_a_key_is_new(store: OnceMarks) -> None:
    assert store.mark_once("replay:dl-1", retention_s=60) is True
    assert store.mark_once("replay:dl-1", retention_s=60) is False
    assert store.mark_once("replay:dl-2", retention_s=60) is True


def test_a_forgotten_mark_can_be_made_again(store: OnceMarks) -> None:
    store.mark_once("catch-up:job:1", retention_s=60)

    store.forget_once("catch-up:job:1")
    store.forget_once("never-marked")

    assert store.mark_once("catch-up:job:1", retention_s=60) is True
    assert store.mark_once("never-marked", retention_s=60) is True


def test_a_mark_can_be_looked_at_without_making_it(store: OnceMarks) -> None:
    assert store.is_marked("dead-letter:q:1") is False
    assert store.is_marked("dead-letter:q:1") is False  # looking does not mark

    store.mark_once("dead-letter:q:1", retention_s=60)

    assert store.is_marked("dead-letter:q:1") is True
    store.forget_once("dead-letter:q:1")
    assert store.is_marked("dead-letter:q:1") is False
