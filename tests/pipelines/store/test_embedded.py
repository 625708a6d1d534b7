"""The embedded store (``memory://``): the Redis store's scripts on a server of its own, in process."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from pipelines.config.sections import StoreConfig
from pipelines.store import EMBEDDED_URL, NewRun, RedisRunStore, embedded_store, make_store
from pipelines.wire.steps import Frame

NewChord = Callable[..., NewRun]


def test_memory_url_makes_an_embedded_store() -> None:
    store = make_store(StoreConfig(url=EMBEDDED_URL), namespace="unit")

    assert isinstance(store, RedisRunStore)
    store.ping()
    store.close()


def test_the_embedded_store_runs_a_chord_and_wakes_a_waiter_without_any_socket(
    monkeypatch: pytest.MonkeyPatch, new_chord: NewChord
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the embedded store opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    store = embedded_store(namespace="unit", retention_s=60)
    run = new_chord(1)
    store.create_run(run)
    store.claim_step(run.run_id, "0.0.0", attempt=1, lease_ms=60_000)
    store.complete_step(run.run_id, "0.0.0", [Frame("p", "0.0", 0, 1), Frame("c", "0", 0, 2)], "1")
    store.claim_step(run.run_id, "0.1", attempt=1, lease_ms=60_000)

    finisher = threading.Timer(0.1, store.complete_step, args=(run.run_id, "0.1", [Frame("c", "0", 1, 2)], "2"))
    finisher.start()
    status = store.wait_run(run.run_id, 30)
    finisher.join()

    assert status is not None
    assert (status.state, status.result) == ("succeeded", 2)


def test_each_embedded_store_has_a_server_of_its_own(new_chord: NewChord, store_namespace: str) -> None:
    first, second = (embedded_store(namespace=store_namespace, retention_s=60) for _ in range(2))
    run = new_chord(1, key="shared-key")

    first.create_run(run)

    assert first.run_state(run.run_id) == "pending"
    assert second.run_state(run.run_id) is None
    assert second.run_for_key("shared-key") is None
    assert second.recent_runs(10) == []


def test_a_process_on_a_real_redis_never_loads_the_in_process_server() -> None:
    probe = (
        "import sys\n"
        "from pipelines.config.sections import StoreConfig\n"
        "from pipelines.store import make_store\n"
        f"make_store(StoreConfig(url='redis://127.0.0.1:1/0'), namespace='t-{uuid.uuid4().hex[:6]}')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fakeredis', 'lupa')))\n"
    )

    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)

    assert loaded.stdout.strip() == "[]"
