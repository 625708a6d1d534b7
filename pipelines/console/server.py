"""``pipelines ui``: serve the console with uvicorn until interrupted."""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from pipelines.app import App
from pipelines.console.web import build_console
from pipelines.observability import logs

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(app: App, *, host: str, port: int) -> int:
    """Serve the console for ``app`` on ``host``:``port`` (blocks; returns 0 once stopped)."""
    logs.install(app.settings.logging.format, app.settings.logging.level)
    if not is_loopback(host):
        logger.warning(
            "The console listens on %s: whoever reaches it sees runs and dead letters (actions need the token).",
            host,
        )
    if not app.settings.ui.token:
        logger.info("No [ui] token is set: the console is read-only (PIPELINES_UI__TOKEN enables its actions).")
    logger.info("Console of namespace %s on http://%s:%d/", app.settings.namespace, host, port)
    uvicorn.run(build_console(app, host=host), host=host, port=port, log_config=None, server_header=False)
    return 0
