"""The `pipelines` command and a worker started with the stock `dramatiq` CLI, as separate processes."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import psycopg
import pytest
import redis

from pipelines import step
from pipelines.store import RedisRunStore
from pipelines.wire.naming import new_message_id
from tests.support.backends import POSTGRES_URL, only_on, schema_of
from tests.support.fixtures import MakeApp, StartWorker
from tests.support.housekeeping import fresh_namespace, start_process, stop_process
from tests.support.stuck_servers import StuckServer

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
AMQP_URL = os.environ.get("PIPELINES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TIMEOUT_S = 60


def environment(namespace: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_")}
    return env | {
        "PIPELINES_NAMESPACE": namespace,
        "PIPELINES_BROKER__URL": AMQP_URL,
        "PIPELINES_STORE__URL": REDIS_URL,
        "PIPELINES_RETRIES__MAX_RETRIES": "0",
        **extra,
    }


def pipelines(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return installed(env, "pipelines", *args, cwd=cwd)


def installed(env: dict[str, str], program: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run one of the virtualenv's console scripts to its end (in the repository, or in ``cwd``)."""
    return subprocess.run(
        [str(BIN / program), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def pipelines_started(env: dict[str, str], *args: str, **popen: Any) -> subprocess.Popen[Any]:
    """`pipelines ARGS...` in the background (``popen``: its pipes); stop it with
    :func:`~tests.support.housekeeping.stop_process`."""
    return start_process([str(BIN / "pipelines"), *args], env=env, cwd=ROOT, **popen)


@pytest.fixture(scope="module")
def worker_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("worker") / "worker.log"


def dramatiq_worker(
    env: dict[str, str], log: Path, *, threads: int, queues: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """`dramatiq actors` (the stock CLI, no extra flags but ``--queues`` when given) in the background,
    writing to ``log``; stop it with :func:`~tests.support.housekeeping.stop_process`."""
    chosen = ["--queues", *queues] if queues else []
    with log.open("w") as out:
        return start_process(
            [str(BIN / "dramatiq"), "actors", "--processes", "1", "--threads", str(threads), *chosen],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


@pytest.fixture(scope="module")
def env(delete_namespace: Callable[[str], None], worker_log: Path) -> Iterator[dict[str, str]]:
    """A namespace with a `dramatiq actors` worker running in it (the stock CLI, no extra flags)."""
    namespace = fresh_namespace()
    variables = environment(namespace, PIPELINES_WORKER__HEARTBEAT_S="0.5")
    worker = dramatiq_worker(variables, worker_log, threads=4)
    try:
        yield variables
    finally:
        status = stop_process(worker, timeout_s=TIMEOUT_S)
        delete_namespace(namespace)
    assert status == 0, worker_log.read_text()[-2000:]


def test_a_pipeline_started_from_the_cli_runs_on_a_stock_dramatiq_worker(env: dict[str, str]) -> None:
    result = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=41", "--arg", "total=19.5", "--wait")

    assert result.returncode == 0, result.stderr
    assert re.search(r"order_fulfilment\s+succeeded", result.stdout)
    for actor in ("charge_payment", "reserve_inventory", "schedule_shipping", "send_order_confirmation"):
        assert re.search(rf"{actor}\s+succeeded", result.stdout)
    assert '"status":"fulfilled"' in result.stdout


def test_status_shows_a_run_and_its_steps_also_as_json(env: dict[str, str]) -> None:
    started = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/a.jpg", "--wait")
    run_id = started.stdout.split()[0]

    text = pipelines(env, "status", run_id)
    as_json = pipelines(env, "status", run_id, "--json")

    assert text.returncode == 0, text.stderr
    assert f"run {run_id}  thumbnails  succeeded" in text.stdout
    # The pipeline's shape: a chain whose middle is a group of three thumbnails.
    assert re.search(r"chain  5 succeeded\n.*0\.0 fetch_image  succeeded", text.stdout)
    assert re.search(r"group \(3\)  3 succeeded\n(.*0\.1\.\d make_thumbnail  succeeded.*\n){3}", text.stdout)
    status = json.loads(as_json.stdout)
    assert status["state"] == "succeeded"
    assert [step["actor"] for step in status["steps"]] == ["fetch_image"] + ["make_thumbnail"] * 3 + ["publish_gallery"]
    assert isinstance(status["result"], dict)  # a JSON value, not a string of JSON
    assert [child["kind"] for child in status["shape"]["children"]] == ["step", "group", "step"]
    # Each step names the worker that ran it: the `dramatiq` worker process, not this one.
    worker = rf"{re.escape(socket.gethostname())}:(\d+)/\S+"
    assert re.search(rf"0\.0 fetch_image  succeeded .* on {worker}", text.stdout)
    pids = {re.fullmatch(worker, step["worker"] or "") for step in status["steps"]}
    assert None not in pids
    assert str(os.getpid()) not in {found.group(1) for found in pids if found}


def test_an_event_published_from_the_cli_starts_the_subscribed_pipeline_once(env: dict[str, str]) -> None:
    published = pipelines(env, "publish", "order.placed", '{"order_id": 77, "total": 5.0}')
    again = pipelines(env, "publish", "order.placed", '{"order_id": 77, "total": 5.0}')
    # The subscriber and this start share the order's idempotency key: one run, whoever starts it.
    run = pipelines(
        env,
        "run",
        "order_fulfilment",
        "--idempotency-key",
        "order-77",
        "--arg",
        "order_id=77",
        "--arg",
        "total=5.0",
        "--wait",
    )

    assert published.returncode == 0, published.stderr
    assert again.returncode == 0, again.stderr
    assert run.returncode == 0, run.stderr
    client = redis.Redis.from_url(REDIS_URL)
    runs = [
        key
        for key in client.scan_iter(match=f"{env['PIPELINES_NAMESPACE']}:run:*")
        if key.count(b":") == 2 and client.hget(key, "idempotency_key") == b"order-77"
    ]
    assert len(runs) == 1


def test_cancel_reports_a_run_that_already_ended(env: dict[str, str]) -> None:
    started = pipelines(env, "run", "shard_report", "--arg", "day=2026-01-01", "--arg", "shards=2", "--wait")
    run_id = started.stdout.split()[0]

    result = pipelines(env, "cancel", run_id)

    assert result.returncode == 1
    assert "had already ended (succeeded); nothing to cancel" in result.stdout


def test_status_shows_a_run_s_input_and_rerun_starts_it_again_as_a_new_run(env: dict[str, str]) -> None:
    started = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/b.jpg", "--wait")
    run_id = started.stdout.split()[0]

    shown = pipelines(env, "status", run_id)
    rerun = pipelines(env, "rerun", run_id[:12])
    again = pipelines(env, "status", rerun.stdout.strip(), "--json")

    assert 'input url="https://example.com/b.jpg"' in shown.stdout
    assert rerun.returncode == 0, rerun.stderr
    status = json.loads(again.stdout)
    assert (status["pipeline"], status["rerun_of"]) == ("thumbnails", run_id)
    assert status["input"] == [[], {"url": "https://example.com/b.jpg"}]
    assert f"re-run of {run_id}" in pipelines(env, "status", status["run_id"]).stdout
    assert f"re-run as {status['run_id']}" in pipelines(env, "status", run_id).stdout
    missing = pipelines(env, "rerun", "f" * 32)
    assert (missing.returncode, missing.stderr.count("\n")) == (1, 1)
    assert "No run" in missing.stderr


#: A producer of its own starts a run built on the spot (no registered name): it is given nothing as a
#: whole, its first step 88 and total=9.5.
BUILT_ON_THE_SPOT = """
from pipelines import chain, step
from actors import app
from actors.orders import charge_payment, reserve_inventory
print(app.start(chain(step(charge_payment, 88, total=9.5), reserve_inventory)).id)
"""


def test_status_shows_what_a_run_built_on_the_spot_started_its_first_steps_with(env: dict[str, str]) -> None:
    started = installed(env, "python", "-c", BUILT_ON_THE_SPOT)
    run_id = started.stdout.strip()

    shown = pipelines(env, "status", run_id)
    as_json = pipelines(env, "status", run_id, "--json")

    assert started.returncode == 0, started.stderr
    assert shown.returncode == 0, shown.stderr
    assert "first step 0.0 charge_payment(88, total=9.5)" in shown.stdout
    assert "input" not in shown.stdout  # not "input (none)": the run's own input is empty
    status = json.loads(as_json.stdout)
    assert status["first_steps"] == [{"node": "0.0", "actor": "charge_payment", "args": [88], "kwargs": {"total": 9.5}}]
    assert status["input"] == [[], {}]


def test_workers_shows_each_worker_process_by_its_heartbeat(env: dict[str, str]) -> None:
    pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/c.jpg", "--wait")
    deadline = time.monotonic() + TIMEOUT_S
    shown = json.loads(pipelines(env, "workers", "--json").stdout)
    while not (shown and shown[0]["beat"]["processed"] >= 5):  # a heartbeat since the run's five steps
        assert time.monotonic() < deadline, shown
        shown = json.loads(pipelines(env, "workers", "--json").stdout)

    text = pipelines(env, "workers")

    [worker] = shown
    beat = worker["beat"]
    assert (worker["alive"], worker["processes"], beat["host"], beat["threads"]) == (True, 1, socket.gethostname(), 4)
    assert beat["pid"] != os.getpid()
    assert {"pipelines", "images"} <= set(beat["queues"])
    assert text.returncode == 0, text.stderr
    assert re.search(rf"alive\s+{re.escape(socket.gethostname())}\s+{beat['pid']}\s+1x4\s", text.stdout)


def every_queue_read(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`pipelines queues` once the worker of ``env`` has declared every queue and reads every actor queue
    (it may still be starting: a queue not declared yet says ``missing``)."""
    deadline = time.monotonic() + TIMEOUT_S
    queues = pipelines(env, "queues")
    while ("no consumer" in queues.stdout or re.search(r"\smissing\b", queues.stdout)) and time.monotonic() < deadline:
        queues = pipelines(env, "queues")
    return queues


def test_topology_and_queues_show_what_the_namespace_declares(env: dict[str, str]) -> None:
    namespace = env["PIPELINES_NAMESPACE"]

    queues = every_queue_read(env)
    topology = pipelines(env, "topology")

    assert topology.returncode == 0, topology.stderr
    assert f"{namespace}.work" in topology.stdout
    assert re.search(
        rf"{namespace}\.events\s+->\s+{namespace}\.orders\.start_fulfilment\s+order\.placed", topology.stdout
    )
    assert "order_fulfilment" in topology.stdout
    # Every actor with its profile and what was declared for it.
    assert re.search(r"record_timeline_event\s+ordered\s+timeline\s+8 partitions", topology.stdout)
    assert re.search(r"send_welcome_email\s+fire_and_forget\s+notifications", topology.stdout)
    assert re.search(r"export_orders\s+long_running\s+long_running", topology.stdout)
    assert re.search(r"nightly_report\s+scheduled.*missed ticks: catch_up", topology.stdout)
    # The count the docs give for the example domain (docs/concepts/topology.md), with its terms.
    assert topology.stdout.strip().splitlines()[-1] == (
        "59 queues = 2 x 21 actors + 10 delay tiers + 7 more partitions of ordered actors"
    )
    # Each table has its header.
    assert re.search(r"ACTOR\s+PROFILE\s+QUEUE\s+CONSUMES", topology.stdout)
    assert re.search(r"QUEUE\s+ROLE\s+MESSAGES\s+CONSUMERS\s+UNACKED", queues.stdout)
    assert queues.returncode == 0, queues.stderr
    assert re.search(rf"{namespace}\.orders\.charge_payment\.dead\s+dead-letter\s+0", queues.stdout)
    # The worker reads every actor queue, the long-running one (which it polls) included: its consumers.
    assert re.search(
        rf"{namespace}\.long_running\.export_orders\s+actor\s+\d+\s+[1-9]\d*\s+\d+\s*$", queues.stdout, re.MULTILINE
    )
    assert "no consumer" not in queues.stdout
    assert "no consumer" not in topology.stdout


def test_queues_and_topology_mark_actor_queues_that_no_worker_reads(namespaces: Callable[[], str]) -> None:
    env = environment(namespaces())
    started = pipelines(env, "run", "shard_report", "--arg", "day=2026-01-01", "--arg", "shards=2")

    queues = pipelines(env, "queues")
    topology = pipelines(env, "topology")

    namespace = env["PIPELINES_NAMESPACE"]
    assert started.returncode == 0, started.stderr
    assert queues.returncode == 0, queues.stderr
    assert re.search(rf"{namespace}\.orders\.charge_payment\s+actor\s+0\s+0\s+0\s+no consumer", queues.stdout)
    assert re.search(rf"{namespace}\.long_running\.export_orders\s+actor\s+0\s+0\s+0\s+no consumer", queues.stdout)
    assert not re.search(r"(dead-letter|delay).*no consumer", queues.stdout)
    assert topology.returncode == 0, topology.stderr
    assert re.search(rf"{namespace}\.orders\.charge_payment\s+actor\s+quorum\s+no consumer", topology.stdout)
    assert not re.search(r"(dead-letter|delay).*no consumer", topology.stdout)


@pytest.mark.parametrize(
    ("password", "valid"), [("pa/ss", False), ("it's", True), ("two words", True), ("b64+/a=@x", False)]
)
def test_a_password_with_slashes_quotes_spaces_or_at_signs_is_masked_in_the_config_and_in_errors(
    services: None, password: str, valid: bool
) -> None:
    """A '/' not percent-encoded makes the URL invalid (its port is read from the password); it is still
    masked in the error that says so."""
    given = environment("t-config", PIPELINES_STORE__URL=f"redis://u:{password}@127.0.0.1:6379/14")
    down = environment(fresh_namespace(), PIPELINES_STORE__URL=f"redis://u:{password}@127.0.0.1:1/0")

    shown = pipelines(given, "config")
    unreachable = pipelines(down, "status", "no-such-run")

    for result in (shown, unreachable):
        assert password not in result.stdout + result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    if valid:
        assert json.loads(shown.stdout)["store"]["url"] == "redis://u:***@127.0.0.1:6379/14"
        assert unreachable.returncode == 1
        assert "redis://u:***@127.0.0.1:1/0" in unreachable.stderr
    else:
        assert shown.returncode == unreachable.returncode == 2
        assert "store.url = 'redis://u:***@127.0.0.1:6379/14'" in shown.stderr


@pytest.mark.parametrize("password", ["pa/ss", "it's", "two words"])
def test_a_password_after_a_mistyped_scheme_is_masked_in_the_config_error(password: str) -> None:
    """``redis//`` (no ``://``) is an invalid URL: `pipelines config` says so without its password."""
    env = environment("t-config", PIPELINES_STORE__URL=f"redis//u:{password}@127.0.0.1:6379/14")

    shown = pipelines(env, "config")

    assert shown.returncode == 2, shown.stderr
    assert password not in shown.stdout + shown.stderr
    assert "store.url = 'redis//u:***@127.0.0.1:6379/14'" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_config_prints_the_effective_values_with_the_password_masked(services: None) -> None:
    env = environment("t-config", PIPELINES_BROKER__URL="amqp://admin:hunter2@rabbit.internal:5672/%2F")

    result = pipelines(env, "config")

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["broker"]["url"] == "amqp://admin:***@rabbit.internal:5672/%2F"
    assert shown["namespace"] == "t-config"
    assert "hunter2" not in result.stdout


@pytest.mark.parametrize(
    ("variables", "args", "message", "status"),
    [
        ({"PIPELINES_BROKER__QUEUE_TYPE": "fast"}, ["topology"], "broker.queue_type = 'fast'", 2),
        ({"PIPELINES_STORE__RETENTION_S": "-1"}, ["topology"], "store.retention_s = '-1'", 2),
        ({"PIPELINES_BROKER__URLL": "amqp://x"}, ["topology"], "unknown key 'broker.urll'", 2),
        ({"PIPELINES_BROKR__URL": "amqp://x"}, ["topology"], "PIPELINES_BROKR__URL names no section 'brokr'", 2),
        ({}, ["run", "no_such_pipeline"], "No pipeline is registered as 'no_such_pipeline'", 2),
        ({}, ["run", "order_fulfilment", "--arg", "colour=red"], "Arguments do not fit step 0.0 (charge_payment)", 2),
        (
            {},
            ["run", "shard_report", "--arg", "day=2026-01-01", "--arg", "shards=abc"],
            "Pipeline 'shard_report' cannot be built from {'day': '2026-01-01', 'shards': 'abc'}: TypeError(",
            2,
        ),
        ({}, ["publish", "order.placed", "{not json"], "The payload is not JSON", 2),
        ({}, ["publish", "order.placed", '{"order_id": 1}'], "Payload of actor 'start_fulfilment' is invalid", 2),
        ({}, ["publish", "order..placed", "{}"], "order..placed", 2),
        ({}, ["status", "no-such-run"], "No run no-such-run in the run store", 1),
        ({}, ["runs", "--state", "stuck"], "'stuck' is not a run state", 2),
        ({}, ["runs", "--since", "yesterday"], "'yesterday' is not a time", 2),
        ({}, ["runs", "--cursor", "page-2"], "is not a cursor of a runs page", 2),
    ],
)
def test_bad_input_gives_one_clear_line_and_no_traceback(
    namespaces: Callable[[], str], variables: dict[str, str], args: list[str], message: str, status: int
) -> None:
    result = pipelines(environment(namespaces(), **variables), *args)

    assert result.returncode == status, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("config", ["none", "without [app]"])
def test_with_nothing_naming_the_app_the_cli_says_how_to_name_it(tmp_path: Path, config: str) -> None:
    if config != "none":
        (tmp_path / "config.toml").write_text('namespace = "shop"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINES_") and k != "PYTHONPATH"}

    result = pipelines(env, "runs", cwd=tmp_path)

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("pipelines: No app to load: ")
    assert ("there is no config.toml" if config == "none" else "config.toml sets no [app] actors") in line
    assert f"{tmp_path} has no module 'actors'" in line
    for way in ("`pipelines --app shop ...`", '[app] actors = "shop" in config.toml', "PIPELINES_APP__ACTORS=shop"):
        assert way in line
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args", [["top", "--interval", "-1"], ["run", "thumbnails", "--timeout", "0"], ["run", "x", "--timeout", "nan"]]
)
def test_a_bad_option_value_is_a_usage_error_not_a_traceback(args: list[str]) -> None:
    result = pipelines(environment("t-bad-option"), *args)

    assert result.returncode == 2
    assert f"{args[-1]!r} is not a positive number of seconds" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_rabbitmq_is_named_with_its_masked_url(services: None) -> None:
    env = environment(
        fresh_namespace(),
        PIPELINES_BROKER__URL="amqp://guest:guest@127.0.0.1:1/%2F",
        PIPELINES_BROKER__CONNECTION_ATTEMPTS="1",
    )

    result = pipelines(env, "run", "thumbnails", "--arg", "url=x")

    status = pipelines(env, "status", result.stdout.split()[0]) if result.stdout else None
    RedisRunStore(url=REDIS_URL, namespace=env["PIPELINES_NAMESPACE"], retention_s=60).delete_namespace()

    assert result.returncode == 1
    assert "RabbitMQ at amqp://guest:***@127.0.0.1:1/%2F does not answer" in result.stderr
    # The run id came first (the run existed before the publish failed), and the run says why it failed.
    assert re.fullmatch(r"[0-9a-f]{32}\n", result.stdout)
    assert status is not None
    assert "failed" in status.stdout.splitlines()[0]
    assert "error: The run could not be started: BrokerUnavailable: RabbitMQ at" in status.stdout
    assert "step None" not in status.stdout


def test_a_rabbitmq_that_takes_tcp_but_never_answers_the_handshake_is_named_so_with_the_file_handle_hint(
    services: None, silent_server: StuckServer
) -> None:
    # The default connection attempts (3): the silent server is asked once, not three times.
    env = environment(
        fresh_namespace(),
        PIPELINES_BROKER__URL=f"amqp://guest:guest@127.0.0.1:{silent_server.port}/%2F?stack_timeout=1",
    )

    result = pipelines(env, "run", "thumbnails", "--arg", "url=x")
    RedisRunStore(url=REDIS_URL, namespace=env["PIPELINES_NAMESPACE"], retention_s=60).delete_namespace()

    where = f"RabbitMQ at amqp://guest:***@127.0.0.1:{silent_server.port}/%2F?stack_timeout=1"
    assert silent_server.taken == 1
    assert result.returncode == 1
    assert f"{where} takes TCP connections but does not answer the AMQP handshake" in result.stderr
    assert "out of file handles" in result.stderr
    assert "rabbitmqctl eval 'file_handle_cache:info().'" in result.stderr
    assert "Is it running?" not in result.stderr  # it is: saying so would send the user the wrong way
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


WRONG_PASSWORD_URL = re.sub(r"//([^:/@]+):[^@]*@", r"//\1:Wrong-Pass-7@", AMQP_URL)


def test_a_refused_login_says_what_to_check_and_never_shows_the_password(services: None) -> None:
    env = environment(fresh_namespace(), PIPELINES_BROKER__URL=WRONG_PASSWORD_URL)

    result = pipelines(env, "publish", "order.placed", '{"order_id": 1}')

    assert result.returncode == 1
    assert "refused the connection" in result.stderr
    assert "Check the user name, password and virtual host in broker.url" in result.stderr
    assert "Wrong-Pass-7" not in result.stderr


def test_a_worker_whose_login_is_refused_exits_at_boot_instead_of_retrying_forever(services: None) -> None:
    env = environment(fresh_namespace(), PIPELINES_BROKER__URL=WRONG_PASSWORD_URL)

    worker = installed(env, "dramatiq", "actors", "--processes", "1", "--threads", "1")

    assert worker.returncode == 3  # the dramatiq CLI's "broker connection failed"
    assert "refused the connection" in worker.stderr
    assert "Wrong-Pass-7" not in worker.stderr


def test_a_worker_that_cannot_reach_rabbitmq_keeps_trying_one_line_per_attempt(services: None, tmp_path: Path) -> None:
    env = environment(
        fresh_namespace(),
        PIPELINES_BROKER__URL="amqp://guest:guest@127.0.0.1:1/%2F",
        PIPELINES_BROKER__CONNECTION_ATTEMPTS="1",
    )
    log = tmp_path / "worker.log"
    expected = "Consumer encountered a connection error: RabbitMQ at amqp://guest:***@127.0.0.1:1/%2F does not answer"
    worker = dramatiq_worker(env, log, threads=1)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while expected not in log.read_text() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # another process's log file: nothing to subscribe to
    finally:
        stop_process(worker, timeout_s=TIMEOUT_S)

    text = log.read_text()
    assert expected in text
    assert "Traceback" not in text


def wait_for_dead_letter(env: dict[str, str], queue: str) -> str:
    """The id of the first dead letter of ``queue``, once the worker has dead-lettered it."""
    return wait_for_dead_letters(env, queue, 1)[0]


def wait_for_dead_letters(env: dict[str, str], queue: str, count: int) -> list[str]:
    """The ids of the dead letters of ``queue``, once the worker has dead-lettered ``count`` of them."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        found = json.loads(pipelines(env, "dlq", "list", "--queue", queue, "--json").stdout)
        if len(found) >= count:
            return [str(letter["id"]) for letter in found]
        time.sleep(0.2)  # the worker dead-letters asynchronously; another process has nothing to subscribe to
    raise AssertionError(f"fewer than {count} dead letters appeared in {queue}")


def test_dead_letters_are_listed_shown_replayed_and_purged_from_the_cli(env: dict[str, str]) -> None:
    failed = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=13", "--arg", "total=0", "--wait")
    letter_id = wait_for_dead_letter(env, "charge_payment")

    listed = pipelines(env, "dlq", "list", "--queue", "charge_payment")
    shown = json.loads(pipelines(env, "dlq", "show", letter_id, "--json").stdout)
    shown_text = pipelines(env, "dlq", "show", letter_id).stdout
    replayed = pipelines(env, "dlq", "replay", letter_id)
    refused = pipelines(env, "dlq", "purge", "--queue", "charge_payment")
    wait_for_dead_letter(env, "charge_payment")  # still broken: dead-lettered again
    purged = pipelines(env, "dlq", "purge", "--queue", "charge_payment", "--yes")

    assert failed.returncode == 1
    assert "error at step 0.0: ValueError: order 13 has a non-positive total 0" in failed.stdout
    assert re.search(rf"{letter_id}\s+\S+charge_payment\.dead\s+permanent error\s+run \w+ step 0\.0", listed.stdout)
    assert shown["error_type"] == "ValueError"
    assert shown["message"]["kwargs"] == {"order_id": 13, "total": 0}
    assert re.search(r"error_type\s+ValueError", shown_text)
    assert '"kwargs": {"order_id": 13, "total": 0}' in shown_text
    assert replayed.stdout.strip() == f"{letter_id}  replayed"
    assert (refused.returncode, "add --yes to confirm" in refused.stderr) == (2, True)
    assert purged.stdout.strip() == "purged 1 dead letter(s)"


#: A producer of its own: a plain message to charge_payment per id given, each with that message id and a
#: total the actor refuses (its dead letter keeps the id).
SEND_WITH_IDS = """
import sys
from actors import app
from actors.orders import charge_payment
for order_id, message_id in enumerate(sys.argv[1:], start=14):
    app.broker.enqueue(charge_payment.message(order_id=order_id, total=0).copy(message_id=message_id))
"""


def ids_that_begin_alike() -> tuple[str, list[str]]:
    """A fresh start of 14 characters, and two message ids that share it and differ at the next one."""
    shared = new_message_id()[:14]  # "8hex-4hex-"
    rest = new_message_id()[15:]
    return shared, [f"{shared}a{rest}", f"{shared}b{rest}"]


def test_dead_letters_are_shown_and_replayed_by_the_start_of_their_id(env: dict[str, str]) -> None:
    shared, ids = ids_that_begin_alike()
    sent = installed(env, "python", "-c", SEND_WITH_IDS, *ids)
    assert sent.returncode == 0, sent.stderr
    deadline = time.monotonic() + TIMEOUT_S
    while not set(ids) <= set(wait_for_dead_letters(env, "charge_payment", 2)):
        assert time.monotonic() < deadline, "the two dead letters did not arrive"
        time.sleep(0.2)  # the worker dead-letters asynchronously; another process has nothing to subscribe to

    shown = pipelines(env, "dlq", "show", ids[0][:16], "--json")
    ambiguous = pipelines(env, "dlq", "show", shared)
    replayed = pipelines(env, "dlq", "replay", ids[1][:16])
    pipelines(env, "dlq", "purge", "--queue", "charge_payment", "--yes")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == ids[0]
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.strip() == (
        f"pipelines: {shared!r} begins the ids of 2 dead letters ({ids[0]}, {ids[1]}); give more of the id."
    )
    assert replayed.stdout.strip() == f"{ids[1]}  replayed"


def test_worker_log_lines_are_json_with_the_ids_of_the_message_they_are_about(
    env: dict[str, str], worker_log: Path
) -> None:
    run = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=21", "--arg", "total=-1", "--wait")
    run_id = run.stdout.split()[0]
    deadline = time.monotonic() + TIMEOUT_S
    lines: list[dict[str, Any]] = []
    while not lines and time.monotonic() < deadline:
        parsed = [json.loads(line) for line in worker_log.read_text().splitlines() if line.startswith("{")]
        lines = [entry for entry in parsed if entry.get("run_id") == run_id and entry["level"] == "ERROR"]
        time.sleep(0.1)  # the worker writes its log asynchronously to this process

    assert lines, worker_log.read_text()[-2000:]
    failure = lines[0]
    assert failure["actor"] == "charge_payment"
    assert failure["attempt"] == 1
    assert failure["correlation_id"]
    assert failure["message_id"]
    assert "Dead-lettering" in failure["message"]
    assert "(permanent error): ValueError: order 21 has a non-positive total -1" in failure["message"]


def test_top_shows_queues_with_their_depths_and_the_recent_runs(env: dict[str, str]) -> None:
    started = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/top.jpg", "--wait")
    run_id = started.stdout.split()[0]

    frame = pipelines(env, "top", "--once")

    namespace = env["PIPELINES_NAMESPACE"]
    assert frame.returncode == 0, frame.stderr
    assert f"namespace {namespace}" in frame.stdout
    assert re.search(rf"{namespace}\.images\.make_thumbnail\s+0\s+0", frame.stdout)
    assert re.search(rf"{run_id}\s+thumbnails\s+succeeded\s+5/5", frame.stdout)
    assert re.search(rf"{namespace}\.timeline\.record_timeline_event\s+-\s+0[^\n]*\n\s+\.p0\s+0\s*\n", frame.stdout)
    assert "(rates need [metrics] enabled" in frame.stdout
    assert "\x1b[" not in frame.stdout  # no colour nor cursor movement off a terminal


def test_publishing_to_a_full_queue_reports_which_queue_and_how_full(
    delete_namespace: Callable[[str], None],
) -> None:
    namespace = fresh_namespace()
    env = environment(namespace, PIPELINES_BROKER__MAX_QUEUE_LENGTH="1")  # and no worker draining them
    try:
        outcomes = [pipelines(env, "publish", "order.placed", '{"order_id": 1, "total": 5}') for _ in range(4)]
    finally:
        delete_namespace(namespace)

    refused = [o for o in outcomes if o.returncode != 0]
    assert outcomes[0].returncode == 0, outcomes[0].stderr
    assert refused, "no publish was refused"
    assert refused[0].returncode == 1
    assert re.search(rf"Queue {namespace}\.\S+ is full \(\d+ messages, max_length 1\)", refused[0].stderr)


def test_runs_are_found_by_state_pipeline_time_and_key_in_a_table_or_as_json(env: dict[str, str]) -> None:
    ok = pipelines(env, "run", "thumbnails", "--arg", "url=https://example.com/r.jpg", "--wait")
    failed = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=31", "--arg", "total=0", "--wait")
    keyed = pipelines(
        env, "run", "order_fulfilment", "--arg", "order_id=32", "--arg", "total=3", "--idempotency-key", "o-32"
    )
    ok_id, failed_id, keyed_id = (result.stdout.split()[0] for result in (ok, failed, keyed))

    table = pipelines(env, "runs", "--since", "1h")
    by_state = json.loads(pipelines(env, "runs", "--state", "failed", "--json").stdout)
    by_pipeline = json.loads(pipelines(env, "runs", "--pipeline", "thumbnails", "--json").stdout)
    by_key = json.loads(pipelines(env, "runs", "--key", "o-32", "--json").stdout)
    first_page = pipelines(env, "runs", "--limit", "1", "--json")
    cursor = json.loads(first_page.stdout)["cursor"]
    second_page = json.loads(pipelines(env, "runs", "--limit", "1", "--cursor", cursor, "--json").stdout)

    assert table.returncode == 0, table.stderr
    assert re.match(r"RUN\s+PIPELINE\s+STATE\s+STARTED \(UTC\)\s+DURATION\s+STEPS\s+ERROR\n", table.stdout)
    assert re.search(rf"{failed_id}\s+order_fulfilment\s+failed\s.*0/5\s+ValueError: order 31", table.stdout)
    assert re.search(rf"{ok_id}\s+thumbnails\s+succeeded\s.*5/5", table.stdout)
    assert failed_id in [run["run_id"] for run in by_state["runs"]]
    assert {run["state"] for run in by_state["runs"]} == {"failed"}
    assert by_pipeline["runs"][0]["run_id"] == ok_id
    assert {run["pipeline"] for run in by_pipeline["runs"]} == {"thumbnails"}
    assert [(run["run_id"], run["idempotency_key"]) for run in by_key["runs"]] == [(keyed_id, "o-32")]
    assert json.loads(first_page.stdout)["runs"][0]["run_id"] == keyed_id
    assert second_page["runs"][0]["run_id"] == failed_id


def test_a_closed_pipe_ends_the_command_quietly(env: dict[str, str]) -> None:
    piped = subprocess.run(
        [
            "bash",
            "-c",
            "set -o pipefail; pipelines run thumbnails --arg url=https://example.com/p.jpg --wait | head -1; "
            "pipelines topology | head -1",
        ],
        env=env | {"PATH": f"{BIN}:{os.environ['PATH']}"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    run_id, namespace_line = piped.stdout.splitlines()
    assert re.fullmatch(r"[0-9a-f]{32}", run_id)
    assert namespace_line.startswith(f"namespace {env['PIPELINES_NAMESPACE']} on ")


def test_queues_and_topology_print_json_too(env: dict[str, str]) -> None:
    every_queue_read(env)
    queues = json.loads(pipelines(env, "queues", "--json").stdout)
    topology = json.loads(pipelines(env, "topology", "--json").stdout)
    config = json.loads(pipelines(env, "config", "--json").stdout)

    namespace = env["PIPELINES_NAMESPACE"]
    dead = next(queue for queue in queues if queue["name"] == f"{namespace}.orders.charge_payment.dead")
    assert (dead["role"], type(dead["messages"])) == ("dead-letter", int)
    assert [queue["no_consumer"] for queue in topology["queues"]] == [False] * len(topology["queues"])
    assert topology["namespace"] == namespace
    assert "order_fulfilment" in topology["pipelines"]
    assert {"name": f"{namespace}.work", "type": "topic"} in topology["exchanges"]
    assert config["namespace"] == namespace


#: Error texts an actor wrote, bracketed as rich markup would read them (a tag that closes nothing, a tag).
WRITTEN = ["got [/x]", "raise timeout_s (timeout_s, or [worker] time_limit_s)"]
#: An actors module for the CLI, declaring the actor a test's worker runs (PYTHONPATH names its folder).
WRITTEN_ACTORS = """
import dramatiq
from pipelines.app import configure

app = configure()
dramatiq.actor(actor_name="writes", broker=app.broker)(lambda text: None)
"""


@only_on("rabbitmq")
def test_what_an_actor_wrote_is_shown_as_written_by_every_command(
    make_app: MakeApp, start_worker: StartWorker, namespaces: Callable[[], str], tmp_path: Path
) -> None:
    app = make_app(namespace=namespaces())  # whatever the CLI declares there is deleted too

    @dramatiq.actor(actor_name="writes", broker=app.broker)
    def writes(text: str) -> None:
        raise ValueError(text)

    start_worker(app)
    runs = [app.start(step(writes, text), name=f"[bold]{n}") for n, text in enumerate(WRITTEN)]
    for run in runs:
        assert run.wait(timeout_s=TIMEOUT_S).state == "failed"
    (tmp_path / "written.py").write_text(WRITTEN_ACTORS)
    env = environment(app.settings.namespace, PIPELINES_APP__ACTORS="written", PYTHONPATH=str(tmp_path))
    for _ in WRITTEN:
        wait_for_dead_letter(env, "writes")
    letters = json.loads(pipelines(env, "dlq", "list", "--json").stdout)

    shown = [pipelines(env, "dlq", "show", letter["id"]) for letter in letters]
    listed = pipelines(env, "dlq", "list")
    found = pipelines(env, "runs")
    statuses = [pipelines(env, "status", run.id) for run in runs]
    top = pipelines(env, "top", "--once")

    for result in [*shown, listed, found, *statuses, top]:
        assert (result.returncode, result.stderr) == (0, "")
    for text in WRITTEN:
        assert sum(text in result.stdout for result in shown) == 1
        assert f"ValueError: {text}" in listed.stdout
        assert f"ValueError: {text}" in found.stdout
        assert sum(f"ValueError: {text}" in result.stdout for result in statuses) == 1
    for n in range(len(WRITTEN)):
        assert f"[bold]{n}" in found.stdout
        assert f"[bold]{n}" in top.stdout


@only_on("rabbitmq")
def test_status_masks_a_password_in_a_steps_error_in_the_tree_the_outcome_line_and_json(
    make_app: MakeApp, start_worker: StartWorker, namespaces: Callable[[], str]
) -> None:
    app = make_app(namespace=namespaces())
    url = "redis://u:leakpw@cache:6379/0"

    @dramatiq.actor(actor_name="connects", broker=app.broker)
    def connects() -> None:
        raise ConnectionError(f"Error connecting to {url}")

    start_worker(app)
    run = app.start(step(connects))
    assert run.wait(timeout_s=TIMEOUT_S).state == "failed"
    env = environment(app.settings.namespace)

    shown = pipelines(env, "status", run.id)
    as_json = pipelines(env, "status", run.id, "--json")

    for result in (shown, as_json):
        assert (result.returncode, result.stderr) == (0, "")
        assert "leakpw" not in result.stdout, result.args
    masked = "ConnectionError: Error connecting to redis://u:***@cache:6379/0"
    assert re.search(rf"0\.0 connects  failed .*  {re.escape(masked)}$", shown.stdout, re.MULTILINE), shown.stdout
    assert re.search(rf"^error at step 0\.0: {re.escape(masked)}$", shown.stdout, re.MULTILINE), shown.stdout
    status = json.loads(as_json.stdout)
    assert (status["error"], status["steps"][0]["error"]) == (masked, masked)


def test_store_migrate_makes_a_postgresql_stores_tables_once_and_loads_no_app(services: None, tmp_path: Path) -> None:
    schema = schema_of(fresh_namespace())
    env = environment(fresh_namespace(), PIPELINES_STORE__URL=POSTGRES_URL, PIPELINES_STORE__POSTGRES_SCHEMA=schema)
    try:
        first = pipelines(env, "store", "migrate", cwd=tmp_path)  # no actors module there: none is needed
        again = pipelines(env, "store", "migrate", cwd=tmp_path)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    on_redis = pipelines(environment(fresh_namespace()), "store", "migrate", cwd=tmp_path)

    assert (first.returncode, again.returncode, on_redis.returncode) == (0, 0, 0), first.stderr + again.stderr
    assert f"Migrated schema {schema}" in first.stdout
    assert "up to date" in again.stdout
    assert "nothing to migrate" in on_redis.stdout


def letters_of_run(env: dict[str, str], queue: str, run_id: str, count: int) -> list[str]:
    """The ids of ``run_id``'s dead letters in ``queue``, once the worker has dead-lettered ``count`` of them."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        found = json.loads(pipelines(env, "dlq", "list", "--queue", queue, "--json").stdout)
        ids = [str(letter["id"]) for letter in found if letter.get("run_id") == run_id]
        if len(ids) >= count:
            return ids
        time.sleep(0.2)  # the worker dead-letters asynchronously; another process has nothing to subscribe to
    raise AssertionError(f"fewer than {count} dead letters of run {run_id} appeared in {queue}")


def test_status_lists_a_steps_attempts_and_replay_and_with_logs_what_each_attempt_logged(env: dict[str, str]) -> None:
    failed = pipelines(env, "run", "order_fulfilment", "--arg", "order_id=16", "--arg", "total=0", "--wait")
    run_id = failed.stdout.split()[0]
    [letter_id] = letters_of_run(env, "charge_payment", run_id, 1)
    replayed = pipelines(env, "dlq", "replay", letter_id)
    letters_of_run(env, "charge_payment", run_id, 1)  # still broken: dead-lettered again

    plain = pipelines(env, "status", run_id)
    shown = pipelines(env, "status", run_id[:12], "--logs")
    as_json = json.loads(pipelines(env, "status", run_id, "--logs", "--json").stdout)
    pipelines(env, "dlq", "purge", "--queue", "charge_payment", "--yes")

    assert replayed.returncode == 0, replayed.stderr
    assert shown.returncode == 0, shown.stderr
    error = "ValueError: order 16 has a non-positive total 0"
    assert re.search(rf"attempt 1  [-0-9]+ [:.0-9]+  failed  [.0-9]+ s  on \S+  {error}\n", shown.stdout)
    assert re.search(rf"replayed  [-0-9]+ [:.0-9]+  dead letter {letter_id} \(permanent error\)\n", shown.stdout)
    assert re.search(rf"attempt 2  [-0-9]+ [:.0-9]+  failed  .*{error}\n", shown.stdout)
    assert "logs of step" not in plain.stdout
    for attempt in (1, 2):
        assert re.search(
            rf"logs of step 0\.0 \(charge_payment\), attempt {attempt}\n"
            r"  [-0-9]+ [:.0-9]+ INFO actors\.orders  charging order 16: 0\n"
            r"  [-0-9]+ [:.0-9]+ INFO dramatiq\.worker\.WorkerThread  Failed to process message "
            r"charge_payment\(order_id=16, total=0\) with expected exception ValueError\.",
            shown.stdout,
        ), shown.stdout
    assert [entry["kind"] for entry in as_json["steps"][0]["history"]] == ["attempt", "replay", "attempt"]
    first = as_json["logs"]["0.0"][0]
    assert (first["attempt"], first["dropped"], first["records"][0]["text"]) == (1, 0, "charging order 16: 0")
