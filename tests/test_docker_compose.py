"""docker-compose.yml stays consistent with config.toml, the settings model and the files it mounts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import BaseModel

from pipelines.config.problems import ENV_PREFIX
from pipelines.config.settings import CONFIG_PATH_ENV, Settings, load_settings
from pipelines.observability.metrics_http import HEALTH_PATH
from tests.support.backends import DEFAULT_POSTGRES_URL
from tests.support.tools import installed

ROOT = Path(__file__).resolve().parent.parent
CONFIG_TOML = ROOT / "config.toml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "rabbit-pipelines.json"
SERVICES = {
    "rabbitmq",
    "redis",
    "jaeger",
    "prometheus",
    "alertmanager",
    "grafana",
    "worker",
    "worker-long",
    "scheduler",
    "postgres",
}
ALERTMANAGER_YML = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
#: The page that says which versions compose pins and the suite tests.
VERSIONS_PAGE = ROOT / "docs" / "guides" / "production.md"
#: RabbitMQ release lines past the end of their community support (rabbitmq.com/release-information).
RABBITMQ_ENDED = {"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "4.0", "4.1"}
#: The RabbitMQ and Redis the test suite runs against here (the production guide says so; pytest's header says
#: what each run found).
RABBITMQ_TESTED = "3.10.8"
REDIS_TESTED = "7.0.15"
APP_SERVICES = ["worker", "worker-long", "scheduler"]
#: Images whose projects number their releases major.minor (PostgreSQL since 10).
TWO_PART_RELEASES = {"postgres"}


def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


@pytest.fixture
def compose() -> dict[str, Any]:
    return _load_yaml(ROOT / "docker-compose.yml")


@pytest.fixture
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Without the caller's PIPELINES_* variables, which would otherwise override config.toml here."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def config(clean_env: pytest.MonkeyPatch) -> Settings:
    return load_settings(CONFIG_TOML)


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the "NAME=value" list form
        env = dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def _published(service: dict[str, Any]) -> set[tuple[int, int]]:
    """(host port, container port) pairs of the short "[ip:]host:container" syntax."""
    pairs: set[tuple[int, int]] = set()
    for entry in service.get("ports", []):
        *_ip, host, container = str(entry).split(":")
        pairs.add((int(host), int(container.split("/")[0])))
    return pairs


def _bind_mounts(service: dict[str, Any]) -> dict[PurePosixPath, Path]:
    """Container path -> path in this repository, of every bind mount of the service."""
    mounts: dict[PurePosixPath, Path] = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = str(volume.get("source", "")), str(volume.get("target", ""))
        else:
            source, target, *_mode = str(volume).split(":")
        if source.startswith((".", "/")):
            mounts[PurePosixPath(target)] = (ROOT / source).resolve()
    return mounts


def _host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """The file of this repository a path in the service's container shows, through its bind mounts."""
    path = PurePosixPath(container_path)
    # The deepest mount wins, as in the container.
    for target, source in sorted(_bind_mounts(service).items(), key=lambda item: len(item[0].parts), reverse=True):
        if path == target or target in path.parents:
            return source.joinpath(*path.relative_to(target).parts)
    return None


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _setting_exists(env_name: str) -> bool:
    """Whether PIPELINES_<SECTION>__<KEY> (or PIPELINES_<KEY>) names a field of Settings."""
    model: type[BaseModel] = Settings
    *sections, key = env_name.removeprefix(ENV_PREFIX).lower().split("__")
    for name in sections:
        field = model.model_fields.get(name)
        if field is None or not _is_section(field.annotation):
            return False
        model = field.annotation
    field = model.model_fields.get(key)
    # A whole section cannot be set from one variable: only its keys can.
    return field is not None and not _is_section(field.annotation)


def _is_section(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_compose_defines_the_whole_local_stack(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) >= SERVICES


def test_worker_runs_dramatiq_on_the_actors_module(services: dict[str, dict[str, Any]]) -> None:
    assert str(services["worker"]["command"]).startswith("dramatiq actors")


def test_scheduler_runs_the_outage_proof_scheduler_on_the_actors_module(services: dict[str, dict[str, Any]]) -> None:
    assert str(services["scheduler"]["command"]).startswith("pipelines scheduler actors")


@pytest.mark.parametrize(("service", "section"), [("rabbitmq", "broker"), ("redis", "store")])
def test_service_is_published_on_the_port_config_toml_uses(
    services: dict[str, dict[str, Any]], config: Settings, service: str, section: str
) -> None:
    # config.toml points at 127.0.0.1, so the host port must match for local runs against the stack.
    port = urlsplit(getattr(config, section).url).port
    assert port is not None
    assert (port, port) in _published(services[service])


@pytest.mark.parametrize(
    ("app_service", "service", "variable"),
    [
        (app, service, variable)
        for app in APP_SERVICES
        for service, variable in (("rabbitmq", "PIPELINES_BROKER__URL"), ("redis", "PIPELINES_STORE__URL"))
    ],
)
def test_app_reaches_its_service_on_the_port_config_toml_uses(
    services: dict[str, dict[str, Any]], config: Settings, app_service: str, service: str, variable: str
) -> None:
    url = urlsplit(_environment(services[app_service])[variable])
    expected = urlsplit(config.broker.url if service == "rabbitmq" else config.store.url)
    assert (url.hostname, url.port) == (service, expected.port)


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_every_pipelines_variable_overrides_an_existing_setting(
    services: dict[str, dict[str, Any]], app_service: str
) -> None:
    names = [name for name in _environment(services[app_service]) if name.startswith(ENV_PREFIX)]
    assert names, f"{app_service} sets no {ENV_PREFIX}* variable"
    # PIPELINES_CONFIG names the file rather than a setting.
    unknown = [name for name in names if name != CONFIG_PATH_ENV and not _setting_exists(name)]
    assert unknown == []


@pytest.mark.parametrize(
    "env_name", ["PIPELINES_BROKER__URI", "PIPELINES_BROKER", "PIPELINES_NAMESPACE__URL", "PIPELINES_BROKER__URL__X"]
)
def test_a_misspelt_or_misplaced_variable_is_not_taken_for_a_setting(env_name: str) -> None:
    assert not _setting_exists(env_name)


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_app_environment_validates_and_points_at_the_compose_services(
    services: dict[str, dict[str, Any]], config: Settings, clean_env: pytest.MonkeyPatch, app_service: str
) -> None:
    for name, value in _environment(services[app_service]).items():
        clean_env.setenv(name, value)

    settings = load_settings(CONFIG_TOML)

    assert settings.namespace == config.namespace
    assert urlsplit(settings.broker.url).hostname == "rabbitmq"
    assert urlsplit(settings.store.url).hostname == "redis"
    # Prometheus scrapes the port of config.toml, from another container.
    assert settings.metrics.port == config.metrics.port
    assert settings.metrics.host == "0.0.0.0"


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_app_waits_for_healthy_rabbitmq_and_redis(services: dict[str, dict[str, Any]], app_service: str) -> None:
    depends_on = services[app_service]["depends_on"]
    for service in ("rabbitmq", "redis"):
        assert depends_on[service]["condition"] == "service_healthy"
        assert "healthcheck" in services[service]


def test_every_path_compose_mounts_or_builds_from_exists(services: dict[str, dict[str, Any]]) -> None:
    paths: list[Path] = []
    for service in services.values():
        build = service.get("build")
        if build is not None:
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            paths += [context, context / dockerfile]
        for volume in service.get("volumes", []):
            source = str(volume.get("source", "")) if isinstance(volume, dict) else str(volume).split(":")[0]
            # Anything else is a named volume, which Docker creates.
            if source.startswith((".", "/")):
                paths.append(ROOT / source)

    assert paths, "compose mounts and builds nothing"
    missing = [str(path) for path in paths if not path.exists()]
    assert missing == []


def test_prometheus_scrapes_worker_and_scheduler_on_the_metrics_port(config: Settings) -> None:
    prometheus = _load_yaml(ROOT / "deploy" / "prometheus" / "prometheus.yml")
    targets = {
        target
        for job in prometheus["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static["targets"]
    }
    assert {f"{app}:{config.metrics.port}" for app in APP_SERVICES} <= targets


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_telemetry_endpoint_points_at_a_port_jaeger_publishes(
    services: dict[str, dict[str, Any]], config: Settings, app_service: str
) -> None:
    endpoint = urlsplit(_environment(services[app_service])["PIPELINES_TELEMETRY__ENDPOINT"])
    jaeger_ports = {container for _, container in _published(services["jaeger"])}
    assert endpoint.hostname == "jaeger"
    assert endpoint.port in jaeger_ports
    # Jaeger takes OTLP over HTTP on 4318 and over gRPC on 4317: the port must match the protocol.
    assert endpoint.port == (4318 if config.telemetry.protocol == "http/protobuf" else 4317)


def test_grafana_datasource_points_at_the_prometheus_service(services: dict[str, dict[str, Any]]) -> None:
    datasources = _load_yaml(ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    url = urlsplit(datasources["datasources"][0]["url"])
    prometheus_ports = {container for _, container in _published(services["prometheus"])}
    assert url.hostname == "prometheus"
    assert url.port in prometheus_ports


def test_grafana_dashboards_query_the_provisioned_prometheus_datasource_by_its_uid() -> None:
    datasource = _load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"][0]
    assert datasource.get("uid"), "the provisioned datasource has no fixed uid for dashboards to refer to"
    dashboard = json.loads(DASHBOARD.read_text())

    references = [
        reference
        for panel in _panels(dashboard["panels"])
        for reference in [panel.get("datasource"), *(target.get("datasource") for target in panel.get("targets", []))]
        if reference is not None
    ]

    assert references, "the dashboard names no datasource"
    assert all(reference == {"type": "prometheus", "uid": datasource["uid"]} for reference in references)


def test_prometheus_mounts_its_config_and_the_alert_rules_it_loads(services: dict[str, dict[str, Any]]) -> None:
    prometheus = services["prometheus"]
    # The image reads /etc/prometheus/prometheus.yml unless the command names another file.
    assert "--config.file" not in str(prometheus.get("command", ""))
    config_file = _host_path(prometheus, "/etc/prometheus/prometheus.yml")
    assert config_file == (ROOT / "deploy" / "prometheus" / "prometheus.yml").resolve()

    rule_files = _load_yaml(config_file).get("rule_files", [])
    loaded = [_host_path(prometheus, path) for path in rule_files]

    assert None not in loaded, f"prometheus.yml loads rule files compose does not mount: {rule_files}"
    assert ALERTS.resolve() in loaded


def test_grafana_mounts_the_dashboard_provisioning_and_the_dashboards_it_loads(
    services: dict[str, dict[str, Any]],
) -> None:
    grafana = services["grafana"]
    provisioning = _host_path(grafana, "/etc/grafana/provisioning/dashboards")
    assert provisioning is not None, "grafana does not mount /etc/grafana/provisioning/dashboards"
    providers = [
        provider
        for provider_file in sorted(provisioning.glob("*.y*ml"))
        for provider in _load_yaml(provider_file).get("providers", [])
        if provider.get("type", "file") == "file"
    ]
    assert providers, f"no file dashboard provider in {provisioning}"

    folders = [_host_path(grafana, provider["options"]["path"]) for provider in providers]

    assert None not in folders, "a dashboard provider reads a folder grafana does not mount"
    assert DASHBOARD.resolve().parent in folders
    assert DASHBOARD.exists()


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_app_environment_enables_metrics_and_telemetry(
    services: dict[str, dict[str, Any]], clean_env: pytest.MonkeyPatch, app_service: str
) -> None:
    environment = _environment(services[app_service])
    for name, value in environment.items():
        clean_env.setenv(name, value)

    settings = load_settings(CONFIG_TOML)

    assert settings.metrics.enabled
    assert settings.telemetry.enabled
    # prometheus_client's multiprocess mode adds up the metrics of every worker process from this folder,
    # which must start empty: a tmpfs is, at every start of the container.
    multiproc_dir = environment["PROMETHEUS_MULTIPROC_DIR"]
    assert PurePosixPath(multiproc_dir).is_absolute()
    assert multiproc_dir in services[app_service].get("tmpfs", [])


def test_worker_and_scheduler_share_one_environment(services: dict[str, dict[str, Any]]) -> None:
    assert _environment(services["worker"]) == _environment(services["scheduler"])
    assert _environment(services["worker-long"]) == _environment(services["scheduler"])


def _queues_of(command: str) -> set[str]:
    words = command.split()
    return set(words[words.index("--queues") + 1 :]) if "--queues" in words else set()


def test_the_two_workers_serve_every_queue_of_the_actors_once(services: dict[str, dict[str, Any]]) -> None:
    declared = subprocess.run(
        [sys.executable, "-c", "import actors; print(' '.join(q for q in actors.broker.queues if '.' not in q))"],
        env={**os.environ, "PIPELINES_BROKER__URL": "memory://", "PIPELINES_STORE__URL": "memory://"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    general = _queues_of(str(services["worker"]["command"]))
    long_running = _queues_of(str(services["worker-long"]["command"]))

    assert long_running == {"long_running"}
    assert general | long_running == set(declared)
    assert general.isdisjoint(long_running)


@pytest.mark.parametrize("worker", ["worker", "worker-long"])
def test_compose_waits_longer_than_the_workers_shutdown_timeout(
    services: dict[str, dict[str, Any]], worker: str
) -> None:
    words = str(services[worker]["command"]).split()
    timeout_ms = int(words[words.index("--worker-shutdown-timeout") + 1])
    grace = str(services[worker]["stop_grace_period"])

    assert grace.endswith("s")
    assert int(grace.removesuffix("s")) * 1000 > timeout_ms


@pytest.mark.parametrize("service", sorted(SERVICES | {"console"}))
def test_every_service_has_a_health_check(services: dict[str, dict[str, Any]], service: str) -> None:
    check = services[service].get("healthcheck", {})
    assert check.get("test"), f"{service} has no health check"
    assert check["test"][0] in ("CMD", "CMD-SHELL")


@pytest.mark.parametrize("app_service", APP_SERVICES)
def test_the_app_services_are_healthy_by_the_health_path_of_their_metrics_port(
    services: dict[str, dict[str, Any]], config: Settings, app_service: str
) -> None:
    probe = " ".join(services[app_service]["healthcheck"]["test"])
    assert f"http://127.0.0.1:{config.metrics.port}{HEALTH_PATH}" in probe


def test_every_image_is_pinned_to_a_release(services: dict[str, dict[str, Any]]) -> None:
    pulled = {name: s["image"] for name, s in services.items() if "build" not in s}
    release = {True: r":v?\d+\.\d+(-\w+)?$", False: r":v?\d+\.\d+\.\d+(-\w+)?$"}
    unpinned = {
        name: image
        for name, image in pulled.items()
        if not re.search(release[image.split(":")[0] in TWO_PART_RELEASES], image)
    }
    assert pulled
    assert unpinned == {}


def test_the_apps_image_is_built_on_a_pinned_python_release() -> None:
    [base] = re.findall(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)

    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", base), base
    assert base in VERSIONS_PAGE.read_text()


def test_rabbitmq_is_a_supported_release_and_the_docs_say_which_versions_are_tested_and_pinned(
    services: dict[str, dict[str, Any]],
) -> None:
    version = services["rabbitmq"]["image"].split(":")[1].split("-")[0]
    page = VERSIONS_PAGE.read_text()

    assert ".".join(version.split(".")[:2]) not in RABBITMQ_ENDED
    assert f"RabbitMQ {version}" in page
    assert f"RabbitMQ {RABBITMQ_TESTED}" in page
    assert f"Redis {services['redis']['image'].split(':')[1]}" in page
    assert f"Redis {REDIS_TESTED}" in page


def test_redis_keeps_the_run_store_in_an_append_only_file_on_a_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    redis = services["redis"]
    command = redis["command"]
    volumes = {str(v).split(":")[1]: str(v).split(":")[0] for v in redis["volumes"]}

    assert command[command.index("--appendonly") + 1] == "yes"
    assert volumes["/data"] in compose["volumes"]  # a named volume, not the container's own layer


def test_prometheus_sends_its_alerts_to_the_alertmanager_service(services: dict[str, dict[str, Any]]) -> None:
    prometheus = _load_yaml(ROOT / "deploy" / "prometheus" / "prometheus.yml")
    targets = [t for a in prometheus["alerting"]["alertmanagers"] for s in a["static_configs"] for t in s["targets"]]
    ports = {container for _, container in _published(services["alertmanager"])}

    assert [urlsplit(f"//{t}").hostname for t in targets] == ["alertmanager"]
    assert {urlsplit(f"//{t}").port for t in targets} <= ports
    assert _host_path(services["alertmanager"], "/etc/alertmanager/alertmanager.yml") == ALERTMANAGER_YML.resolve()
    assert services["prometheus"]["depends_on"]["alertmanager"]["condition"] == "service_healthy"


def _amtool_check(path: Path) -> subprocess.CompletedProcess[str]:
    amtool = installed("amtool", "prometheus-alertmanager")
    return subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60, check=False)


def test_amtool_accepts_the_alertmanager_config() -> None:
    result = _amtool_check(ALERTMANAGER_YML)
    assert result.returncode == 0, result.stdout + result.stderr


def test_postgres_serves_the_tests_database_on_this_machines_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    postgres = services["postgres"]
    url = urlsplit(DEFAULT_POSTGRES_URL)
    environment = _environment(postgres)

    # A password-less login: nobody but this machine may reach it.
    assert postgres["ports"] == [f"127.0.0.1:{url.port}:5432"]
    assert environment["POSTGRES_HOST_AUTH_METHOD"] == "trust"
    assert environment["POSTGRES_DB"] == url.path.lstrip("/")
    assert url.username == "postgres"  # the image's superuser
    assert not any("postgres" in service.get("depends_on", {}) for service in services.values())  # tests only


def test_the_example_receivers_once_uncommented_are_a_valid_alertmanager_config(tmp_path: Path) -> None:
    # What an operator does: remove the "# " before an example's lines under the team receiver.
    example = re.compile(r"^(    )# ((?:webhook|slack|email)_configs:|  .*)$", flags=re.MULTILINE)
    uncommented = tmp_path / "alertmanager.yml"
    uncommented.write_text(example.sub(r"\1\2", ALERTMANAGER_YML.read_text()))

    result = _amtool_check(uncommented)

    assert result.returncode == 0, result.stdout + result.stderr
    [team] = _load_yaml(uncommented)["receivers"]
    assert {"webhook_configs", "slack_configs", "email_configs"} <= set(team)
