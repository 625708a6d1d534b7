"""A PostgreSQL 15 cluster of a test's own, on loopback on a free port, that the test may stop, start and
restart (the shared one at 5432 must not go down under the rest of the suite).

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
from pathlib import Path

import psycopg

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

BIN = Path(os.environ.get("PIPELINES_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
#: The OS user the cluster's programs run as.
OWNER = "postgres"
#: How long the server may take to accept logins after it was started, or to exit once told to, in seconds.
READY_TIMEOUT_S = 30.0


def missing_binaries() -> str | None:
    """Why no cluster can be made here (root and PostgreSQL's programs are needed), or None."""
    if os.geteuid() != 0:
        return f"it runs initdb and postgres as the {OWNER} user: run the tests as root"
    absent = [name for name in ("initdb", "postgres") if not (BIN / name).is_file()]
    if absent:
        return (
            f"{' and '.join(absent)} not found in {BIN}: install the Debian package postgresql-15, "
            "or set PIPELINES_TEST_POSTGRES_BIN to the directory of its programs"
        )
    return None


class OwnPostgres:
    """One cluster: :meth:`start`, :meth:`stop`, :meth:`url`, :meth:`sql`, :meth:`close` (which removes it)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="own-postgres-"))
        self.data = self.dir / "data"
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

    def start(self) -> None:
        """Start the server and wait until it accepts logins."""
        with (self.dir / "server.log").open("ab") as log:
            self.process = start_process(
                [
                    *(str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir)),
                    *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"),
                    *("-c", "synchronous_commit=off", "-c", "max_connections=200"),
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

    def sql(self, statement: str) -> None:
        """Run one statement as the superuser, outside a transaction."""
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(statement)

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
