"""The Kubernetes manifests: valid against the official schemas (KEDA's kinds against deploy/kubernetes/
schemas/keda.json), and consistent with the code: real queues, real settings, real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pipelines.config.problems import ENV_PREFIX
from pipelines.config.settings import Settings
from pipelines.observability.metrics_http import HEALTH_PATH

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
KEDA_SCHEMA = json.loads((MANIFESTS / "schemas" / "keda.json").read_text())
KUBERNETES_VERSION = "1.30"


def documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(MANIFESTS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def named(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents() if doc["kind"] == kind}


@pytest.fixture(scope="module")
def actor_queues() -> dict[str, Any]:
    """Every RabbitMQ queue and Dramatiq queue the shipped actors declare, in the default namespace."""
    script = (
        "import json, actors; t = actors.broker.topology; "
        "print(json.dumps({'rabbitmq': [q for qs in t.consume_queues.values() for q in qs], "
        "'dramatiq': sorted({a.queue_name for a in actors.broker.actors.values()})}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env |= {"PIPELINES_BROKER__URL": "memory://", "PIPELINES_STORE__URL": "memory://"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_for_its_kind(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(doc, KEDA_SCHEMA)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_an_invalid_manifest_is_caught() -> None:
    deployment = json.loads(json.dumps(named("Deployment")["pipelines-worker"]))
    deployment["spec"]["replicas"] = "two"
    scaled = json.loads(json.dumps(named("ScaledObject")["pipelines-worker"]))
    scaled["spec"]["triggers"][0]["metadata"]["mode"] = "QueueSize"

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, KEDA_SCHEMA)


def test_autoscalers_target_the_workers_and_watch_queues_that_exist(actor_queues: dict[str, Any]) -> None:
    deployments = named("Deployment")
    scaled = [*named("ScaledObject").values(), *named("HorizontalPodAutoscaler").values()]
    watched = [t["metadata"]["queueName"] for s in named("ScaledObject").values() for t in s["spec"]["triggers"]]
    watched += [
        m["external"]["metric"]["selector"]["matchLabels"]["queue"]
        for h in named("HorizontalPodAutoscaler").values()
        for m in h["spec"]["metrics"]
    ]

    assert {s["spec"]["scaleTargetRef"]["name"] for s in scaled} <= set(deployments)
    assert set(watched) <= set(actor_queues["rabbitmq"])


def workers() -> dict[str, dict[str, Any]]:
    """The Deployments that run `dramatiq` workers (the scheduler is the other one)."""
    return {
        name: deployment
        for name, deployment in named("Deployment").items()
        if deployment["spec"]["template"]["spec"]["containers"][0]["command"][0] == "dramatiq"
    }


def test_the_workers_serve_every_queue_once_and_read_real_settings(actor_queues: dict[str, Any]) -> None:
    served: list[str] = []
    for deployment in workers().values():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        command = container["command"]
        served += command[command.index("--queues") + 1 :]
        for variable in container["env"]:
            if variable["name"].startswith(ENV_PREFIX):
                assert _is_setting(variable["name"]), f"{variable['name']} is no setting"
        # The grace period outlasts the worker's own shutdown timeout, so the pod is not killed first.
        timeout_ms = int(command[command.index("--worker-shutdown-timeout") + 1])
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] * 1000 > timeout_ms

    assert sorted(served) == actor_queues["dramatiq"]


def _is_setting(env_name: str) -> bool:
    """Whether PIPELINES_<SECTION>__<KEY> (or PIPELINES_<KEY>) names a field of Settings."""
    *sections, key = env_name.removeprefix(ENV_PREFIX).lower().split("__")
    model: Any = Settings
    for name in sections:
        field = model.model_fields.get(name)
        if field is None:
            return False
        model = field.annotation
    return key in model.model_fields


def test_one_scheduler_runs_the_periodic_jobs_with_the_workers_settings() -> None:
    [scheduler] = [d for d in named("Deployment").values() if d not in workers().values()]
    spec = scheduler["spec"]
    container = spec["template"]["spec"]["containers"][0]
    worker = next(iter(workers().values()))["spec"]["template"]["spec"]["containers"][0]

    assert container["command"] == ["pipelines", "scheduler", "actors"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"  # a rollout never runs two schedulers
    assert container["image"] == worker["image"]
    settings = [v for v in worker["env"] if v["name"].startswith(ENV_PREFIX)]
    assert [v for v in container["env"] if v["name"].startswith(ENV_PREFIX)] == settings


@pytest.mark.parametrize("name", sorted(named("Deployment")))
def test_every_deployment_is_probed_on_the_health_path_of_its_metrics_port(name: str) -> None:
    container = named("Deployment")[name]["spec"]["template"]["spec"]["containers"][0]
    env = {v["name"]: v.get("value") for v in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    assert env["PIPELINES_METRICS__ENABLED"] == "true"
    assert env["PIPELINES_METRICS__HOST"] == "0.0.0.0"  # the kubelet probes from outside the container
    assert ports["metrics"] == int(env["PIPELINES_METRICS__PORT"])
    assert {"startupProbe", "livenessProbe"} <= set(container)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in container:
            assert container[probe]["httpGet"] == {"path": HEALTH_PATH, "port": "metrics"}


@pytest.mark.parametrize("name", sorted(workers()))
def test_keda_watches_every_queue_a_worker_consumes_as_pipelines_keda_prints_it(name: str) -> None:
    container = workers()[name]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    served = command[command.index("--queues") + 1 : command.index("--queues") + 1 + _queue_count(command)]
    scaled = named("ScaledObject")[name]
    value = scaled["spec"]["triggers"][0]["metadata"]["value"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env |= {"PIPELINES_BROKER__URL": "memory://", "PIPELINES_STORE__URL": "memory://"}
    env |= {v["name"]: v["value"] for v in container["env"] if v["name"] == "PIPELINES_NAMESPACE"}
    limits = ["--value", value, "--max", str(scaled["spec"]["maxReplicaCount"])]
    printed = subprocess.run(
        [str(Path(sys.executable).parent / "pipelines"), "keda", "--deployment", name, "--queues", *served, *limits],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert yaml.safe_load(printed) == scaled
    jsonschema.validate(yaml.safe_load(printed), KEDA_SCHEMA)


def _queue_count(command: list[str]) -> int:
    """How many words after --queues are queue names (up to the next option)."""
    rest = command[command.index("--queues") + 1 :]
    return next((i for i, word in enumerate(rest) if word.startswith("-")), len(rest))
