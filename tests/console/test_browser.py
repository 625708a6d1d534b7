"""The console in a real browser (Debian's Chromium): what an operator sees and does, end to end.

A worker processes the runs on the real RabbitMQ and Redis while the pages are open; screenshots of
each scenario go to ``test-artifacts/console/``. No test sleeps: each waits for what the page shows.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from playwright.sync_api import expect

from pipelines import chain, chord, fan_out, for_each, group, step
from pipelines.app import build_app
from pipelines.wire.naming import new_message_id
from tests.console.conftest import (
    ARTIFACTS,
    JAEGER_URL,
    Console,
    console_settings,
    declare_actors,
    served_console,
)
from tests.console.test_api import keys_of_runs_that_begin_alike
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

Shoot = Callable[[str], Path]
#: The README's picture of the console as this run draws it: `make console-picture` copies it to docs/.
README_PICTURE = ARTIFACTS / "readme-console.png"


def unlock(page: Any, token: str) -> None:
    page.get_by_placeholder("Action token").fill(token)
    page.get_by_role("button", name="Unlock").click()
    expect(page.locator("#token-state")).to_have_text("Actions unlocked")


def test_runs_arrive_on_the_runs_page_while_a_worker_processes_them(console: Console, page: Any, shoot: Shoot) -> None:
    name = console.pipeline_name("orders")
    page.goto(f"{console.url}/runs?pipeline={name}")
    expect(page.get_by_text("No runs match this filter.")).to_be_visible()

    double = console.actors.double
    runs = [console.app.start(chain(step(double, i), double), name=name) for i in range(3)]

    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("tr[data-state=succeeded]")).to_have_count(3)
    for run in runs:
        expect(page.locator(f"tr[data-run='{run.id}']")).to_contain_text("2/2")
    shoot("arrived")


def test_the_failed_runs_are_found_by_filtering_on_their_state(console: Console, page: Any, shoot: Shoot) -> None:
    name = console.pipeline_name("greetings")
    echo = console.actors.echo
    texts = ("hello", "fail: no greeting", "hi", "fail: again")
    runs = [console.app.start(step(echo, text), name=name) for text in texts]
    for run in runs:
        run.wait(timeout_s=30)

    page.goto(f"{console.url}/runs")
    page.get_by_label("Pipeline").fill(name)
    page.get_by_label("State").select_option("failed")
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(r"state=failed"))
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.locator(".state")).to_have_text(["failed", "failed"])
    expect(rows.first).to_contain_text("ValueError: fail: again")
    shoot("failed")

    page.get_by_label("Started before").select_option("an hour ago")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"until=1h"))
    expect(page.get_by_text("No runs match this filter.")).to_be_visible()


def test_a_chord_run_shows_its_members_and_callback_in_the_graph(console: Console, page: Any, shoot: Shoot) -> None:
    actors = console.actors
    run = console.app.start(chord(for_each(actors.double, range(12)), then=step(actors.total)), name="album")
    assert run.wait(timeout_s=30).state == "succeeded"

    page.goto(f"{console.url}/runs/{run.id}")

    graph = page.get_by_label("Graph")
    members = graph.locator(".parallel[data-kind=group]")
    expect(members.locator(".kind")).to_contain_text("members · group of 12")
    expect(members.locator("a.step")).to_have_count(8)
    expect(members.locator(".folded")).to_have_text("+ 4 more: 4 succeeded")
    callback = graph.locator("a.step", has=page.locator(".role", has_text="callback"))
    expect(callback.locator(".actor")).to_have_text("total")
    expect(callback).to_have_attribute("data-state", "succeeded")
    trace_id = run.status().trace_id
    trace = page.get_by_role("link", name=str(trace_id))
    expect(trace).to_have_attribute("href", f"{JAEGER_URL}/trace/{trace_id}")
    expect(trace).to_have_attribute("target", "_blank")
    shoot("graph")

    members.locator(".folded").click()
    expect(members.locator("a.step")).to_have_count(12)
    callback.click()
    expect(page.get_by_label("Step")).to_contain_text("Step 0.1 · total")
    expect(page.get_by_label("Step").locator("pre.json").last).to_have_text("132")
    shoot("callback")


def test_a_dead_letter_replayed_from_the_page_lets_its_run_succeed(console: Console, page: Any, shoot: Shoot) -> None:
    actors = console.actors
    actors.broken.set()
    run = console.app.start(chain(step(actors.flaky, 41), actors.double), name=console.pipeline_name("payments"))
    assert run.wait(timeout_s=30).state == "failed"

    page.goto(f"{console.url}/runs/{run.id}")
    detail = page.get_by_label("Step")
    expect(detail).to_contain_text("ConnectionError: the payment service refused order 41")
    expect(detail.locator("pre.traceback")).to_contain_text("Traceback")
    shoot("failed-run")

    page.goto(f"{console.url}/dead-letters?queue=flaky")
    letter = page.locator("tr", has=page.locator(f"a[href='/runs/{run.id}?step=0.0']"))
    expect(letter).to_contain_text("retries exhausted")
    shoot("dead-letters")

    unlock(page, console.token)
    actors.broken.clear()
    letter.get_by_role("button", name="Replay").click()
    expect(page.locator("#flash")).to_contain_text("Replayed. replayed.")
    assert run.wait(timeout_s=30).state == "succeeded"
    expect(letter).to_have_count(0)

    page.goto(f"{console.url}/runs/{run.id}")
    expect(page.locator(".run-head .state")).to_have_text("succeeded")
    expect(page.get_by_label("Result")).to_contain_text("84")
    shoot("replayed")

    page.goto(f"{console.url}/runs/{run.id}?step=0.0")
    started_with = page.get_by_label("Input").locator(".first-step[data-node='0.0']")  # built on the spot
    expect(started_with).to_contain_text("flaky")
    expect(started_with.locator("pre.json")).to_contain_text('"args": [\n    41\n  ]')
    detail = page.get_by_label("Step")
    history = detail.locator("table.history tr[data-kind]")
    expect(history).to_have_count(3)
    expect(history.nth(0)).to_contain_text("Attempt 1")
    expect(history.nth(0).locator(".state")).to_have_text("failed")
    expect(detail.locator("table.history tr.error")).to_have_text(
        "ConnectionError: the payment service refused order 41"
    )
    expect(history.nth(1)).to_contain_text("Replayed")
    expect(history.nth(1)).to_contain_text("(retries exhausted)")
    expect(history.nth(2).locator(".state")).to_have_text("succeeded")
    logs = detail.locator("details.logs")
    expect(logs).to_have_count(2)
    asked = "WARNING tests.console  asking the payment service about order 41"
    expect(logs.nth(0).locator(".record").first).to_contain_text(asked)
    expect(logs.nth(0).locator(".record.lv-error")).to_contain_text("Traceback")
    expect(logs.nth(1).locator(".record")).to_have_count(1)
    expect(logs.nth(1)).to_have_attribute("open", "")
    shoot("history-and-logs")


def dead_letters_of(console: Console, actor: str, runs: list[Any]) -> None:
    """Wait until each of ``runs`` (failed at ``actor``) has its dead letter (published after the run fails)."""
    for run in runs:
        assert run.wait(timeout_s=30).state == "failed"
    deadline = time.monotonic() + 30
    while {letter.reason.run_id for letter in console.app.dead_letters.list(actor)} < {run.id for run in runs}:
        assert time.monotonic() < deadline, "the runs' dead letters did not arrive within 30 s"
        time.sleep(0.05)


def test_every_dead_letter_shown_is_replayed_after_a_confirmation(console: Console, page: Any, shoot: Shoot) -> None:
    actors = console.actors
    actors.broken.set()
    name = console.pipeline_name("refunds")
    runs = [console.app.start(chain(step(actors.flaky, x), actors.double), name=name) for x in (1, 2, 3)]
    dead_letters_of(console, "flaky", runs)

    page.goto(f"{console.url}/dead-letters?queue=flaky&reason=retries+exhausted")
    for run in runs:
        expect(page.locator(f"a[href='/runs/{run.id}?step=0.0']")).to_be_visible()
    unlock(page, console.token)
    actors.broken.clear()
    page.get_by_role("button", name="Replay all shown").click()
    question = page.locator(".bulk .confirm")
    expect(question).to_contain_text(re.compile(r"Replay the \d+ dead letters shown\?"))
    shoot("confirm")
    question.get_by_role("button", name="Yes").click()

    expect(page.locator("#flash")).to_contain_text(re.compile(r"Replayed\. \d+ dead letters?\."))
    assert [run.wait(timeout_s=30).state for run in runs] == ["succeeded"] * 3
    expect(page.get_by_text("No dead letters match this filter.")).to_be_visible()
    shoot("replayed")


def test_purging_asks_first_and_deletes_the_queues_dead_letters_for_good(
    console: Console, page: Any, shoot: Shoot
) -> None:
    connect = console.actors.connect
    runs = [console.app.start(step(connect, db), name=console.pipeline_name("purged")) for db in ("a", "b")]
    dead_letters_of(console, "connect", runs)
    page.goto(f"{console.url}/dead-letters?queue=connect")
    rows = page.locator("table.letters tbody tr")
    expect(rows).not_to_have_count(0)
    unlock(page, console.token)

    page.get_by_role("button", name="Purge…").click()
    question = page.locator(".bulk .confirm")
    expect(question).to_contain_text("Delete every dead letter of connect for good? This cannot be undone.")
    question.get_by_role("button", name="No").click()
    expect(question).to_have_count(0)
    assert {letter.reason.run_id for letter in console.app.dead_letters.list("connect")} >= {r.id for r in runs}

    page.get_by_role("button", name="Purge…").click()
    shoot("confirm")
    page.locator(".bulk .confirm").get_by_role("button", name="Purge for good").click()

    expect(page.locator("#flash")).to_contain_text(re.compile(r"Purged\. \d+ dead letters? deleted\."))
    expect(page.get_by_text("No dead letters match this filter.")).to_be_visible()
    assert console.app.dead_letters.list("connect") == []
    assert [run.status().state for run in runs] == ["failed", "failed"]  # purging leaves the runs as they ended


def test_a_running_run_is_cancelled_from_its_page(console: Console, page: Any, shoot: Shoot) -> None:
    run = console.app.start(step(console.actors.slow, 60.0), name=console.pipeline_name("export"))
    page.goto(f"{console.url}/runs/{run.id}")
    expect(page.locator(".run-head .state")).to_have_text("running")
    page.locator("a.step").click()
    expect(page.get_by_label("Step").locator("progress")).to_be_visible()

    unlock(page, console.token)
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Yes").click()

    expect(page.locator("#flash")).to_have_text("Run cancelled.")
    expect(page.locator(".run-head .state")).to_have_text("cancelled")
    assert run.status().state == "cancelled"
    shoot("cancelled")


def test_an_ended_run_is_re_run_from_its_page_which_opens_the_new_run(
    console: Console, page: Any, shoot: Shoot
) -> None:
    a = console.actors
    name = console.pipeline_name("rerun-page")
    console.app.register(name, chain(step(a.double), step(a.double)))
    run = console.app.run(name, 5)
    assert run.result(timeout_s=30) == 20
    page.goto(f"{console.url}/runs/{run.id}")
    expect(page.get_by_label("Input")).to_contain_text('"args": [\n    5\n  ]')

    unlock(page, console.token)
    page.get_by_role("button", name="Re-run").click()
    page.get_by_role("button", name="Yes").click()

    expect(page.locator(".run-head .facts")).to_contain_text(f"Re-run of{run.id}")
    new_id = page.url.rsplit("/", 1)[-1]
    assert new_id != run.id
    assert console.app.get_run(new_id).result(timeout_s=30) == 20
    shoot("re-run")


def test_an_action_without_the_right_token_is_refused(console: Console, page: Any, shoot: Shoot) -> None:
    run = console.app.start(step(console.actors.slow, 60.0), name=console.pipeline_name("refused"))
    page.goto(f"{console.url}/runs/{run.id}")
    expect(page.locator(".run-head .state")).to_have_text("running")

    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Yes").click()
    expect(page.locator("#flash")).to_contain_text("needs the console's token")

    unlock(page, "not-the-token")
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Yes").click()
    expect(page.locator("#flash")).to_contain_text("Refused (401)")
    expect(page.locator("#token-state")).to_have_text("Actions locked")
    shoot("refused")
    assert run.status().state == "running"
    run.cancel()


def test_values_from_runs_and_messages_show_as_text(console: Console, page: Any, shoot: Shoot) -> None:
    script = "<script>alert(1)</script>"
    echo = console.actors.echo
    name = "<b>" + console.pipeline_name("xss") + "</b>"
    shown = console.app.start(step(echo, script), name=name)
    failed = console.app.start(step(echo, "fail: <img src=x onerror=alert(2)>"), name=name)
    shown.wait(timeout_s=30)
    failed.wait(timeout_s=30)

    page.goto(f"{console.url}/runs?pipeline={name}")
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    expect(page.get_by_text(name).first).to_be_visible()
    expect(page.get_by_text("ValueError: fail: <img src=x onerror=alert(2)>")).to_be_visible()
    assert page.locator("main b, main img").count() == 0

    page.goto(f"{console.url}/runs/{shown.id}")
    expect(page.get_by_label("Result")).to_contain_text(f'"{script}"')
    assert page.locator("main script").count() == 0
    shoot("escaped")

    page.goto(f"{console.url}/dead-letters?queue=echo")
    letter = page.locator("tr", has=page.locator(f"a[href='/runs/{failed.id}?step=0.0']"))
    expect(letter).to_contain_text("ValueError: fail: <img src=x onerror=alert(2)>")
    letter.locator("a.mono").first.click()
    expect(page.locator("pre.json")).to_contain_text('"fail: <img src=x onerror=alert(2)>"')
    assert page.locator("main img").count() == 0


def test_an_error_with_brackets_shows_as_written_in_the_runs_list_and_on_the_run_page(
    console: Console, page: Any, shoot: Shoot
) -> None:
    error = "ValueError: fail: got [/x] (timeout_s, or [worker] time_limit_s)"
    name = console.pipeline_name("bracketed")
    run = console.app.start(step(console.actors.echo, error.removeprefix("ValueError: ")), name=name)
    assert run.wait(timeout_s=30).state == "failed"

    page.goto(f"{console.url}/runs?pipeline={name}")
    expect(page.locator(f"tr[data-run='{run.id}'] td.error")).to_have_text(error)
    page.goto(f"{console.url}/runs/{run.id}?step=0.0")
    expect(page.locator(".alert").first).to_have_text(f"Failed at step 0.0: {error}")
    expect(page.locator(".alert").nth(1)).to_have_text(error)
    shoot("bracketed")


def test_queues_and_live_workers(console: Console, page: Any, shoot: Shoot) -> None:
    console.actors.broken.set()
    stuck = console.app.start(step(console.actors.flaky, 5), name=console.pipeline_name("queues"))
    stuck.wait(timeout_s=30)
    for x in range(4):
        console.app.start(step(console.actors.double, x)).wait(timeout_s=30)

    page.goto(f"{console.url}/queues")
    expect(page.locator("table.workers tbody tr")).to_have_count(1)
    expect(page.locator("table.workers .state")).to_have_text("alive")
    expect(page.locator("p.note", has_text="No worker reads Dramatiq queue")).to_have_count(0)
    flaky = page.locator("table.queues tr", has=page.get_by_role("cell", name="flaky", exact=True))
    expect(flaky.locator("a.dead")).to_have_text(re.compile(r"[1-9]\d*"))
    double = page.locator("table.queues tr", has=page.get_by_role("cell", name="double", exact=True)).locator("td")
    expect(double.nth(4)).to_have_text(re.compile(r"[1-9]\d*"))  # consumers: the worker's
    expect(double.nth(5)).to_have_text(re.compile(r"\d+"))  # unacknowledged, from the worker's heartbeats
    expect(double.nth(6)).to_have_text(re.compile(r"\d+"))  # being processed now, from the worker's metrics
    expect(page.locator("table.queues thead")).to_contain_text("ConsumersUnackedProcessing")
    rate = double.nth(8)
    deadline = time.monotonic() + 30
    while not re.fullmatch(r"0*[1-9]\d*\.\d|0\.[1-9]", rate.text_content() or ""):
        assert time.monotonic() < deadline, f"no processing rate shown after 30 s: {rate.text_content()!r}"
        console.app.start(step(console.actors.double, 1)).wait(timeout_s=30)
    shoot("queues")
    # A step running holds its delivery unacknowledged until it ends (the worker's heartbeats tell).
    held = console.app.start(step(console.actors.slow, 3.0))
    unacked = page.locator("table.queues tr", has=page.get_by_role("cell", name="slow", exact=True)).locator(
        "[data-count=unacked]"
    )
    expect(unacked).to_have_text("1", timeout=10_000)
    assert held.wait(timeout_s=30).state == "succeeded"
    expect(unacked).to_have_text("0", timeout=10_000)


def test_plain_messages_are_counted_on_the_queues_page_which_leads_to_their_dead_letters(
    console: Console, page: Any, shoot: Shoot
) -> None:
    notify = console.actors.notify
    sent = [notify.send("hello"), notify.send("hi"), notify.send("fail: a plain message")]  # in no run

    page.goto(f"{console.url}/queues")
    row = page.locator("table.queues tr[data-queue]", has=page.get_by_role("cell", name="notify", exact=True))
    expect(row.locator("[data-count=processed]")).to_have_text("3")
    expect(row.locator("[data-count=failed]")).to_have_text("1")
    expect(row.locator("[data-count=dead-lettered]")).to_have_text("1")
    expect(row.locator("[data-count=mean]")).to_have_text(re.compile(r"\d+ ms|\d+\.\d s"))
    throughput = page.locator("figure[data-chart=throughput]")
    expect(throughput.locator("path[data-series=processed]")).to_have_attribute("d", re.compile(r"^M[\d.]+,[\d.]+"))
    assert float(throughput.locator(".key").get_attribute("data-total") or 0) >= 3
    failures = page.locator("figure[data-chart=failures] .key[data-series=dead-lettered]")
    assert float(failures.get_attribute("data-total") or 0) >= 1
    expect(page.locator("figure[data-chart=latency] path[data-series=slowest]")).to_have_attribute("d", re.compile("M"))
    shoot("queues-last-hour")

    row.locator("a.lettered").click()
    expect(page).to_have_url(re.compile(r"/dead-letters\?queue=notify$"))
    letter = page.locator(f"tr[data-letter='{sent[2].message_id}']")
    expect(letter).to_contain_text("ValueError: fail: a plain message")
    expect(letter.locator("td").nth(3)).to_have_text("\u2013")  # no run: a plain message
    shoot("plain-dead-letter")


def test_a_chord_under_way_as_the_readme_pictures_it(console: Console, page: Any) -> None:
    a = console.actors
    # A step, a fan-out, then a chord of 16 members (three of them slow) and its callback.
    members = group(*(step(a.slow, 30.0 if i in (5, 9, 12) else 0.1) for i in range(16)))
    run = console.app.start(
        chain(step(a.double, 1), fan_out(a.double, a.total), chord(members, then=step(a.total))), name="album_publish"
    )
    page.set_viewport_size({"width": 1280, "height": 760})
    page.goto(f"{console.url}/runs/{run.id}?step=0.2.5")

    graph = page.get_by_label("Graph")
    expect(graph.locator(".parallel[data-kind=group] .kind")).to_contain_text("13/16 done", timeout=30_000)
    expect(graph.locator("a.step[data-state=running]")).to_have_count(3)
    expect(graph.locator("a.step[data-state=running] progress").first).to_be_visible()
    expect(graph.locator("a.step", has=page.locator(".role", has_text="callback"))).to_have_attribute(
        "data-state", "pending"
    )
    trace_id = run.status().trace_id
    expect(page.get_by_role("link", name=str(trace_id))).to_be_visible()
    expect(page.get_by_label("Step").locator("dd.mono").last).to_contain_text(":")  # its worker
    README_PICTURE.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(README_PICTURE))
    run.cancel()


def test_a_run_is_opened_by_the_start_of_its_id_from_the_runs_page(console: Console, page: Any, shoot: Shoot) -> None:
    name = console.pipeline_name("found")
    keys = keys_of_runs_that_begin_alike(console.app.settings.namespace, name)
    runs = [console.app.start(step(console.actors.double, 1), name=name, idempotency_key=key) for key in keys]
    for run in runs:
        run.wait(timeout_s=30)

    page.goto(f"{console.url}/runs")
    page.get_by_label("Run id").fill(runs[0].id[:12])
    page.get_by_role("button", name="Open").click()
    expect(page.locator("p.crumbs")).to_contain_text(runs[0].id)
    shoot("opened")

    page.goto(f"{console.url}/runs")
    page.get_by_label("Run id").fill(runs[0].id[:2])
    page.get_by_role("button", name="Open").click()
    shown = page.locator("main")
    expect(shown).to_contain_text("give more of the id")
    for run in runs:
        expect(shown).to_contain_text(run.id)
    shoot("ambiguous")


def test_a_run_that_sampling_left_out_says_so_beside_its_trace_id(console: Console, page: Any, shoot: Shoot) -> None:
    # A caller whose own span was not sampled (a web request, say): the run follows its decision.
    caller = trace.SpanContext(trace_id=0xFACE, span_id=0xD1CE, is_remote=True, trace_flags=trace.TraceFlags(0))
    with trace.use_span(trace.NonRecordingSpan(caller)):
        left_out = console.app.start(step(console.actors.double, 4), name=console.pipeline_name("left-out"))
    traced = console.app.start(step(console.actors.double, 5), name=console.pipeline_name("traced"))
    left_out.wait(timeout_s=30)
    traced.wait(timeout_s=30)

    page.goto(f"{console.url}/runs/{left_out.id}")
    facts = page.locator(".run-head .facts")
    expect(facts.get_by_role("link", name=f"{0xFACE:032x}")).to_be_visible()
    expect(facts.locator(".hint")).to_have_text("not sampled: only its failed or slow steps are traced")
    shoot("not-sampled")

    page.goto(f"{console.url}/runs/{traced.id}")
    expect(facts.get_by_role("link", name=str(traced.status().trace_id))).to_be_visible()
    expect(facts.get_by_text("not sampled")).to_have_count(0)


def test_the_queues_page_says_so_when_no_worker_reads_the_framework_queue(
    page: Any, shoot: Shoot, delete_namespace: Callable[[str], None]
) -> None:
    app = build_app(console_settings(free_port()), span_exporter=InMemorySpanExporter())  # and no worker
    actors = declare_actors(app)
    try:
        app.start(step(actors.double, 1))  # declares the namespace's queues
        with served_console(app) as url:
            page.goto(f"{url}/queues")
            note = page.locator("p.note", has_text="No worker reads Dramatiq queue 'pipelines'")
            expect(note).to_have_count(1)
            expect(note).to_contain_text("the framework's own actors")
            double = page.locator("table.queues tr", has=page.get_by_role("cell", name="double", exact=True))
            expect(double.locator("td").nth(4)).to_have_text("0")  # consumers: none
            shoot("unread-framework-queue")
    finally:
        app.close()
        delete_namespace(app.settings.namespace)


def test_a_dead_letter_is_opened_by_the_start_of_its_id_and_an_ambiguous_start_lists_the_letters(
    console: Console, page: Any, shoot: Shoot
) -> None:
    shared = new_message_id()[:14]  # two plain messages whose ids share their first 14 characters
    rest = new_message_id()[15:]
    ids = [f"{shared}a{rest}", f"{shared}b{rest}"]
    echo = console.actors.echo
    for letter_id in ids:
        console.app.broker.enqueue(echo.message("fail: a letter begun alike").copy(message_id=letter_id))
    deadline = time.monotonic() + 30
    while not set(ids) <= {letter.id for letter in console.app.dead_letters.list("echo")}:
        assert time.monotonic() < deadline, "the two dead letters did not arrive within 30 s"
        time.sleep(0.05)

    page.goto(f"{console.url}/dead-letters/{ids[0][:16]}")
    expect(page.locator("main")).to_contain_text(ids[0])
    expect(page.locator("main")).to_contain_text("ValueError: fail: a letter begun alike")
    expect(page.locator("main")).not_to_contain_text(ids[1])
    shoot("opened")

    page.goto(f"{console.url}/dead-letters/{shared}")
    shown = page.locator("main")
    expect(shown).to_contain_text(f"'{shared}' begins the ids of 2 dead letters")
    expect(shown).to_contain_text("give more of the id")
    for letter_id in ids:
        expect(shown).to_contain_text(letter_id)
    shoot("ambiguous")

    answer = page.request.get(f"{console.url}/api/dead-letters/{shared}")
    assert answer.status == 400
    assert answer.json() == {
        "error": f"{shared!r} begins the ids of 2 dead letters ({ids[0]}, {ids[1]}); give more of the id."
    }
