"""The process's configured app, kept in the core so ``Node.run()`` finds it without importing the
composition root: ``pipelines.app`` sets it (``configure()``), and the core sees it only as a
:class:`ConfiguredApp`, what it needs of it. ``pipelines.current_app()`` gives it back as the App.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pipelines.errors import DefinitionError


class ConfiguredApp(Protocol):
    """What the core asks of the configured app: start a run, publish an event, name its pipelines."""

    @property
    def pipelines(self) -> Mapping[str, Any]:
        """The registered pipelines, by name."""

    def start(
        self,
        node: Any,
        *,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        deadline_s: float | None = None,
    ) -> Any: ...

    def publish(self, topic: str, payload: Any) -> str: ...

    async def publish_async(self, topic: str, payload: Any) -> str: ...


_app: ConfiguredApp | None = None


def set_app(app: ConfiguredApp) -> None:
    """Make ``app`` the process's app (called by ``pipelines.configure``)."""
    global _app  # noqa: PLW0603 - the process's app is the one deliberate global, like Dramatiq's broker
    _app = app


def get_app() -> ConfiguredApp | None:
    """The process's app, or None before ``configure()``."""
    return _app


def configured_app() -> ConfiguredApp:
    """The app ``pipelines.configure()`` set up.

    Raises:
        DefinitionError: ``configure()`` was not called in this process.
    """
    if _app is None:
        raise DefinitionError(
            "No app is configured: call pipelines.configure() (or import your actors package) first, "
            "or pass app= explicitly."
        )
    return _app
