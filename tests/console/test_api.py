"""The console's JSON API on the real RabbitMQ and Redis: what it lists, what its actions do, what it refuses."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipelines import chain, chord, fan_out, group, step
from pipelines.app import build_app
from pipelines.composition import Node
from pipelines.console.security import HEADERS
from pipelines.dead_letters.reasons import DeadLetterReason
from pipelines.testing import running_worker
from pipelines.wire.naming import run_id_for_key, run_key
from tests.console.conftest import (
    DB_PASSWORD,
    JAEGER_URL,
    Console,
    console_settings,
    declare_actors,
    served_console,
)
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def http(console: Console) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        yield client


def authorized(console: Console) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.token}"}


def test_runs_are_listed_newest_first_filtered_and_paged(console: Console, http: httpx.Client) -> None:
    name, echo = console.pipeline_name("listed"), console.actors.echo
    runs = [console.app.start(step(echo, text), name=name) for text in ("a", "fail: b", "c", "d", "fail: e")]
    for run in runs:
        run.wait(timeout_s=30)
    keyed = console.app.start(step(echo, "k"), name=name, idempotency_key=f"{name}-key")
    keyed.wait(timeout_s=30)

    listed = http.get("/api/runs", params={"pipeline": name}).json()
    assert [r["run_id"] for r in listed["runs"]] == [keyed.id, *reversed([r.id for r in runs])]
    assert listed["next_cursor"] is None

    failed = http.get("/api/runs", params={"pipeline": name, "state": "failed"}).json()["runs"]
    assert [(r["run_id"], r["state"], r["error"]) for r in failed] == [
        (runs[4].id, "failed", "ValueError: fail: e"),
        (runs[1].id, "failed", "ValueError: fail: b"),
    ]
    assert (failed[0]["steps_done"], failed[0]["steps_total"]) == (0, 1)

    first = http.get("/api/runs", params={"pipeline": name, "limit": 4}).json()
    second = http.get("/api/runs", params={"pipeline": name, "limit": 4, "cursor": first["next_cursor"]}).json()
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == [r["run_id"] for r in listed["runs"]]
    assert second["next_cursor"] is None

    by_key = http.get("/api/runs", params={"key": f"{name}-key"}).json()["runs"]
    assert [r["run_id"] for r in by_key] == [keyed.id]
    assert http.get("/api/runs", params={"pipeline": name, "since": "1h"}).json()["runs"] == listed["runs"]
    assert http.get("/api/runs", params={"pipeline": name, "until": "1h"}).json()["runs"] == []

    refused = http.get("/api/runs", params={"since": "yesterday"})
    assert refused.status_code == 400
    assert "use 15m, 2h, 7d, an ISO 8601 date or epoch ms" in refused.json()["error"]
    assert http.get("/api/runs", params={"limit": "0"}).status_code == 400


def test_a_run_reads_back_with_its_shape_and_each_step_with_its_arguments_and_result(
    console: Console, http: httpx.Client
) -> None:
    a = console.actors
    members = group(step(a.total, i) for i in range(5))
    run = console.app.start(chain(step(a.double, 1), fan_out(a.double, a.total), chord(members, then=step(a.total))))
    assert run.wait(timeout_s=30).state == "succeeded"

    shown = http.get(f"/api/runs/{run.id}", params={"fold": 3}).json()
    assert (shown["state"], shown["result_json"], shown["counts"]) == ("succeeded", "40", {"succeeded": 9})
    shape = shown["shape"]
    assert [(child["node"], child["kind"]) for child in shape["children"]] == [
        ("0.0", "step"),
        ("0.1", "fan-out"),
        ("0.2", "group"),
        ("0.3", "step"),
    ]
    fanned, grouped, callback = shape["children"][1:]
    assert [branch["step"]["actor"] for branch in fanned["children"]] == ["double", "total"]
    assert (grouped["size"], [m["node"] for m in grouped["children"]]) == (5, ["0.2.0", "0.2.1", "0.2.2"])
    assert grouped["folded"] == {"count": 2, "by_state": {"succeeded": 2}}
    assert (callback["step"]["actor"], callback["step"]["state"]) == ("total", "succeeded")
    # Each step names the worker that ran it: this process's worker, one of its threads.
    here = f"{socket.gethostname()}:{os.getpid()}/"
    assert all(s["worker"].startswith(here) and len(s["worker"]) > len(here) for s in shown["steps"])

    member = http.get(f"/api/runs/{run.id}/steps/0.2.3").json()
    assert (member["args"], member["arguments_from"], member["result_json"]) == ([3], "plan", "9")
    branch = http.get(f"/api/runs/{run.id}/steps/0.1.0").json()
    assert branch["result_json"] == "4"
    assert http.get(f"/api/runs/{run.id}/steps/0.3").json()["result_json"] == "40"
    head = http.get(f"/api/runs/{run.id}/steps/0.0").json()
    # A run built on the spot: its first step shows the arguments the run started it with.
    assert (head["args"], head["arguments_from"], head["result_json"]) == ([1], "start", "2")

    assert http.get(f"/api/runs/{run.id}/steps/9.9").status_code == 404
    missing = http.get("/api/runs/no-such-run")
    assert missing.status_code == 404
    assert "No run no-such-run" in missing.json()["error"]


def test_cancel_needs_the_token_from_the_console_s_own_origin_and_host(console: Console, http: httpx.Client) -> None:
    run = console.app.start(step(console.actors.slow, 60.0), name=console.pipeline_name("cancelled"))
    cancel = f"/api/runs/{run.id}/cancel"

    assert http.post(cancel).status_code == 401
    wrong = http.post(cancel, headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.headers["www-authenticate"]) == (401, 'Bearer realm="pipelines console"')
    assert http.post(cancel, headers={**authorized(console), "Origin": "https://evil.example"}).status_code == 403
    assert http.post(cancel, headers={**authorized(console), "Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert http.post(cancel, headers={**authorized(console), "Host": "evil.example"}).status_code == 400
    assert http.get("/runs", headers={"Host": "rebound.example:8181"}).status_code == 400
    assert run.status().state in ("pending", "running")

    done = http.post(cancel, headers={**authorized(console), "Origin": console.url})
    assert done.json() == {"cancelled": True, "state": "cancelled"}
    assert run.status().state == "cancelled"
    assert http.post(cancel, headers=authorized(console)).json() == {"cancelled": False, "state": "cancelled"}
    assert http.post("/api/runs/no-such-run/cancel", headers=authorized(console)).status_code == 404


def test_a_run_shows_its_input_and_once_ended_re_runs_as_a_new_run_linked_to_it(
    console: Console, http: httpx.Client
) -> None:
    a = console.actors
    name = console.pipeline_name("rerun")
    console.app.register(name, lambda x: chain(step(a.double, x), step(a.double)))  # a factory: its own input
    run = console.app.run(name, x=3)
    assert run.result(timeout_s=30) == 12
    rerun = f"/api/runs/{run.id}/rerun"

    assert http.get(f"/api/runs/{run.id}").json()["input"] == [[], {"x": 3}]
    assert http.post(rerun).status_code == 401
    new_id = http.post(rerun, headers=authorized(console)).json()["rerun_id"]

    assert console.app.get_run(new_id).result(timeout_s=30) == 12
    again = http.get(f"/api/runs/{new_id}").json()
    assert (again["pipeline"], again["input"], again["rerun_of"]) == (name, [[], {"x": 3}], run.id)
    page = http.get(f"/runs/{new_id}").text
    assert f'href="/runs/{run.id}"' in page
    assert http.get(f"/api/runs/{run.id}").json()["reruns"] == [new_id]
    assert f'href="/runs/{new_id}"' in http.get(f"/runs/{run.id}").text  # the original links to its re-run
    assert 'data-post="/api/runs/' + new_id + '/rerun"' in page
    spot = console.app.start(step(a.double, 2))
    assert spot.wait(timeout_s=30).state == "succeeded"
    refused = http.post(f"/api/runs/{spot.id}/rerun", headers=authorized(console))
    assert refused.status_code == 409
    assert refused.json()["error"] == f"Run {spot.id} was built on the spot: only registered pipelines can be re-run."
    assert "/rerun" not in http.get(f"/runs/{spot.id}").text


def test_a_sealed_input_stays_sealed_and_a_re_run_opens_it_for_the_new_run(
    console: Console, http: httpx.Client
) -> None:
    pan, name = "4111111111111111", console.pipeline_name("sealed-input")
    console.app.register(name, step(console.actors.vault))  # the first step encrypts: its input is sealed
    run = console.app.run(name, pan)
    assert run.result(timeout_s=30) == "1111"

    shown = http.get(f"/api/runs/{run.id}").json()
    new_id = http.post(f"/api/runs/{run.id}/rerun", headers=authorized(console)).json()["rerun_id"]

    assert set(shown["input"]) == {"$sealed"}
    assert console.app.get_run(new_id).result(timeout_s=30) == "1111"
    again = http.get(f"/api/runs/{new_id}").json()
    assert set(again["input"]) == {"$sealed"}
    assert again["input"] != shown["input"]  # sealed again, for the new run
    page = http.get(f"/runs/{run.id}").text
    assert "🔒 Sealed: an actor of this run encrypts its arguments" in page
    # A factory's arguments may reach any step: sealed when one of them encrypts, first or not.
    factory = console.pipeline_name("sealed-factory")
    console.app.register(factory, lambda pan: chain(step(console.actors.double, 1), step(console.actors.vault, pan)))
    later = console.app.run(factory, pan)
    assert later.result(timeout_s=30) == "1111"
    deep = http.get(f"/api/runs/{later.id}").json()
    assert isinstance(deep["input"], dict)  # not [args, kwargs] in the clear
    assert set(deep["input"]) == {"$sealed"}
    for text in (json.dumps(shown), json.dumps(again), json.dumps(deep), page):
        assert pan not in text


def test_every_answer_carries_the_security_headers(http: httpx.Client) -> None:
    for path in ("/runs", "/api/runs", "/static/console.js", "/api/runs/no-such-run"):
        headers = http.get(path).headers
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert (headers["x-frame-options"], headers["x-content-type-options"]) == ("DENY", "nosniff"), path
        assert "access-control-allow-origin" not in headers


def test_an_unexpected_error_is_a_500_in_one_sentence_with_the_security_headers_and_no_traceback(
    console: Console, http: httpx.Client
) -> None:
    """A run record the store cannot read (its steps damaged outside the framework) fails the read:
    the page and the API answer 500 as any other answer is made, and keep the details for the log."""
    run = console.app.start(step(console.actors.echo, "damaged"), name=console.pipeline_name("damaged"))
    assert run.wait(timeout_s=30).state == "succeeded"
    steps = run_key(console.app.settings.namespace, run.id) + ":steps"
    client = redis.Redis.from_url(console.app.settings.store.url)
    kept = client.hget(steps, "0.0")
    assert kept is not None
    usual = http.get("/api/runs")

    client.hset(steps, "0.0", "{not json")
    try:  # a connection each: the server closes the one an unexpected error was answered on
        api = httpx.get(f"{console.url}/api/runs/{run.id}", timeout=30)
        page = httpx.get(f"{console.url}/runs/{run.id}", timeout=30)
    finally:  # the module's other tests list this run too
        client.hset(steps, "0.0", kept)

    sentence = "The console met an error it did not expect; its log has the details."
    assert (api.status_code, api.json()) == (500, {"error": sentence})
    assert (page.status_code, page.headers["content-type"]) == (500, "text/html; charset=utf-8")
    assert sentence in page.text
    for answer in (api, page):
        for name in HEADERS:
            assert answer.headers[name] == usual.headers[name], name
        for detail in ("Traceback", "JSONDecodeError", "not json", "replies.py"):
            assert detail not in answer.text


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/runs", {"limit": "\u00b2"}),
        ("/api/runs", {"limit": "9" * 5000}),
        ("/api/runs", {"since": "9" * 400 + "d"}),
        ("/api/runs", {"until": "9" * 5000}),
        ("/api/runs", {"since": "\u00b2"}),
        ("/api/runs", {"cursor": "\u00b2~1"}),
        ("/api/runs", {"cursor": "1~" + "9" * 30}),
        ("/api/runs", {"state": "failed", "cursor": "9" * 400 + "~0"}),
        ("/api/runs/any", {"fold": "\u00b2"}),
        ("/api/dead-letters", {"limit": "10000"}),
        ("/runs", {"since": "9" * 400 + "d"}),
        ("/runs", {"cursor": "\u00b2~1"}),
    ],
)
def test_a_malformed_or_unbounded_number_in_a_query_is_a_bad_request_in_one_sentence(
    http: httpx.Client, path: str, query: dict[str, str]
) -> None:
    answer = http.get(path, params=query)

    assert answer.status_code == 400, answer.text[:300]
    assert answer.headers["x-frame-options"] == "DENY"
    if path.startswith("/api/"):
        assert len(answer.json()["error"].splitlines()) == 1


def test_an_origin_of_another_scheme_is_another_site(console: Console, http: httpx.Client) -> None:
    run = console.app.start(step(console.actors.slow, 60.0), name=console.pipeline_name("scheme"))
    cancel = f"/api/runs/{run.id}/cancel"
    other_scheme = console.url.replace("http://", "https://")

    assert http.post(cancel, headers={**authorized(console), "Origin": other_scheme}).status_code == 403
    assert http.post(cancel, headers={**authorized(console), "Origin": console.url}).status_code == 200


def test_after_five_wrong_tokens_a_client_waits_even_with_the_right_one(console: Console) -> None:
    run = console.app.start(step(console.actors.slow, 60.0), name=console.pipeline_name("guessed"))
    cancel = f"/api/runs/{run.id}/cancel"
    with served_console(console.app) as url, httpx.Client(base_url=url, timeout=30) as own:
        guesses = [own.post(cancel, headers={"Authorization": f"Bearer guess-{n}"}).status_code for n in range(5)]
        locked = own.post(cancel, headers=authorized(console))

    assert guesses == [401] * 5
    assert (locked.status_code, locked.headers["retry-after"]) == (429, "60")
    assert "Too many wrong tokens" in locked.json()["error"]
    assert run.status().state in ("pending", "running")
    run.cancel()


def failed_run(console: Console, x: int) -> Any:
    """A run failed at ``flaky``, once its dead letter is there too (it is published after the run fails)."""
    console.actors.broken.set()
    return dead_lettered(console, chain(step(console.actors.flaky, x), console.actors.double), "flaky")


def dead_lettered(console: Console, pipeline: Node, actor: str, name: str = "dead") -> Any:
    """A run of ``pipeline`` that failed at ``actor``, once its dead letter is there too."""
    run = console.app.start(pipeline, name=name)
    assert run.wait(timeout_s=30).state == "failed"
    deadline = time.monotonic() + 30
    while not any(letter.reason.run_id == run.id for letter in console.app.dead_letters.list(actor)):
        assert time.monotonic() < deadline, f"no dead letter of run {run.id} after 30 s"
        time.sleep(0.05)
    return run


def test_dead_letters_are_listed_shown_and_replayed_into_their_runs(console: Console, http: httpx.Client) -> None:
    run = failed_run(console, 7)
    listed = http.get("/api/dead-letters", params={"queue": "flaky", "run": run.id}).json()["dead_letters"]
    assert len(listed) == 1
    letter = listed[0]
    assert (letter["reason"], letter["error_type"], letter["run_id"], letter["step"]) == (
        "retries exhausted",
        "ConnectionError",
        run.id,
        "0.0",
    )
    assert (letter["args"], letter["actor"], letter["sealed"]) == ([7], "flaky", False)
    assert letter["age_s"] >= 0
    shown = http.get(f"/api/dead-letters/{letter['id']}").json()
    assert "Traceback" in shown["traceback"]
    assert http.get("/api/dead-letters", params={"queue": "nope"}).status_code == 400

    step_detail = http.get(f"/api/runs/{run.id}/steps/0.0").json()
    assert [d["id"] for d in step_detail["dead_letters"]] == [letter["id"]]
    assert step_detail["args"] == [7]

    console.actors.broken.clear()
    replayed = http.post(f"/api/dead-letters/{letter['id']}/replay", headers=authorized(console))
    assert replayed.json() == {"id": letter["id"], "outcome": "replayed"}
    assert run.wait(timeout_s=30).state == "succeeded"
    assert run.result() == 16
    again = http.post(f"/api/dead-letters/{letter['id']}/replay", headers=authorized(console))
    assert again.status_code == 404


def keys_of_runs_that_begin_alike(namespace: str, name: str) -> tuple[str, str]:
    """Two idempotency keys whose runs' ids begin with the same two characters."""
    seen: dict[str, str] = {}
    for number in range(257):  # 256 two-character starts: two of 257 keys share one
        key = f"{name}-{number}"
        first = seen.setdefault(run_id_for_key(namespace, key)[:2], key)
        if first != key:
            return first, key
    raise AssertionError("unreachable")


def test_runs_and_dead_letters_are_found_by_the_start_of_their_id(console: Console, http: httpx.Client) -> None:
    name, echo = console.pipeline_name("prefixed"), console.actors.echo
    keys = keys_of_runs_that_begin_alike(console.app.settings.namespace, name)
    runs = [console.app.start(step(echo, "x"), name=name, idempotency_key=key) for key in keys]
    shared = runs[0].id[:2]
    for run in runs:
        run.wait(timeout_s=30)
    letter_run = failed_run(console, 3)
    letter_id = next(x.id for x in console.app.dead_letters.list("flaky") if x.reason.run_id == letter_run.id)

    shown = http.get(f"/api/runs/{runs[0].id[:12]}")
    ambiguous = http.get(f"/api/runs/{shared}")
    letter = http.get(f"/api/dead-letters/{letter_id[:16]}")
    console.actors.broken.clear()
    replayed = http.post(f"/api/dead-letters/{letter_id[:16]}/replay", headers=authorized(console))

    assert (shown.status_code, shown.json()["run_id"]) == (200, runs[0].id)
    assert ambiguous.status_code == 400
    assert all(run.id in ambiguous.json()["error"] for run in runs)
    assert (letter.status_code, letter.json()["id"]) == (200, letter_id)
    assert replayed.json() == {"id": letter_id, "outcome": "replayed"}
    assert letter_run.wait(timeout_s=30).state == "succeeded"


def test_replaying_all_of_a_filter_and_purging_with_confirmation(console: Console, http: httpx.Client) -> None:
    runs = [failed_run(console, x) for x in (1, 2)]
    filtered = {"queue": "flaky", "reason": "retries exhausted"}
    assert len(http.get("/api/dead-letters", params=filtered).json()["dead_letters"]) >= 2
    console.actors.broken.clear()

    outcomes = http.post("/api/dead-letters/replay", json=filtered, headers=authorized(console)).json()["outcomes"]
    assert len(outcomes) >= 2
    assert set(outcomes.values()) == {"replayed"}
    assert [run.wait(timeout_s=30).state for run in runs] == ["succeeded", "succeeded"]

    queue = console.app.broker.topology.actor_queues["flaky"]
    console.app.broker.dead_letter(
        b"<not a message>", message_id="junk-1", reason=DeadLetterReason("malformed message"), queue=queue
    )
    junk = http.get("/api/dead-letters/junk-1").json()
    assert (junk["reason"], junk["body"], junk["args"]) == ("malformed message", "<not a message>", None)
    refused = http.post("/api/dead-letters/junk-1/replay", headers=authorized(console))
    assert refused.status_code == 409
    assert "is not a valid message" in refused.json()["error"]

    unconfirmed = http.post("/api/dead-letters/purge", json={"queue": "flaky"}, headers=authorized(console))
    assert unconfirmed.status_code == 400
    assert "confirm" in unconfirmed.json()["error"]
    purged = http.post("/api/dead-letters/purge", json={"queue": "flaky", "confirm": True}, headers=authorized(console))
    assert purged.json() == {"purged": 1}
    assert http.get("/api/dead-letters", params={"queue": "flaky"}).json()["dead_letters"] == []


def test_queues_show_depths_rates_and_the_live_workers(console: Console, http: httpx.Client) -> None:
    first = http.get("/api/queues").json()
    assert {q["actor"] for q in first["queues"]} >= {"double", "echo", "flaky", "slow", "total"}
    double = next(q for q in first["queues"] if q["actor"] == "double")
    assert (double["depth"], double["queue"].endswith(".console.double")) == (0, True)
    assert [w["alive"] for w in first["workers"]] == [True]

    deadline = time.monotonic() + 30
    while True:
        for x in range(5):
            console.app.start(step(console.actors.double, x)).wait(timeout_s=30)
        queues = http.get("/api/queues").json()["queues"]
        rate = next(q for q in queues if q["actor"] == "double")["rate_per_s"]
        if rate:
            break
        assert time.monotonic() < deadline, "no processing rate after 30 s"
    assert rate > 0


def test_the_queues_page_says_when_no_worker_reads_the_framework_queue(
    delete_namespace: Callable[[str], None],
) -> None:
    app = build_app(console_settings(free_port()), span_exporter=InMemorySpanExporter())  # and no worker
    actors = declare_actors(app)
    try:
        app.start(step(actors.double, 1))  # declares the namespace's queues
        with served_console(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            page = client.get("/queues").text
            shown = client.get("/api/queues").json()
    finally:
        app.close()
        delete_namespace(app.settings.namespace)

    assert "No worker reads Dramatiq queue &#39;pipelines&#39;, the framework&#39;s own actors" in page
    assert any("run deadlines are not enforced" in note for note in shown["notes"])
    assert next(q for q in shown["queues"] if q["actor"] == "double")["consumers"] == 0


def test_api_queues_asked_again_and_again_reads_each_metrics_endpoint_at_most_once_a_second(
    delete_namespace: Callable[[str], None],
) -> None:
    read_at: dict[str, list[float]] = {"/a/metrics": [], "/b/metrics": []}

    class Endpoint(BaseHTTPRequestHandler):
        """A worker's metrics endpoint that notes when it is read (and has no samples)."""

        def do_GET(self) -> None:
            read_at[self.path].append(time.monotonic())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    endpoints = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=endpoints.serve_forever, name="metrics", daemon=True).start()
    settings = console_settings(free_port())
    urls = [f"http://127.0.0.1:{endpoints.server_address[1]}{path}" for path in read_at]
    settings = settings.model_copy(update={"ui": settings.ui.model_copy(update={"metrics_urls": urls})})
    app = build_app(settings, span_exporter=InMemorySpanExporter())
    try:
        with served_console(app) as url:

            def ask_for_2_5_s() -> list[int]:
                answers = []
                with httpx.Client(base_url=url, timeout=30) as client:
                    until = time.monotonic() + 2.5
                    while time.monotonic() < until:
                        answers.append(client.get("/api/queues").status_code)
                return answers

            started = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                asked = [status for answers in pool.map(lambda _: ask_for_2_5_s(), range(4)) for status in answers]
            took_s = time.monotonic() - started
    finally:
        endpoints.shutdown()
        endpoints.server_close()
        app.close()
        delete_namespace(app.settings.namespace)

    assert set(asked) == {200}
    assert len(asked) >= 20, len(asked)
    for path, times in read_at.items():
        # Read when first asked, then again each second while asked (rates need two reads), no more.
        assert 2 <= len(times) <= took_s + 1, (path, len(asked), took_s, times)
        assert all(later - earlier >= 0.9 for earlier, later in itertools.pairwise(times)), (path, times)


def counted(overview: dict[str, Any], actor: str) -> dict[str, Any] | None:
    """An actor's counts of the last hour in ``/api/queues`` (None while it has processed nothing)."""
    found: dict[str, Any] = next(q for q in overview["queues"] if q["actor"] == actor)["last_hour"]
    return found if found["processed"] else None


def letters_counted(overview: dict[str, Any], actor: str) -> bool:
    """Whether an actor's dead letters of the last hour are counted in ``/api/queues``."""
    found = counted(overview, actor)
    return found is not None and found["dead_lettered"] > 0


def test_workers_show_by_their_heartbeat_in_the_run_store_without_metrics(
    delete_namespace: Callable[[str], None],
) -> None:
    settings = console_settings(free_port())
    settings = settings.model_copy(
        update={
            "metrics": settings.metrics.model_copy(update={"enabled": False}),
            "worker": settings.worker.model_copy(update={"heartbeat_s": 0.2}),
            "ui": settings.ui.model_copy(update={"metrics_urls": []}),
        }
    )
    app = build_app(settings, span_exporter=InMemorySpanExporter())
    actors = declare_actors(app)
    try:
        with running_worker(app, threads=2), served_console(app) as url, httpx.Client(base_url=url) as client:
            assert app.start(step(actors.double, 1)).result(timeout_s=30) == 2
            assert app.start(step(actors.echo, "fail: on purpose")).wait(timeout_s=30).state == "failed"
            slow = app.start(step(actors.slow, 60.0))
            deadline = time.monotonic() + 30
            shown = client.get("/api/queues").json()
            # A failure and its dead letter are counted apart: a heartbeat may go between the two.
            while not (shown["workers"] and shown["workers"][0]["beat"]["running"] and letters_counted(shown, "echo")):
                assert time.monotonic() < deadline, shown["workers"]
                shown = client.get("/api/queues").json()
            page = client.get("/queues").text
            actors.release.set()
        after_stop = app.store.worker_beats()
    finally:
        app.close()
        delete_namespace(app.settings.namespace)

    [worker] = shown["workers"]
    beat = worker["beat"]
    assert (beat["host"], beat["pid"], worker["processes"], beat["threads"]) == (
        socket.gethostname(),
        os.getpid(),
        1,
        2,
    )
    assert (worker["alive"], beat["processed"], beat["failed"]) == (True, 2, 1)
    assert beat["running"] == [f"slow {slow.id}/0.0"]
    assert {"console", "pipelines"} <= set(beat["queues"])
    assert any("No metrics endpoint" in note for note in shown["notes"])
    # The last hour's counts and charts come from the heartbeats too.
    echo, double = counted(shown, "echo"), counted(shown, "double")
    assert echo is not None
    assert double is not None
    assert (echo["processed"], echo["failed"], echo["dead_lettered"], double["processed"]) == (1, 1, 1, 1)
    charts = {chart["name"]: chart for chart in shown["charts"]}
    assert set(charts) == {"throughput", "failures", "latency"}
    assert [s["total"] for s in charts["failures"]["series"]] == [1, 1]
    assert len(charts["throughput"]["series"][0]["values"]) == 61  # the last hour and the minute under way
    assert "1 \u00d7 2" in page
    assert f"slow {slow.id}/0.0" in page
    assert after_stop == []  # a worker that stops removes its heartbeat


def test_a_run_built_on_the_spot_shows_what_its_first_steps_were_started_with(
    console: Console, http: httpx.Client
) -> None:
    a, pan = console.actors, "4111111111111111"
    run = console.app.start(chain(group(step(a.double, 41), step(a.double, 42)), step(a.total)))
    sealed = console.app.start(step(a.vault, pan))  # its first step encrypts: what it was given is sealed
    assert run.result(timeout_s=30) == 166
    assert sealed.result(timeout_s=30) == "1111"

    shown = http.get(f"/api/runs/{run.id}").json()
    first = http.get(f"/api/runs/{run.id}/steps/0.0.1").json()
    page = http.get(f"/runs/{run.id}").text
    closed = http.get(f"/api/runs/{sealed.id}").json()
    closed_page = http.get(f"/runs/{sealed.id}").text

    assert shown["input"] == [[], {}]  # given nothing as a whole: its first steps were
    assert shown["first_steps"] == [
        {"node": "0.0.0", "actor": "double", "args": [41], "kwargs": {}},
        {"node": "0.0.1", "actor": "double", "args": [42], "kwargs": {}},
    ]
    assert (first["arguments_from"], first["args"], first["kwargs"]) == ("start", [42], {})
    assert "Built on the spot: its first steps were started with" in page
    assert closed["first_steps"] == "sealed"
    assert "🔒 Sealed: an actor of this run encrypts its arguments" in closed_page
    for text in (json.dumps(closed), closed_page):
        assert pan not in text


def test_sealed_values_stay_sealed_in_runs_steps_dead_letters_and_pages(console: Console, http: httpx.Client) -> None:
    a, pan = console.actors, "4111111111111111"
    name = console.pipeline_name("sealed")
    # vault comes second: the run store keeps the argument bound to it until it runs.
    run = console.app.start(chain(step(a.double, 1), step(a.vault, pan)), name=name)
    assert run.result(timeout_s=30) == "1111"  # opened for the app, which holds the key
    refused = dead_lettered(console, chain(step(a.double, 1), step(a.vault, "4111 1111 1111 1111")), "vault", name)

    shown = http.get(f"/api/runs/{run.id}").json()
    assert set(json.loads(shown["result_json"])) == {"$sealed"}
    bound = http.get(f"/api/runs/{run.id}/steps/0.1").json()
    assert bound["arguments_from"] == "plan"
    assert [set(arg) for arg in bound["args"]] == [{"$sealed"}]
    assert set(json.loads(bound["result_json"])) == {"$sealed"}
    failed = http.get(f"/api/runs/{refused.id}/steps/0.1").json()
    assert (failed["arguments_from"], failed["args"], failed["kwargs"]) == ("sealed", None, None)
    [letter] = failed["dead_letters"]
    assert (letter["sealed"], letter["args"], letter["kwargs"]) == (True, [], {})
    assert letter["error"] == "that is not a card number"

    run_page = http.get(f"/runs/{run.id}", params={"step": "0.1"}).text
    assert run_page.count("🔒 sealed") >= 3  # the bound argument, the step's result, the run's result
    assert "🔒 Sealed: the actor encrypts its arguments" in http.get(f"/runs/{refused.id}").text
    assert "The arguments are sealed" in http.get(f"/dead-letters/{letter['id']}").text
    answers = [shown, bound, failed, http.get("/api/dead-letters", params={"queue": "vault"}).json()]
    for text in [*map(json.dumps, answers), run_page]:
        assert pan not in text
        assert "4111 1111" not in text


def test_the_trace_id_links_to_jaeger(console: Console, http: httpx.Client) -> None:
    run = console.app.start(step(console.actors.double, 4), name=console.pipeline_name("traced"))
    run.wait(timeout_s=30)
    trace_id = run.status().trace_id
    assert trace_id is not None
    assert len(trace_id) == 32

    shown = http.get(f"/api/runs/{run.id}").json()

    assert (shown["trace_id"], shown["trace_url"]) == (trace_id, f"{JAEGER_URL}/trace/{trace_id}")
    page = http.get(f"/runs/{run.id}").text
    assert f'<a class="mono" href="{JAEGER_URL}/trace/{trace_id}" target="_blank" rel="noopener noreferrer">' in page
    assert shown["trace_sampled"] is True
    assert "not sampled" not in page


def test_a_run_that_sampling_left_out_says_not_sampled(console: Console, http: httpx.Client) -> None:
    # A caller whose own span was not sampled (a web request, say): the run follows its decision.
    caller = trace.SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=trace.TraceFlags(0))
    with trace.use_span(trace.NonRecordingSpan(caller)):
        run = console.app.start(step(console.actors.double, 4), name=console.pipeline_name("left-out"))
    run.wait(timeout_s=30)

    shown = http.get(f"/api/runs/{run.id}").json()
    page = http.get(f"/runs/{run.id}").text

    assert (shown["trace_id"], shown["trace_sampled"]) == (f"{0xABC:032x}", False)
    assert "not sampled: only its failed or slow steps are traced" in page


def test_secrets_in_errors_and_tracebacks_are_masked_wherever_the_console_shows_them(
    console: Console, http: httpx.Client
) -> None:
    a = console.actors
    run = dead_lettered(console, chain(step(a.double, 1), step(a.connect, "orders")), "connect")
    masked = "postgresql://orders:***@db.internal:5432/orders"

    shown = http.get(f"/api/runs/{run.id}").json()
    listed = http.get("/api/runs", params={"pipeline": "dead", "state": "failed"}).json()["runs"]
    detail = http.get(f"/api/runs/{run.id}/steps/0.1").json()
    [letter] = detail["dead_letters"]
    letters = http.get("/api/dead-letters", params={"queue": "connect", "run": run.id}).json()

    assert shown["error"] == f"ConnectionError: could not connect to {masked}"
    assert next(r for r in listed if r["run_id"] == run.id)["error"] == shown["error"]
    assert detail["step"]["error"] == shown["error"]
    assert letter["error"] == f"could not connect to {masked}"
    assert f"ConnectionError: could not connect to {masked}" in letter["traceback"]
    pages = [http.get(f"/runs/{run.id}", params={"step": "0.1"}).text, http.get(f"/dead-letters/{letter['id']}").text]
    pages += [http.get("/dead-letters", params={"queue": "connect"}).text, http.get("/runs").text]
    assert all(masked in page for page in pages[:3])
    for text in [*map(json.dumps, [shown, listed, detail, letters]), *pages]:
        assert DB_PASSWORD not in text


def test_what_an_actor_wrote_is_shown_as_written_in_the_runs_list_and_on_the_run_page(
    console: Console, http: httpx.Client
) -> None:
    # Text a markup reader would eat ("[worker]") or choke on ("[/x]"): data, shown as written.
    written = "fail: got [/x] (timeout_s, or [worker] time_limit_s)"
    name = console.pipeline_name("bracketed")
    run = dead_lettered(console, step(console.actors.echo, written), "echo", name)
    error = f"ValueError: {written}"

    listed = http.get("/api/runs", params={"pipeline": name}).json()["runs"]
    shown = http.get(f"/api/runs/{run.id}").json()
    runs_page = http.get("/runs", params={"pipeline": name})
    run_page = http.get(f"/runs/{run.id}", params={"step": shown["failed_step"]})

    assert [(r["run_id"], r["error"]) for r in listed] == [(run.id, error)]
    assert shown["error"] == error
    assert (runs_page.status_code, run_page.status_code) == (200, 200)
    assert f'<span title="{error}">{error}</span>' in runs_page.text
    assert f'">{shown["failed_step"]}</a>: {error}</div>' in run_page.text  # the run's alert
    assert f'<div class="alert">{error}</div>' in run_page.text  # the step's
