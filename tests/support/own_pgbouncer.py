"""PgBouncer in transaction mode in front of the suite's PostgreSQL, on a port of its own, for the tests of the
PostgreSQL store through a pooler. Debian's ``pgbouncer`` package (``make tools`` installs it); it runs as
the ``postgres`` user, since PgBouncer refuses to run as root."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.housekeeping import start_process, stop_process
from tests.support.ports import free_port

PGBOUNCER = "/usr/sbin/pgbouncer"
#: Server connections per database and user: fewer than the store's pool, so clients share them.
POOL_SIZE = 3
START_TIMEOUT_S = 15.0


class OwnPgBouncer:
    """PgBouncer (``pool_mode = transaction``) in front of the PostgreSQL at ``target_url``."""

    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        self.user = target.username or "postgres"
        self.database = target.path.lstrip("/")
        self.target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        if not Path(PGBOUNCER).exists():
            raise RuntimeError(f"{PGBOUNCER} is missing: run `make tools` (Debian's pgbouncer package).")
        host, port = self.target
        ini = self.directory / "pgbouncer.ini"
        (self.directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        ini.write_text(
            f"[databases]\n{self.database} = host={host} port={port} dbname={self.database}\n\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {self.directory / 'userlist.txt'}\npool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\nmax_client_conn = 500\nlogfile = {self.directory / 'pgbouncer.log'}\n"
        )
        shutil.chown(self.directory, "postgres")
        for path in self.directory.iterdir():
            shutil.chown(path, "postgres")
        self.process = start_process(
            [PGBOUNCER, str(ini)],
            user="postgres",
            group="postgres",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"PgBouncer did not start on port {self.port}:\n{self.log()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)
