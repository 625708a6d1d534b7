"""The process's configured app, kept in the core so ``Node.run()`` finds it without importing the
composition root (``pipelines.app`` sets it; nothing else does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.errors import DefinitionError

if TYPE_CHECKING:
    from pipelines.app import App

_app: App | None = None


def set_app(app: App) -> None:
    """Make ``app`` the process's app (called by ``pipelines.configure``)."""
    global _app  # noqa: PLW0603 - the process's app is the one deliberate global, like Dramatiq's broker
    _app = app


def get_app() -> App | None:
    """The process's app, or None before ``configure()``."""
    return _app


def current_app() -> App:
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
