"""One typed record per delivery carries what middleware decided about it, and nothing else does."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import dramatiq

from pipelines.handling.outcome import KeyClaim, MessageOutcome, Scratch, fail_message, outcome_of
from pipelines.handling.proxy import message_of
from pipelines.wire.codec import decode_message, encode_message

ROOT = Path(__file__).resolve().parents[3]


def proxy() -> dramatiq.broker.MessageProxy:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="default", actor_name="charge", args=(1,), kwargs={}, options={}
    )
    return dramatiq.broker.MessageProxy(message)


def test_a_delivery_starts_with_an_empty_outcome_and_keeps_the_same_one() -> None:
    message = proxy()

    outcome = outcome_of(message)
    outcome.duplicate = True
    outcome.scratch.key_claim = KeyClaim("charge:7", "holder-1")

    assert outcome == MessageOutcome(duplicate=True, scratch=Scratch(key_claim=KeyClaim("charge:7", "holder-1")))
    assert outcome_of(message) is outcome
    assert outcome_of(proxy()) == MessageOutcome()


def test_the_outcome_stays_with_the_delivery_and_a_message_sent_again_starts_afresh() -> None:
    message = proxy()
    outcome_of(message).retry_scheduled = True

    again = dramatiq.broker.MessageProxy(decode_message(encode_message(message_of(message))))

    assert again.options == message.options == {}
    assert outcome_of(again) == MessageOutcome()


def test_failing_a_message_on_purpose_records_why_and_the_error() -> None:
    message = proxy()
    error = ValueError("no such order")

    fail_message(message, "permanent error", error)

    assert message.failed
    assert (outcome_of(message).settlement.failure, outcome_of(message).settlement.failure_error) == (
        "permanent error",
        error,
    )


def _proxy_attribute_accesses(path: Path) -> list[str]:
    """``setattr``/``getattr`` calls on a message proxy in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2):
            continue
        target = node.args[0]
        if node.func.id not in ("setattr", "getattr") or not isinstance(target, ast.Name):
            continue
        if target.id in ("message", "proxy"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_middleware_and_brokers_set_no_attributes_of_their_own_on_message_proxies() -> None:
    linked = ROOT / "pipelines" / "middleware"  # the same files as middleware/
    core = [path for path in ROOT.joinpath("pipelines").rglob("*.py") if not path.is_relative_to(linked)]
    found = [
        hit for path in [*core, *ROOT.joinpath("middleware").glob("*.py")] for hit in _proxy_attribute_accesses(path)
    ]

    assert found == []


#: What Dramatiq keeps of a delivery and of its worker without a public name for it.
DRAMATIQ_INTERNALS = frozenset({"_message", "_exception", "work_queue", "_WorkQueueItem", "_queued_time"})


def _dramatiq_internals_read(path: Path) -> list[str]:
    """Where ``path`` reads one of Dramatiq's internals: as an attribute, or imported (a module's own
    names, such as a ``_message`` function, are not Dramatiq's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            named = node.attr
        elif isinstance(node, ast.alias):
            named = node.name
        else:
            continue
        if named in DRAMATIQ_INTERNALS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {named}")
    return found


def test_only_the_proxy_module_reads_what_dramatiq_keeps_of_deliveries_and_workers() -> None:
    linked = ROOT / "pipelines" / "middleware"  # the same files as middleware/
    adapter = ROOT / "pipelines" / "handling" / "proxy.py"
    core = [path for path in ROOT.joinpath("pipelines").rglob("*.py") if not path.is_relative_to(linked)]
    found = [
        hit
        for path in [*core, *ROOT.joinpath("middleware").glob("*.py")]
        if path != adapter
        for hit in _dramatiq_internals_read(path)
    ]

    assert found == []
    assert _dramatiq_internals_read(adapter) != []  # the check sees them where they are
