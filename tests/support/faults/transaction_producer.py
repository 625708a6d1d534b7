"""A producer that starts a run in its own transaction, commits, prints the run's id and is SIGKILLed at
once, before it could have published anything: ``python -m tests.support.faults.transaction_producer``."""

from __future__ import annotations

import os
import signal
import sys

import psycopg

from pipelines.app import configure
from tests.support.faults.transaction_actors import TABLE_VARIABLE, declare

app = configure()
record = declare(app.broker, app.settings.namespace, os.environ[TABLE_VARIABLE])["record"]
with psycopg.connect(os.environ["PIPELINES_STORE__URL"]) as conn:
    with conn.transaction():
        run = app.start(record.message("killed-producer"), args=(0,), connection=conn)
    print(run.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit("still alive after SIGKILL")
