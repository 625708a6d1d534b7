"""How many runs one run store server takes, and the room each run takes in it: PostgreSQL or Redis.

    python -m bench.primary [URL] [--runs 10000] [--callers 1]

The runs of ``bench.shards``, on one server instead of a Redis Cluster: each a three-step chain created,
its first step claimed and completed, one call at a time in each of ``--callers`` processes. ``URL`` is
a PostgreSQL URL (``BENCH_POSTGRES_URL`` by default), the store's tables in a schema of their own; or a
Redis URL, the store's keys in a namespace of their own. Prints the runs per second and the bytes each
run takes: on disk for PostgreSQL (``pg_total_relation_size`` of the schema's tables, their indexes and
TOAST included), in memory for Redis (``used_memory``; other clients of the same Redis count too). The
schema or the namespace is dropped afterwards.
"""

from __future__ import annotations

import argparse
import uuid

import redis

from bench import postgres
from bench.shards import drive, in_callers
from pipelines.config.urls import is_postgres_url
from pipelines.store import RedisRunStore
from pipelines.store.postgres import PostgresRunStore

#: The namespace of the PostgreSQL store's runs (its schema is the run's own).
NAMESPACE = "bench"


def _store(url: str, place: str) -> PostgresRunStore | RedisRunStore:
    """The store at ``url``: in schema ``place`` on PostgreSQL, in namespace ``place`` on Redis."""
    if is_postgres_url(url):
        return PostgresRunStore(url=url, namespace=NAMESPACE, retention_s=3600, schema=place)
    return RedisRunStore(url=url, namespace=place, retention_s=3600)


def _drive(url: str, place: str, count: int) -> None:
    """:func:`bench.shards.drive` on a store of its own: one caller process."""
    store = _store(url, place)
    try:
        drive(store, count)
    finally:
        store.close()


def _bytes(url: str, place: str) -> int:
    """Bytes the store takes now: its tables on disk (PostgreSQL), or all of Redis's memory."""
    if is_postgres_url(url):
        return postgres.schema_bytes(place, url)
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default=postgres.POSTGRES_URL, help="postgresql:// or redis:// URL")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--callers", type=int, default=1, help="processes sharing the runs (default 1)")
    options = parser.parse_args()
    on_postgres = is_postgres_url(options.url)
    place = postgres.new_schema() if on_postgres else f"bench-{uuid.uuid4().hex[:8]}"
    store = _store(options.url, place)
    try:
        if isinstance(store, PostgresRunStore):
            store.migrate()  # the empty tables are there before the first reading
        before = _bytes(options.url, place)
        elapsed = in_callers(_drive, (options.url, place), options.runs, options.callers)
        taken = _bytes(options.url, place) - before
    finally:
        if isinstance(store, PostgresRunStore):
            store.close()
            postgres.drop_schema(place, options.url)
        else:
            store.delete_namespace()
            store.close()
    where = "on disk, the schema's tables" if on_postgres else "in memory, used_memory"
    print(
        f"{options.runs} runs in {elapsed:.1f} s: {options.runs / elapsed:.0f} runs/s created, claimed and completed "
        f"one call at a time by each of {options.callers} caller(s); {taken / options.runs:.0f} bytes per run ({where})"
    )


if __name__ == "__main__":
    main()
