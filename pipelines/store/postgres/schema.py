"""The PostgreSQL store's tables, created and upgraded by numbered migrations in a schema the user names.

Every table has the namespace as the first column of its key, so several namespaces share one schema as
they share one Redis. Times are epoch milliseconds (``bigint``) on the database's clock, as the Redis
store's are on Redis's. A run's rows besides its record (steps, where steps start, inputs, results,
barriers, its steps' logs) go with it: deleted with the run, kept as long as it is (``runs.expires_at``).
A step's history is a column of its row (``steps.history``: the entries of
:mod:`~pipelines.store.step_history`, as the Redis store keeps them); message counts are a row per
minute (``count_minutes``, kept until its ``expires_at``) with a row per actor (``counts``). A run started
in the caller's transaction leaves its first messages in ``outbox`` until a worker's relay publishes them.

:func:`migrate` applies the migrations the schema lacks, in one transaction under an advisory lock (two
processes starting at once migrate once); ``pipelines store migrate`` runs it, and so does a store's
first call.
"""

from __future__ import annotations

import psycopg

from pipelines.config.urls import check_schema_name

#: The store's clock in SQL: the database's time, epoch milliseconds.
NOW_MS = "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"

#: The migrations, in order: (version, statements). A schema at version n has applied the first n.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE {s}.runs (
    ns text NOT NULL,
    run_id text NOT NULL,
    pipeline text NOT NULL,
    status text NOT NULL,
    created_at bigint NOT NULL,
    started_at bigint,
    finished_at bigint,
    idempotency_key text,
    correlation_id text,
    trace_id text,
    trace_sampled boolean NOT NULL DEFAULT true,
    deadline_at bigint,
    input text,
    registered boolean NOT NULL DEFAULT false,
    rerun_of text,
    reruns text[] NOT NULL DEFAULT '{{}}',
    result text,
    error text,
    failed_step text,
    done integer NOT NULL DEFAULT 0,
    touched bigint NOT NULL,
    stall_due bigint,
    redrives integer NOT NULL DEFAULT 0,
    redrive_done integer NOT NULL DEFAULT 0,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE INDEX runs_by_creation ON {s}.runs (ns, created_at DESC, run_id DESC);
CREATE INDEX runs_by_pipeline ON {s}.runs (ns, pipeline, created_at DESC, run_id DESC);
CREATE INDEX runs_to_sweep ON {s}.runs (ns, stall_due) WHERE stall_due IS NOT NULL;
CREATE INDEX runs_by_expiry ON {s}.runs (ns, expires_at);

CREATE TABLE {s}.steps (
    ns text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    actor text NOT NULL,
    up text,
    state text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    started_at bigint,
    finished_at bigint,
    lease_until bigint,
    claimed_here boolean NOT NULL DEFAULT false,
    error text,
    progress double precision,
    progress_text text,
    worker text,
    PRIMARY KEY (ns, run_id, node),
    FOREIGN KEY (ns, run_id) REFERENCES {s}.runs ON DELETE CASCADE
);

CREATE TABLE {s}.starts (
    ns text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    leaves text NOT NULL,
    entries text[] NOT NULL,
    input text,
    PRIMARY KEY (ns, run_id, node),
    FOREIGN KEY (ns, run_id) REFERENCES {s}.runs ON DELETE CASCADE
);

CREATE TABLE {s}.results (
    ns text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (ns, run_id, node),
    FOREIGN KEY (ns, run_id) REFERENCES {s}.runs ON DELETE CASCADE
);

CREATE TABLE {s}.barriers (
    ns text NOT NULL,
    run_id text NOT NULL,
    parent text NOT NULL,
    member integer NOT NULL,
    value text NOT NULL,
    trace_parent text,
    arrived_at bigint NOT NULL,
    PRIMARY KEY (ns, run_id, parent, member),
    FOREIGN KEY (ns, run_id) REFERENCES {s}.runs ON DELETE CASCADE
);

CREATE TABLE {s}.local_steps (
    ns text NOT NULL,
    run_id text NOT NULL,
    after text NOT NULL,
    due_at bigint NOT NULL,
    PRIMARY KEY (ns, run_id, after)
);
CREATE INDEX local_steps_due ON {s}.local_steps (ns, due_at);

CREATE TABLE {s}.stall_clock (
    ns text PRIMARY KEY,
    seen bigint NOT NULL,
    resumed bigint NOT NULL
);

CREATE TABLE {s}.key_claims (
    ns text NOT NULL,
    key text NOT NULL,
    holder text,
    done boolean NOT NULL DEFAULT false,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, key)
);

CREATE TABLE {s}.once_marks (
    ns text NOT NULL,
    key text NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, key)
);

CREATE TABLE {s}.job_leases (
    ns text NOT NULL,
    lease_id text NOT NULL,
    holder text,
    until_ms bigint,
    record text,
    ended boolean NOT NULL DEFAULT false,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, lease_id)
);

CREATE TABLE {s}.ticks (
    ns text NOT NULL,
    job text NOT NULL,
    tick bigint NOT NULL,
    claims integer NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, job, tick)
);

CREATE TABLE {s}.schedules (
    ns text NOT NULL,
    job text NOT NULL,
    last_tick bigint,
    swept_through bigint,
    PRIMARY KEY (ns, job)
);

CREATE TABLE {s}.rate_limits (
    ns text NOT NULL,
    key text NOT NULL,
    next_free bigint NOT NULL DEFAULT 0,
    next_free_expires bigint NOT NULL DEFAULT 0,
    runs bigint[] NOT NULL DEFAULT '{{}}',
    runs_expire bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, key)
);

CREATE TABLE {s}.workers (
    ns text NOT NULL,
    worker_id text NOT NULL,
    beat text NOT NULL,
    beat_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, worker_id)
);
""",
    ),
    (
        2,
        """
ALTER TABLE {s}.steps ADD COLUMN history jsonb NOT NULL DEFAULT '[]';

CREATE TABLE {s}.step_logs (
    ns text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    logs text NOT NULL,
    PRIMARY KEY (ns, run_id, node),
    FOREIGN KEY (ns, run_id) REFERENCES {s}.runs ON DELETE CASCADE
);

CREATE TABLE {s}.count_minutes (
    ns text NOT NULL,
    minute bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (ns, minute)
);

CREATE TABLE {s}.counts (
    ns text NOT NULL,
    minute bigint NOT NULL,
    actor text NOT NULL,
    processed bigint NOT NULL,
    failed bigint NOT NULL,
    dead bigint NOT NULL,
    ms bigint NOT NULL,
    slowest bigint NOT NULL,
    PRIMARY KEY (ns, minute, actor),
    FOREIGN KEY (ns, minute) REFERENCES {s}.count_minutes ON DELETE CASCADE
);
""",
    ),
    (
        3,
        """
CREATE TABLE {s}.outbox (
    ns text NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    run_id text NOT NULL,
    messages text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (ns, id)
);
""",
    ),
)

#: The version a store of this release needs.
LATEST = MIGRATIONS[-1][0]


def quoted(schema: str) -> str:
    """``schema`` as an SQL identifier.

    Raises:
        ValueError: Not a plain identifier of at most 50 characters.
    """
    return f'"{check_schema_name(schema)}"'


def schema_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """The version of the store's tables in ``schema``: 0 when they are not there."""
    found = conn.execute("SELECT to_regclass(%s)", [f"{quoted(schema)}.migrations"]).fetchone()
    if found is None or found[0] is None:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {quoted(schema)}.migrations").fetchone()
    return int(row[0]) if row is not None else 0  # type: ignore[call-overload]


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[int]:
    """Apply the migrations ``schema`` lacks (creating it), in one transaction; returns their versions."""
    s = quoted(schema)
    with conn.transaction():
        # One migrator at a time per schema; the others find the work done.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"pipelines migrate {schema}"])
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.migrations (version integer PRIMARY KEY, applied_at timestamptz "
            "NOT NULL DEFAULT now())"
        )
        current = schema_version(conn, schema)
        applied = []
        for version, statements in MIGRATIONS:
            if version > current:
                conn.execute(statements.format(s=s).encode())
                conn.execute(f"INSERT INTO {s}.migrations (version) VALUES (%s)", [version])
                applied.append(version)
    return applied
