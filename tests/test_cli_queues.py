"""`pipelines queues` counts each actor's messages of the last hour, plain ones sent with `actor.send()`
included, and says where their dead letters are. The real commands, a producer process and a stock
`dramatiq` worker on the real RabbitMQ and Redis."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.housekeeping import stop_process
from tests.test_cli import TIMEOUT_S, dramatiq_worker, environment, installed, pipelines

#: A producer of its own: three plain messages (no run), the last one with a total the actor refuses.
SEND = """
from actors.orders import charge_payment
charge_payment.send(order_id=1, total=10.0)
charge_payment.send(order_id=2, total=12.5)
print(charge_payment.send(order_id=3, total=-1.0).message_id)
"""


def last_hour(env: dict[str, str], actor: str) -> dict[str, Any]:
    """``actor``'s counts of the last hour as `pipelines queues --json` prints them."""
    queues = json.loads(pipelines(env, "queues", "--json").stdout)
    found: dict[str, Any] = next(q for q in queues if q.get("actor") == actor)["last_hour"]
    return found


def test_queues_counts_plain_messages_per_actor_and_points_to_their_dead_letters(
    namespaces: Callable[[], str], tmp_path: Path
) -> None:
    env = environment(namespaces(), PIPELINES_WORKER__HEARTBEAT_S="0.5")
    log = tmp_path / "worker.log"
    worker = dramatiq_worker(env, log, threads=2)
    try:
        sent = installed(env, "python", "-c", SEND)
        deadline = time.monotonic() + TIMEOUT_S
        while (counts := last_hour(env, "charge_payment"))["dead_lettered"] < 1 or counts["processed"] < 3:
            assert time.monotonic() < deadline, (counts, log.read_text()[-2000:])
            time.sleep(0.2)  # counted by another process's heartbeat: nothing to subscribe to
        text = pipelines(env, "queues")
        letters = json.loads(pipelines(env, "dlq", "list", "--queue", "charge_payment", "--json").stdout)
    finally:
        stop_process(worker, timeout_s=TIMEOUT_S)

    assert sent.returncode == 0, sent.stderr
    assert (counts["processed"], counts["failed"], counts["dead_lettered"]) == (3, 1, 1)
    assert 0 <= counts["mean_s"] <= counts["slowest_ms"] / 1000
    assert text.returncode == 0, text.stderr
    assert re.search(r"ACTOR\s+PROCESSED\s+FAILED\s+DEAD-LETTERED\s+MEAN\s+SLOWEST", text.stdout)
    assert re.search(r"^charge_payment\s+3\s+1\s+1\s+\d", text.stdout, re.MULTILINE)
    assert re.search(r"^reserve_inventory\s+0\s+0\s+0\s*$", text.stdout, re.MULTILINE)
    assert "pipelines dlq list --queue ACTOR" in text.stdout
    [letter] = letters
    assert (letter["id"], letter.get("run_id"), letter["actor"]) == (sent.stdout.strip(), None, "charge_payment")
