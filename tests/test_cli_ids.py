"""Ids typed short: the CLI takes a unique prefix of a run's id (the console shows 12 characters), as git
and docker do, and lists the runs an ambiguous prefix names. The real commands on RabbitMQ and Redis."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from pipelines.wire.naming import run_id_for_key
from tests.test_cli import environment, pipelines


def keys_sharing_a_prefix(namespace: str) -> tuple[str, str, str]:
    """Two idempotency keys whose runs' ids begin with the same two characters, and those characters."""
    seen: dict[str, str] = {}
    for number in itertools.count():
        key = f"key-{number}"
        start = run_id_for_key(namespace, key)[:2]
        if start in seen:
            return seen[start], key, start
        seen[start] = key
    raise AssertionError("unreachable")


def test_status_and_cancel_take_a_unique_prefix_and_list_the_runs_an_ambiguous_one_names(
    namespaces: Callable[[], str],
) -> None:
    env = environment(namespaces())  # no worker: the runs stay pending
    first_key, second_key, shared = keys_sharing_a_prefix(env["PIPELINES_NAMESPACE"])
    ids = []
    for key in (first_key, second_key):
        started = pipelines(env, "run", "shard_report", "--arg", "day=2026-01-01", "--idempotency-key", key)
        assert started.returncode == 0, started.stderr
        ids.append(started.stdout.split()[0])

    shown = pipelines(env, "status", ids[0][:12])
    ambiguous = pipelines(env, "status", shared)
    cancelled = pipelines(env, "cancel", ids[1][:12])
    missing = pipelines(env, "status", "ffff0000ffff")

    assert shown.returncode == 0, shown.stderr
    assert f"run {ids[0]}  shard_report  pending" in shown.stdout
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.count("\n") == 1
    assert f"{shared!r} begins the ids of 2 runs ({', '.join(sorted(ids))}); give more of the id." in ambiguous.stderr
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, f"{ids[1]} cancelled")
    assert missing.returncode == 1
    assert "No run ffff0000ffff in the run store" in missing.stderr
