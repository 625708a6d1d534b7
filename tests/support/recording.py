"""What actors were called with, recorded across worker threads and awaited by count (never by sleeping)."""

from __future__ import annotations

import threading
from typing import Any

#: Longest a test waits for calls it expects, in seconds.
TIMEOUT_S = 30


class Recorded:
    """Values that actors add (from any worker thread), awaited by count."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._changed = threading.Condition()

    def add(self, value: Any) -> None:
        with self._changed:
            self.values.append(value)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = TIMEOUT_S) -> list[Any]:
        """The values, in the order they were added, once there are ``count`` (AssertionError after ``timeout_s``)."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.values) >= count, timeout_s), self.values
            return list(self.values)
