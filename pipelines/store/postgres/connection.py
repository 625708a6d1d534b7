"""The PostgreSQL store's connections: a pool, the schema migrated at first use, and what PostgreSQL's
failures mean for the caller (each one it can act on becomes a :class:`~pipelines.errors.StoreUnavailable`
that says what to do: a refused login, a missing database, a user without rights, no answer).

A server that restarts closes every connection, the idle ones in the pool too, and a pooled connection learns it
only when it is next used. So the first call that finds its connection lost has the pool test the idle
ones and replace those that are gone, rather than each failing a call of its own; the calls that find
their connection alive pay nothing for it.

A failover is a restart whose server comes back elsewhere: a ``url`` that lists the primary and its standbys
with ``target_session_attrs=read-write`` connects to whichever takes writes. Until one does, the pool's tries
fail; it gives them up after ``RECONNECT_TIMEOUT_S``, and the next call starts afresh, so a late promotion is
found within about a second.

Every statement names its tables with the schema (no ``search_path`` is set), and no statement leaves state
on the session, so the store works through a pooler in transaction mode (PgBouncer) when told it is
``pooled``: psycopg then prepares nothing on the server (a prepared statement is a session's), and the
connections that ``LISTEN`` (a session's state too) go to ``listen_url``, directly to the primary.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors, pq
from psycopg.rows import DictRow, dict_row

from pipelines.config.masking import mask_url
from pipelines.errors import StoreUnavailable
from pipelines.store.postgres import schema as tables

#: Seconds to wait for PostgreSQL (a connection, or one from the pool) before reporting it unavailable.
CONNECT_TIMEOUT_S = 5.0
#: The most connections one store's pool opens (a worker's threads, its heartbeat and sweeps).
POOL_MAX_SIZE = 16
#: Seconds the pool tries again to replace a lost connection (after 1 s, then 2 s, each capped to this) before
#: it gives up; the next call that finds no connection starts a new try at once. psycopg_pool's default, 5
#: minutes, doubles the wait each time: a primary promoted 8 s after the old one died was used 5.6 s later.
RECONNECT_TIMEOUT_S = 2.0

Cursor = psycopg.Cursor[DictRow]


class Connections:
    """A pool of connections to the database ``url`` names, whose store lives in ``schema``."""

    def __init__(self, *, url: str, schema: str, pooled: bool = False, listen_url: str | None = None) -> None:
        self.url = url
        self.listen_url = listen_url or url
        self.schema = schema
        self._options: dict[str, Any] = {"prepare_threshold": None} if pooled else {}
        self.s = tables.quoted(schema)
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None
        self._lock = threading.Lock()
        self._checking = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection (autocommit), with the schema migrated the first time."""
        with self.answering():
            pool = self._pool or self._prepare()
            with pool.connection() as conn:
                try:
                    yield conn
                except psycopg.OperationalError:
                    if conn.broken:  # the connection is lost: the server restarted, most often
                        self._replace_lost(pool)
                    raise

    def _replace_lost(self, pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]]) -> None:
        """Test the pool's idle connections and replace those that are gone (one thread at a time)."""
        if not self._checking.acquire(blocking=False):
            return  # another thread is testing them already
        try:
            with suppress(psycopg.Error):  # a pool closed meanwhile: the call's error is the one to say
                pool.check()
        finally:
            self._checking.release()

    def ready(self) -> None:
        """The schema migrated (at the first call), before writing on a connection that is not the pool's."""
        with self.answering():
            if self._pool is None:
                self._prepare()

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """A cursor in a transaction of its own, committed when the block ends without an error.

        Its statements are pipelined: those whose rows are not read go out with the next one that is, and
        the last ones with the commit, so a decision costs a round trip per read and one for the commit.
        (``BEGIN`` and ``COMMIT`` are sent as statements: psycopg's own transaction block waits for an answer
        to ``BEGIN`` alone, and for an empty batch after the commit.)
        """
        with self.connection() as conn:
            try:
                with conn.pipeline(), conn.cursor(row_factory=dict_row) as cursor:
                    cursor.execute("BEGIN")
                    yield cursor
                    cursor.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise

    def _prepare(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        """Migrate the schema if it lags behind, then open a pool (again, after :meth:`close`); the pool."""
        with self._lock:
            if self._pool is not None:
                return self._pool
            # A connection of its own first: a wrong URL, user or database is reported at once, as it is.
            with self.direct(self.url, **self._options) as conn:
                version = tables.schema_version(conn, self.schema)
                if version > tables.LATEST:
                    raise StoreUnavailable(
                        f"The run store's tables in schema {self.schema} at {mask_url(self.url)} are at version "
                        f"{version}, newer than this release's {tables.LATEST}: upgrade rabbit-pipelines here too."
                    )
                if version < tables.LATEST:
                    tables.migrate(conn, self.schema)
            self._pool = psycopg_pool.ConnectionPool(
                self.url,
                min_size=1,
                max_size=POOL_MAX_SIZE,
                timeout=CONNECT_TIMEOUT_S,
                reconnect_timeout=RECONNECT_TIMEOUT_S,
                kwargs={"autocommit": True, "connect_timeout": int(CONNECT_TIMEOUT_S), **self._options},
                name="pipelines-store",
                open=False,
            )
            self._pool.open(wait=False)
            return self._pool

    def migrate(self) -> list[int]:
        """Apply the migrations the schema lacks; returns their versions (none: it was up to date)."""
        with self.answering(), self.direct(self.url, **self._options) as conn:
            return tables.migrate(conn, self.schema)

    @staticmethod
    def direct(url: str, **options: Any) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection of its own to ``url``, outside any pool (autocommit)."""
        return psycopg.connect(url, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT_S), **options)

    def dedicated(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection of its own, outside the pool, to ``listen_url`` (to LISTEN on: a session's state)."""
        with self.answering():
            if self._pool is None:  # the schema migrated first
                self._prepare()
            return self.direct(self.listen_url)

    def close(self) -> None:
        """Close the pool's connections; a later call opens a new pool, as a Redis client reconnects."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @contextmanager
    def answering(self) -> Iterator[None]:
        """PostgreSQL's failures as :class:`StoreUnavailable`, saying what to do; other errors pass."""
        try:
            yield
        except psycopg_pool.PoolTimeout:
            raise self._unavailable(self._why_no_connection()) from None
        except errors.InsufficientPrivilege as e:
            raise StoreUnavailable(
                f"PostgreSQL at {mask_url(self.url)} refused the store's user on schema {self.schema} "
                f"({_first_line(e)}). Run `pipelines store migrate` as a user who may create it, and grant "
                f"this one USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on its tables."
            ) from None
        except (errors.InvalidSchemaName, errors.UndefinedTable) as e:
            raise StoreUnavailable(
                f"PostgreSQL at {mask_url(self.url)} has no store tables in schema {self.schema} ({_first_line(e)}). "
                "Run `pipelines store migrate` (the store also creates them at its first call when it may)."
            ) from None
        except errors.TransactionRollback as e:  # a deadlock or serialization failure: nothing was written
            raise StoreUnavailable(
                f"PostgreSQL at {mask_url(self.url)} rolled back a run store transaction ({_first_line(e)}); "
                "nothing of it was written, and the operation is tried again later."
            ) from None
        except psycopg.OperationalError as e:
            raise self._unavailable(e) from None

    def _why_no_connection(self) -> psycopg.Error | str:
        """Why the pool has no connection: the error a connection of its own meets, if any."""
        try:
            psycopg.connect(self.url, connect_timeout=int(CONNECT_TIMEOUT_S)).close()
        except psycopg.Error as e:
            return e
        return f"no connection free in the pool within {CONNECT_TIMEOUT_S} s"

    def _unavailable(self, cause: psycopg.Error | str) -> StoreUnavailable:
        text = _first_line(cause)
        where = f"PostgreSQL at {mask_url(self.url)}"
        if "password authentication failed" in text or ("role" in text and "does not exist" in text):
            return StoreUnavailable(
                f"{where} refused the login ({text}). Check the user name and password in store.url "
                "(or PIPELINES_STORE__URL)."
            )
        if "database" in text and "does not exist" in text:
            return StoreUnavailable(
                f"{where} has no such database ({text}). Create it (`createdb`), or name one that exists in store.url."
            )
        if "read-only" in str(cause) or "hot standby" in str(cause):  # any host's line: libpq tries each
            return StoreUnavailable(
                f"{where} has no server that takes writes: those that answer are standbys ({text}). A failover is "
                "under way (the store goes on once a standby is promoted), or store.url names no primary."
            )
        return StoreUnavailable(
            f"{where} does not answer ({text}). Is it running? Try `docker compose up -d postgres`, or set "
            "store.url in config.toml."
        )


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a transaction a failed decision left open (a broken connection is the pool's to discard)."""
    if conn.closed or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with suppress(psycopg.Error):  # the connection broke: the server rolled the transaction back
        conn.execute("ROLLBACK")


def _first_line(error: BaseException | str) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
