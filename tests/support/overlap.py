"""Scenarios that mostly wait (a lease to lapse, a frozen worker to be frozen long enough), run in a
thread of their own while the module's other tests run, so that their waits overlap.

A module-scoped fixture starts one with :func:`in_background` and yields its :class:`Future` (the cases
of a parametrized test: :func:`side_by_side`); the test that uses the fixture waits for what the scenario
saw and makes its assertions on it. An autouse
fixture of the module calls :func:`start_with_the_first_test`, so that the scenario starts with the
module's first test rather than with its own. Each scenario has a namespace, worker processes and
tables of its own; only the waiting is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import ParamSpec, TypeVar

import pytest

P = ParamSpec("P")
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@contextmanager
def in_background(scenario: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[T]]:
    """``scenario(*args, **kwargs)`` run in a thread of its own; on leaving, waits until it is over (its
    own waits are bounded), whatever became of it, so that nothing it uses is removed under it."""
    with ThreadPoolExecutor(1, thread_name_prefix=getattr(scenario, "__name__", "scenario")) as pool:
        outcome = pool.submit(scenario, *args, **kwargs)
        try:
            yield outcome
        finally:
            outcome.exception()


@contextmanager
def side_by_side(
    cases: Mapping[K, Callable[[], T]], *, close: Callable[[T], None] | None = None
) -> Iterator[dict[K, Future[T]]]:
    """Each of ``cases`` run in a thread of its own (:func:`in_background`), all at once; on leaving, once
    they are over, ``close`` is called with what each that came through returned (one that raised cleaned
    up after itself)."""
    with ExitStack() as stack:
        outcomes = {key: stack.enter_context(in_background(case)) for key, case in cases.items()}
        try:
            yield outcomes
        finally:
            for outcome in outcomes.values():
                if outcome.exception() is None and close is not None:
                    close(outcome.result())


def start_with_the_first_test(request: pytest.FixtureRequest, fixture: str) -> None:
    """Set up the module-scoped ``fixture`` now (called by an autouse module-scoped fixture, so with the
    module's first test), when a test of the module that uses it is to run in this session."""
    if any(
        getattr(item, "module", None) is request.module and fixture in getattr(item, "fixturenames", ())
        for item in request.session.items
    ):
        request.getfixturevalue(fixture)
