"""The alerting rules, the Prometheus configuration and the Grafana dashboard are valid and use the metrics contract.

promtool checks and unit-tests the rules (deploy/prometheus/alerts_test.yml); the metric names of every
alert and dashboard expression must be ones the worker and the scheduler expose.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.support.tools import installed

ROOT = Path(__file__).resolve().parent.parent.parent
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yml"
PROMETHEUS_YML = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "rabbit-pipelines.json"

# The metrics contract: what the worker and the scheduler expose on the [metrics] port.
COUNTERS = {
    "pipelines_messages_processed_total",
    "pipelines_messages_failed_total",
    "pipelines_messages_retried_total",
    "pipelines_messages_dead_lettered_total",
    "pipelines_messages_duplicates_skipped_total",
    "pipelines_runs_total",
}
HISTOGRAMS = {
    "pipelines_message_duration_seconds",
    "pipelines_run_duration_seconds",
    "pipelines_chord_wait_seconds",
}
GAUGES = {
    "pipelines_messages_in_flight",
    "pipelines_queue_depth",
    "pipelines_dead_letter_depth",
    "pipelines_worker_heartbeat_timestamp_seconds",
    "pipelines_workers",
    "pipelines_schedule_last_run_timestamp_seconds",
    "pipelines_schedule_interval_seconds",
}
CONTRACT = COUNTERS | HISTOGRAMS | GAUGES
# The series a Prometheus client exposes for those metrics.
SERIES = COUNTERS | GAUGES | {f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}

# Alert name -> the label its summary and description must name (None: the alert is about all workers).
ALERT_SUBJECTS = {
    "PipelinesQueueBacklog": "queue",
    "PipelinesHighErrorRate": "actor",
    "PipelinesDeadLetters": "queue",
    "PipelinesSlowSteps": "actor",
    "PipelinesNoWorkerHeartbeat": None,
    "PipelinesScheduleMissed": "actor",
}

# PromQL pieces that hold no metric name: strings, label matchers, ranges, grouping label lists.
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS_RE = re.compile(r"\{[^}]*\}")
_RANGE_RE = re.compile(r"\[[^\]]*\]")
_GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# An identifier that is not the tail of a number or duration (1e3, 5m) nor a Grafana variable ($__rate_interval).
_IDENTIFIER_RE = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan", "atan2"}
# Grafana's interval variables, which promtool does not know.
_GRAFANA_VARIABLE_RE = re.compile(
    r"\$(?:__rate_interval|__interval|__range)\b|\$\{__(?:rate_interval|interval|range)\}"
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (function and aggregation names excluded)."""
    text = _STRING_RE.sub('""', expr)
    text = _MATCHERS_RE.sub(" ", text)
    text = _RANGE_RE.sub(" ", text)
    text = _GROUPING_RE.sub(" ", text)
    names: set[str] = set()
    for match in _IDENTIFIER_RE.finditer(text):
        if match.group() in _KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(match.group())
    return names


def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def _alert_rules() -> list[dict[str, Any]]:
    return [rule for group in _load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside (collapsed) rows included."""
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title and query ref, expression) of every query of the dashboard."""
    return [
        (f"{panel['title']} {target.get('refId', '')}".strip(), target["expr"])
        for panel in _panels(_dashboard()["panels"])
        for target in panel.get("targets", [])
        if "expr" in target
    ]


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool binary; the test fails (never skips) without it."""
    return installed("promtool", "prometheus")


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result


def test_promtool_accepts_the_alerting_rules(promtool: str) -> None:
    result = _promtool(promtool, "check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(ALERT_SUBJECTS)} rules found" in result.stdout


def test_the_alerting_rules_pass_their_promtool_unit_tests(promtool: str) -> None:
    result = _promtool(promtool, "test", "rules", str(ALERTS_TEST))
    assert "SUCCESS" in result.stdout


def test_promtool_accepts_the_prometheus_config_with_the_rules_it_loads(promtool: str, tmp_path: Path) -> None:
    config = _load_yaml(PROMETHEUS_YML)
    rule_files = config.get("rule_files")
    assert rule_files, "prometheus.yml loads no rule file"
    # prometheus.yml names the rules as mounted in the container: point the copy at the repository's files.
    config["rule_files"] = [str(PROMETHEUS_DIR / PurePosixPath(path).name) for path in rule_files]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))

    result = _promtool(promtool, "check", "config", str(copy))

    assert str(ALERTS) in result.stdout, "the config copy did not load alerts.yml"


def test_the_rules_are_one_group_with_every_expected_alert() -> None:
    groups = _load_yaml(ALERTS)["groups"]
    assert [group["name"] for group in groups] == ["rabbit-pipelines"]
    assert sorted(rule["alert"] for rule in _alert_rules()) == sorted(ALERT_SUBJECTS)


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_every_alert_waits_has_a_severity_and_annotations_naming_its_subject(rule: dict[str, Any]) -> None:
    assert rule.get("for"), f"{rule['alert']} has no `for:`"
    assert rule["labels"]["severity"] in {"warning", "critical"}
    annotations = rule["annotations"]
    assert annotations.get("summary")
    assert annotations.get("description")
    subject = ALERT_SUBJECTS[rule["alert"]]
    if subject is not None:
        assert f"$labels.{subject}" in annotations["summary"]
        assert f"$labels.{subject}" in annotations["description"]


@pytest.mark.parametrize("alert", sorted(ALERT_SUBJECTS))
def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not(alert: str) -> None:
    cases = [
        case
        for test in _load_yaml(ALERTS_TEST)["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == alert
    ]
    firing = [expected for case in cases for expected in case.get("exp_alerts") or []]
    assert firing, f"no unit test where {alert} fires"
    assert all(expected.get("exp_annotations") for expected in firing), f"a firing {alert} case checks no annotations"
    assert any(not case.get("exp_alerts") for case in cases), f"no unit test where {alert} stays quiet"


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_every_alert_uses_only_contract_metrics(rule: dict[str, Any]) -> None:
    names = metric_names(rule["expr"])
    assert names, f"no metric found in {rule['expr']!r}"
    assert names - SERIES == set()


def test_the_dashboard_is_valid_json_with_the_expected_uid_and_schema() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "rabbit-pipelines"
    assert dashboard["schemaVersion"] == 39
    assert dashboard["title"]
    ids = [panel["id"] for panel in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids repeat"


@pytest.mark.parametrize(("query", "expr"), [pytest.param(query, expr, id=query) for query, expr in _dashboard_exprs()])
def test_every_dashboard_query_uses_only_contract_metrics(query: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{query}: no metric found in {expr!r}"
    assert names - SERIES == set(), query


@pytest.mark.parametrize(("query", "expr"), [pytest.param(query, expr, id=query) for query, expr in _dashboard_exprs()])
def test_every_dashboard_query_shows_the_chosen_namespaces_only(query: str, expr: str) -> None:
    selectors = re.findall(
        r"\b(pipelines_[a-z_]+)(\{[^}]*\})?", _STRING_RE.sub('""', expr.replace('"$namespace"', "NS"))
    )
    assert selectors, query
    assert all(matchers == "{pipelines_namespace=~NS}" for _, matchers in selectors), query


def test_the_dashboard_offers_the_namespaces_the_workers_serve() -> None:
    [variable] = _dashboard()["templating"]["list"]
    assert variable["name"] == "namespace"
    assert variable["query"]["query"] == "label_values(pipelines_workers, pipelines_namespace)"
    assert variable["includeAll"]


def test_the_dashboard_charts_every_contract_metric() -> None:
    used = {name for _, expr in _dashboard_exprs() for name in metric_names(expr)}
    families = used | {name.rsplit("_", 1)[0] for name in used if name.endswith(("_bucket", "_sum", "_count"))}
    assert CONTRACT - families == set()


def test_promtool_parses_every_dashboard_query(promtool: str, tmp_path: Path) -> None:
    # Each query becomes a recording rule, which `promtool check rules` parses.
    rules = [
        {"record": f"dashboard:query_{index}", "expr": _GRAFANA_VARIABLE_RE.sub("5m", expr)}
        for index, (_, expr) in enumerate(_dashboard_exprs())
    ]
    assert rules, "the dashboard has no query"
    rules_file = tmp_path / "dashboard_queries.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))

    _promtool(promtool, "check", "rules", str(rules_file))


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('max by (queue) (pipelines_queue_depth{queue="a.b"}) > 1000', {"pipelines_queue_depth"}),
        (
            'histogram_quantile(0.95, sum by (actor, le) (rate(pipeline_duration_bucket{le="1"}[$__rate_interval])))',
            {"pipeline_duration_bucket"},
        ),
        (
            "time() - max(x_seconds) > on (actor) group_left (pid) 2 * up offset 5m or absent(y)",
            {"x_seconds", "up", "y"},
        ),
        ("sum(rate(a_total[5m])) by (actor) / 1e3", {"a_total"}),
    ],
)
def test_metric_names_finds_every_selected_metric_and_nothing_else(expr: str, names: set[str]) -> None:
    # The contract checks above are only as good as this extraction: misspelt names must surface.
    assert metric_names(expr) == names
