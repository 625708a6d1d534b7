"""The composition root: one middleware list in one order, one app per process, imports one way."""

from __future__ import annotations

import ast
from pathlib import Path

from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, ShutdownNotifications, TimeLimit
from periodiq import PeriodiqMiddleware

from pipelines.app import build_app, build_middleware
from pipelines.middleware import (
    Backoff,
    CorrelationId,
    DeadLetter,
    Idempotency,
    Leases,
    Metrics,
    Payloads,
    PipelineSteps,
    Profiles,
    Schedules,
    Timeout,
    Tracing,
)
from pipelines.runtime import Runtime
from pipelines.store import embedded_store
from pipelines.testing import embedded_settings

ROOT = Path(__file__).resolve().parents[2]
#: Modules above the core: the public surface, the composition root and what builds on it.
TOP = {
    "pipelines",
    "pipelines.app",
    "pipelines.cli",
    "pipelines.exposition",
    "pipelines.testing",
    "pipelines.top",
}


def test_the_middleware_run_in_one_documented_order() -> None:
    settings = embedded_settings()
    store = embedded_store(namespace="unit", retention_s=60)
    runtime = Runtime(store=store, lease_s=1, max_result_bytes=1)

    order = [type(m) for m in build_middleware(settings, runtime, store)]

    assert order == [
        Profiles,
        CorrelationId,
        AgeLimit,
        Timeout,
        TimeLimit,
        ShutdownNotifications,
        Callbacks,
        Pipelines,
        Payloads,
        Idempotency,
        PipelineSteps,
        Leases,
        Backoff,
        DeadLetter,
        PeriodiqMiddleware,
        Schedules,
    ]


def test_retry_and_time_limit_defaults_come_from_the_config_in_milliseconds() -> None:
    settings = embedded_settings(
        retries={"max_retries": 3, "min_backoff_s": 0.5, "max_backoff_s": 9}, worker={"time_limit_s": 12}
    )

    app = build_app(settings)
    backoff = next(m for m in app.broker.middleware if isinstance(m, Backoff))
    time_limit = next(m for m in app.broker.middleware if isinstance(m, TimeLimit))

    assert (backoff.max_retries, backoff.min_backoff_ms, backoff.max_backoff_ms) == (3, 500, 9000)
    assert time_limit.time_limit == 12000


def _imports(path: Path) -> set[str]:
    """Modules imported at run time (imports under ``if TYPE_CHECKING:`` are for annotations only)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from pipelines import naming` imports the submodule, not the package's public surface.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _above_the_core(name: str) -> bool:
    """Whether an imported name lives above the core (``from pipelines import X`` is above unless X is a module)."""
    if name.split(".", maxsplit=1)[0] in ("middleware", "actors"):
        return True
    if any(name == top or name.startswith(f"{top}.") for top in TOP - {"pipelines"}):
        return True
    parts = name.split(".")
    if parts[0] == "pipelines" and len(parts) == 2:
        package = ROOT / "pipelines"
        return not ((package / f"{parts[1]}.py").exists() or (package / parts[1]).is_dir())
    return False


def test_the_core_never_imports_the_middleware_the_actors_or_the_composition_root() -> None:
    for path in sorted((ROOT / "pipelines").rglob("*.py")):
        module = _module(path)
        if module in TOP:
            continue
        forbidden = sorted(name for name in _imports(path) if _above_the_core(name))
        assert not forbidden, f"{module} imports {forbidden}"


def test_the_middleware_import_only_the_core() -> None:
    for path in sorted((ROOT / "middleware").rglob("*.py")):
        forbidden = sorted(
            name for name in _imports(path) if _above_the_core(name) and not name.startswith("middleware")
        )
        assert not forbidden, f"{_module(path)} imports {forbidden}"


def test_tracing_and_metrics_come_right_after_the_correlation_id_when_enabled() -> None:
    settings = embedded_settings(telemetry={"enabled": True}, metrics={"enabled": True, "multiprocess": False})

    app = build_app(settings)
    order = [type(m) for m in app.broker.middleware]

    assert order[:5] == [Profiles, CorrelationId, Tracing, Metrics, AgeLimit]
    assert app.runtime.tracer is not None
    assert any(isinstance(listener, Metrics) for listener in app.runtime.listeners)
    app.close()
