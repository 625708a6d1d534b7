"""The PostgreSQL the benchmark's second run store lives in: a schema of the run's own, its size on disk,
and the server processes that serve the benchmark's connections.

The server is shared (the test suite uses it too), so nothing here reads the whole server: sizes are the
schema's tables', CPU is that of the backends at the other end of the benchmark's own sockets.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit

import psutil
import psycopg

POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def new_schema() -> str:
    """A schema name no other run uses (the store creates it at its first call)."""
    return f"bench_{uuid.uuid4().hex[:8]}"


def drop_schema(schema: str, url: str = POSTGRES_URL) -> None:
    """Drop ``schema`` and every table in it (the store's connections must be closed first)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def schema_bytes(schema: str, url: str = POSTGRES_URL) -> int:
    """Bytes on disk of every table in ``schema``, its indexes and TOAST included (``pg_total_relation_size``)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            [schema],
        ).fetchone()
    return int(row[0]) if row is not None else 0


def backends_of(clients: list[psutil.Process], url: str = POSTGRES_URL) -> list[psutil.Process]:
    """The server processes at the other end of ``clients``' connections to PostgreSQL (one backend per
    connection; a client without one has none). Reading other users' sockets needs root."""
    port = urlsplit(url).port or 5432
    client_ports = set()
    for client in clients:
        try:
            sockets = client.net_connections("tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        client_ports |= {s.laddr.port for s in sockets if s.raddr and s.raddr.port == port}
    if not client_ports:
        return []
    backends = []
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "postgres":
            continue
        try:
            sockets = process.net_connections("tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if any(s.raddr and s.laddr.port == port and s.raddr.port in client_ports for s in sockets):
            backends.append(process)
    return backends
