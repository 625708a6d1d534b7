"""How a Redis Cluster run store spreads runs over its shards.

    python -m bench.shards redis+cluster://127.0.0.1:7000 [--runs 10000] [--callers 1] [--wait-for-replicas 0]

Creates ``--runs`` three-step chain runs (and claims and completes their first step) in a namespace of
its own, then prints, per primary: its keys, the commands it served meanwhile (``INFO commandstats``)
and the memory the runs take (``used_memory``), keys and commands also as ratios to an even share; and
how many runs per second the store took (each run created, its first step claimed and completed, one
call at a time in each of ``--callers`` processes, as that many producers and workers would). With
``--wait-for-replicas N`` the store waits for N replicas after each creation and completion, as
``store.wait_for_replicas`` makes it: compare the runs/s with and without. The namespace is deleted
afterwards.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
import uuid
from collections.abc import Callable, Mapping

import redis
from redis.cluster import RedisCluster

from pipelines.store import NewRun, RedisRunStore
from pipelines.store.redis_cluster import cluster_client
from pipelines.store.roles import RunSteps

BATCH = 500


def _commands(node: redis.Redis) -> int:
    stats: Mapping[str, Mapping[str, int]] = node.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


def _primaries(client: RedisCluster) -> dict[str, redis.Redis]:
    return {f"{n.host}:{n.port}": n.redis_connection for n in client.get_primaries() if n.redis_connection is not None}


def drive(store: RunSteps, count: int) -> None:
    """Create ``count`` three-step chain runs in batches, claiming and completing each one's first step:
    one caller, one call at a time."""
    for first in range(0, count, BATCH):
        runs = [
            NewRun(
                run_id=uuid.uuid4().hex,
                pipeline="chain3",
                steps=[("0", "a"), ("1", "b"), ("2", "c")],
                starts={"1": '[{"node": "1"}]', "2": '[{"node": "2"}]'},
                entries={"1": ["1"], "2": ["2"]},
            )
            for _ in range(first, min(first + BATCH, count))
        ]
        store.create_runs(runs)
        for run in runs:
            store.claim_step(run.run_id, "0", attempt=1, lease_ms=60_000)
            store.complete_step(run.run_id, "0", (), "1")


def _drive(url: str, namespace: str, wait_for_replicas: int, count: int) -> None:
    """:func:`drive` on a store of its own: one caller process."""
    store = RedisRunStore(url=url, namespace=namespace, retention_s=3600, wait_for_replicas=wait_for_replicas)
    try:
        drive(store, count)
        short = store.replica_wait.short if store.replica_wait is not None else 0
        if short:
            print(f"a caller: {short} write(s) acknowledged by fewer replicas than asked within the wait")
    finally:
        store.close()


def in_callers(target: Callable[..., None], args: tuple[object, ...], runs: int, callers: int) -> float:
    """``target(*args, share)`` in each of ``callers`` processes, their shares adding up to ``runs``; the
    seconds from the first start to the last end.

    Raises:
        SystemExit: A caller failed (its traceback is above).
    """
    shares = [runs // callers + (k < runs % callers) for k in range(callers)]
    processes = [multiprocessing.Process(target=target, args=(*args, share)) for share in shares if share]
    started = time.perf_counter()
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise SystemExit("a caller failed: see its traceback above")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the cluster's redis+cluster:// URL")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--callers", type=int, default=1, help="processes sharing the runs (default 1)")
    parser.add_argument(
        "--wait-for-replicas", type=int, default=0, help="as store.wait_for_replicas (default 0: no wait)"
    )
    options = parser.parse_args()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    store = RedisRunStore(url=options.url, namespace=namespace, retention_s=3600)
    client = cluster_client(options.url, timeout_s=5)
    client.ping()
    primaries = _primaries(client)
    before = {name: _commands(node) for name, node in primaries.items()}
    memory_before = {name: int(node.info("memory")["used_memory"]) for name, node in primaries.items()}
    try:
        elapsed = in_callers(_drive, (options.url, namespace, options.wait_for_replicas), options.runs, options.callers)
        memory = {
            name: int(node.info("memory")["used_memory"]) - memory_before[name] for name, node in primaries.items()
        }
        keys = {
            name: sum(1 for _ in node.scan_iter(match=f"{namespace}:*", count=1000)) for name, node in primaries.items()
        }
        commands = {name: _commands(node) - before[name] for name, node in primaries.items()}
    finally:
        store.delete_namespace()
        store.close()
        client.close()
    print(
        f"{options.runs} runs over {len(primaries)} primaries in {elapsed:.1f} s ({options.runs / elapsed:.0f} runs/s "
        f"created, claimed and completed one call at a time by each of {options.callers} caller(s), waiting for "
        f"{options.wait_for_replicas} replica(s)); ratio: share / even share"
    )
    print(f"{'primary':<22}{'keys':>10}{'ratio':>8}{'commands':>12}{'ratio':>8}{'memory MB':>11}")
    even_keys, even_commands = sum(keys.values()) / len(keys), sum(commands.values()) / len(commands)
    for name in sorted(primaries):
        print(
            f"{name:<22}{keys[name]:>10}{keys[name] / even_keys:>8.2f}"
            f"{commands[name]:>12}{commands[name] / even_commands:>8.2f}{memory[name] / 1e6:>11.1f}"
        )


if __name__ == "__main__":
    main()
