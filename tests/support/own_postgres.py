"""A PostgreSQL 15 cluster of a test's own, on loopback on a free port, that the test may stop, start and
restart (the shared one at 5432 must not go down under the rest of the suite); or a primary and its
standby (:class:`OwnReplicatedPostgres`), whose primary the test may kill and whose standby it may promote.

``initdb`` and ``postgres`` refuse root, so both run as the ``postgres`` user; the cluster lives in a
directory of its own, trusts every local login, skips fsync, and is removed with :meth:`OwnPostgres.close`.
The server runs in the foreground as a process the suite records (an interrupted run stops it). Needs
root and the Debian package ``postgresql-15``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

BIN = Path(os.environ.get("PIPELINES_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
#: The OS user the cluster's programs run as.
OWNER = "postgres"
#: How long the server may take to accept logins after it was started, or to exit once told to, in seconds.
READY_TIMEOUT_S = 30.0
#: The suite's server settings: on loopback only, nothing flushed to disk (a test's data need not survive
#: a crash of the machine), commits that do not wait for a standby.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_connections": "200",
}
#: The standby's name, as the primary's ``synchronous_standby_names`` names it (its ``cluster_name`` is the
#: ``application_name`` its WAL receiver logs in with).
STANDBY = "standby"


def missing_binaries() -> str | None:
    """Why no cluster can be made here (root and PostgreSQL's programs are needed), or None."""
    if os.geteuid() != 0:
        return f"it runs initdb and postgres as the {OWNER} user: run the tests as root"
    absent = [name for name in ("initdb", "postgres", "pg_basebackup") if not (BIN / name).is_file()]
    if absent:
        return (
            f"{' and '.join(absent)} not found in {BIN}: install the Debian package postgresql-15, "
            "or set PIPELINES_TEST_POSTGRES_BIN to the directory of its programs"
        )
    return None


class OwnPostgres:
    """One cluster: :meth:`start`, :meth:`stop`, :meth:`url`, :meth:`sql`, :meth:`close` (which removes it).

    ``settings`` are the server's, on top of the suite's (``-c name=value``).
    """

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="own-postgres-"))
        self.data = self.dir / "data"
        self.settings = {**SETTINGS, **(settings or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, user: str = OWNER, database: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        """Make the cluster's files (``initdb``): logins trusted, the ``postgres`` superuser."""
        shutil.chown(self.dir, OWNER, OWNER)
        self._as_owner(
            str(BIN / "initdb"),
            *("--pgdata", str(self.data), "--username", OWNER, "--auth", "trust"),
            *("--encoding", "UTF8", "--locale", "C", "--no-sync"),
        )

    def clone(self, primary: OwnPostgres) -> None:
        """Make the cluster's files a standby of ``primary`` (``pg_basebackup -R``): it streams the primary's WAL."""
        shutil.chown(self.dir, OWNER, OWNER)
        self._as_owner(
            str(BIN / "pg_basebackup"),
            *("--pgdata", str(self.data), "--host", "127.0.0.1", "--port", str(primary.port), "--username", OWNER),
            *("--write-recovery-conf", "--wal-method", "stream", "--checkpoint", "fast", "--no-sync"),
        )

    def start(self) -> None:
        """Start the server and wait until it accepts logins."""
        with (self.dir / "server.log").open("ab") as log:
            self.process = start_process(
                [
                    *(str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir)),
                    *(arg for name, value in self.settings.items() for arg in ("-c", f"{name}={value}")),
                ],
                user=OWNER,
                group=OWNER,
                extra_groups=[],
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._accepts_logins():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL on port {self.port} did not start:\n{self.log()[-2000:]}")
            time.sleep(0.05)  # the server says nothing when it is ready: ask it

    def stop(self) -> None:
        """A fast shutdown (SIGINT, as ``pg_ctl stop -m fast``): every connection is closed, the server exits."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=READY_TIMEOUT_S)
        finally:
            stop_process(self.process, timeout_s=0)

    def kill(self) -> None:
        """SIGKILL to the server and every process of it, as the OOM killer or a crash would: nothing is flushed,
        no connection is closed cleanly, and the port refuses connections from then on."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=READY_TIMEOUT_S)
        stop_process(self.process, timeout_s=0)  # no longer recorded as the suite's

    def sql(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one statement as the superuser, outside a transaction; its rows (none if it returns none)."""
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement, params or None)
            return cursor.fetchall() if cursor.description is not None else []

    def log(self) -> str:
        return (self.dir / "server.log").read_text(errors="replace")

    def close(self) -> None:
        """Stop the server (killing it if it does not stop) and remove the cluster's directory."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.stop()
        if self.process is not None:
            stop_process(self.process, timeout_s=0)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accepts_logins(self) -> bool:
        try:
            psycopg.connect(self.url(), connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

    def _as_owner(self, *command: str) -> None:
        done = subprocess.run(
            command,
            user=OWNER,
            group=OWNER,
            extra_groups=[],
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed: {(done.stdout + done.stderr).strip()[-1500:]}")


class OwnReplicatedPostgres:
    """A primary and a standby that streams its WAL, each a cluster of its own on loopback.

    Replication is synchronous (``synchronous_standby_names`` names the standby, ``synchronous_commit=on``):
    a commit is answered once the standby has it, so a commit a client saw survives the primary. The
    store's :meth:`url` names both, primary first; libpq connects to the one that takes writes.
    """

    def __init__(self) -> None:
        self.primary = OwnPostgres({"synchronous_commit": "on", "synchronous_standby_names": STANDBY})
        self.standby = OwnPostgres({"cluster_name": STANDBY})

    def url(self, user: str = OWNER, database: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{cluster.port}" for cluster in (self.primary, self.standby))
        return f"postgresql://{user}@{hosts}/{database}?target_session_attrs=read-write"

    def start(self) -> None:
        """Make and start the primary, then the standby from its backup; return once replication is synchronous."""
        self.primary.init()
        self.primary.start()
        self.standby.clone(self.primary)
        self.standby.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.primary.sql("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the standby on port {self.standby.port} did not become synchronous within {READY_TIMEOUT_S} s:"
                    f"\n{self.standby.log()[-2000:]}"
                )
            time.sleep(0.05)  # the primary says nothing when the standby catches up: ask it

    def promote(self) -> None:
        """Promote the standby (``pg_promote``): it takes writes once this returns (within its wait, 60 s)."""
        [(promoted,)] = self.standby.sql("SELECT pg_promote(wait => true)")
        if not promoted:
            raise RuntimeError(
                f"the standby on port {self.standby.port} was not promoted:\n{self.standby.log()[-2000:]}"
            )

    def close(self) -> None:
        """Stop both servers and remove their directories."""
        self.standby.close()
        self.primary.close()
