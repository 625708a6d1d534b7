"""Group commit: what several threads ask for at once, done in one round trip by one of them.

A thread that finds nobody committing commits everything queued so far, its own item included, and
hands each waiting thread its result; threads that arrive meanwhile queue up for the next commit,
which the first of them to wake up makes. No thread of its own, no timer: a lone caller commits at
once, alone, and concurrent callers share a round trip without waiting for a batch to fill.

If the commit raises, the thread that made it gets the error, and each other thread gets
``NOT_DONE``: it was not the one that failed, and must do its part itself (the caller's own path,
with its own error handling, as if it had never been combined).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


class NotDone:
    """The type of :data:`NOT_DONE`."""

    def __repr__(self) -> str:
        return "NOT_DONE"


NOT_DONE = NotDone()
"""What a thread gets whose item was in a commit that raised in another thread."""


class _Request(Generic[_T, _R]):
    """One thread's item; its lock is held until the thread is woken, with its result or to commit."""

    __slots__ = ("item", "lead", "result", "woken")

    def __init__(self, item: _T) -> None:
        self.item = item
        self.result: _R | NotDone = NOT_DONE
        self.lead = False
        self.woken = threading.Lock()
        self.woken.acquire()


class GroupCommit(Generic[_T, _R]):
    """Commits items with ``commit(items) -> results`` (one result per item, in order), combining the
    items of threads that ask at the same time (see the module docstring). Each waiting thread is
    woken once: with its result, or to make the next commit."""

    def __init__(self, commit: Callable[[Sequence[_T]], Sequence[_R]]) -> None:
        self._commit = commit
        self._lock = threading.Lock()
        self._queued: list[_Request[_T, _R]] = []
        self._committing = False

    def submit(self, item: _T) -> _R | NotDone:
        """``item``'s result, from this thread's commit or another's (``NOT_DONE``: see the module
        docstring); the commit's own error if this thread made it."""
        request: _Request[_T, _R] = _Request(item)
        with self._lock:
            wait = self._committing
            if wait:
                self._queued.append(request)
            self._committing = True
        if wait:
            try:
                request.woken.acquire()
                if not request.lead:
                    return request.result
            except BaseException:  # interrupted (Ctrl-C) while waiting: nobody may wait for this thread
                self._abandon(request)
                raise
        batch = [request]
        try:
            with self._lock:
                batch, self._queued = [request, *self._queued], []
            results = self._commit([queued.item for queued in batch])
            for queued, result in zip(batch, results, strict=True):
                queued.result = result
        finally:
            successor = self._next_committer()
            if successor is not None:
                successor.woken.release()
            for queued in batch[1:]:
                queued.woken.release()
        return request.result

    def _next_committer(self) -> _Request[_T, _R] | None:
        """The queued thread that makes the next commit (to wake), or None: nobody commits now."""
        with self._lock:
            successor = self._queued.pop(0) if self._queued else None
            if successor is not None:
                successor.lead = True
            self._committing = successor is not None
        return successor

    def _abandon(self, request: _Request[_T, _R]) -> None:
        """Take an interrupted thread's request out: out of the queue if it is still there; if it was
        to make the next commit, the turn passes on. (In a commit already, its result is dropped.)"""
        with self._lock:
            if request in self._queued:
                self._queued.remove(request)
                return
            if not request.lead:
                return
            request.lead = False
        successor = self._next_committer()
        if successor is not None:
            successor.woken.release()
