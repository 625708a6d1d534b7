"""A worker's processes load what their configuration uses: memory is paid per process, and a worker
command runs several (its worker processes and its metrics process)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.backends import REDIS_URL


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_the_metrics_process_entry_point_loads_nothing_until_it_runs() -> None:
    # Worker processes import it while building their middleware, before prometheus-client may be loaded.
    loaded = _loaded_after("from pipelines.observability.metrics_process import serve_metrics")

    assert {m for m in loaded if m.startswith("pipelines")} == {
        "pipelines",
        "pipelines.observability",
        "pipelines.observability.metrics_process",
    }
    assert "prometheus_client" not in loaded


def test_the_metrics_process_reads_its_settings_without_loading_the_middleware_or_redis() -> None:
    loaded = _loaded_after(
        "import os\n"
        f"os.environ.update(PIPELINES_STORE__URL={REDIS_URL!r}, PIPELINES_METRICS__ENABLED='true')\n"
        "import pipelines.observability.exposition\n"
        "from pipelines.config.settings import load_settings\n"
        "from pipelines.config.urls import without_client_checks\n"
        "with without_client_checks():\n"
        "    settings = load_settings()\n"
        "assert settings.metrics.enabled"
    )

    # (Dramatiq it shares with the `dramatiq` command it is forked from, which has loaded it already.)
    assert not {"redis", "pipelines.stack", "pipelines.app", "pipelines.middleware", "cryptography"} & loaded


def test_the_store_url_is_still_checked_by_its_syntax_without_client_checks() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pipelines.config.settings import load_settings\n"
            "from pipelines.config.urls import without_client_checks\n"
            "with without_client_checks():\n"
            "    load_settings()",
        ],
        env={"PIPELINES_STORE__URL": "redis://cache/zero", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 1
    assert "expected the database as a number" in result.stderr


def test_a_worker_without_encryption_keys_does_not_load_cryptography() -> None:
    loaded = _loaded_after(
        "from pipelines.app import build_app\n"
        "from pipelines.config.settings import Settings\n"
        "app = build_app(Settings.from_values({'broker': {'url': 'memory://'}, 'store': {'url': 'memory://'}}))\n"
        "app.close()"
    )

    assert "pipelines.payloads.sealing" in loaded
    assert "cryptography.fernet" not in loaded
