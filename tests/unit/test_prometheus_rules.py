"""The Prometheus alerting rules and the Grafana dashboard the package ships
(packaging/prometheus, packaging/grafana; /usr/share/healerd/...): promtool checks the
rules and runs their unit tests (Debian's prometheus package: tests/support/engine.sh
installs it), every metric and label their queries name is one healerd serves, and the
dashboard is a well-formed Grafana dashboard."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.core.lifecycle import ServiceState
from healerd.daemon.metrics import LoopMetrics
from healerd.vocabulary import EventKind
from tests.unit.harness.api import FakeDaemon

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "packaging" / "prometheus" / "healerd.rules.yml"
RULES_TEST = REPO / "packaging" / "prometheus" / "healerd.rules.test.yml"
DASHBOARD = REPO / "packaging" / "grafana" / "healerd-dashboard.json"

ALERTS = {
    "HealerdServiceCrashLooping",
    "HealerdServiceFailed",
    "HealerdServiceDegraded",
    "HealerdImageRolledBack",
    "HealerdConfigError",
    "HealerdEngineDown",
    "HealerdNotificationsFailing",
    "HealerdDown",
}
# Every series has them once scraped.
TARGET_LABELS = {"job", "instance"}
# Metrics that are not healerd's own: the scrape's.
SCRAPE_METRICS: dict[str, set[str] | None] = {"up": set()}
# The values a query may match, per (metric, label): the closed sets healerd says.
LABEL_VALUES = {
    ("healerd_service_state", "state"): {s.value for s in ServiceState},
    ("healerd_events_total", "kind"): {k.value for k in EventKind},
    ("healerd_notifications_total", "result"): {"sent", "failed", "dropped"},
}


# -- promtool ---------------------------------------------------------------------------------


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        why = (
            "no promtool: apt-get install --no-install-recommends prometheus"
            " (tests/support/engine.sh)"
        )
        if os.environ.get("CI"):
            pytest.fail(why + "; CI is set, so this is a failure, not a skip")
        pytest.skip(why)
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules() -> None:
    done = run_promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    done = run_promtool("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_test_that_fires_it_and_one_that_does_not() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for test in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case["exp_alerts"] else quiet).add(case["alertname"])
    assert fires == ALERTS
    assert quiet == ALERTS


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """The dashboard's queries as recording rules, Grafana's variables given values:
    `promtool check rules` parses each one."""
    rules = [
        {"record": f"healerd:dashboard_query_{i}", "expr": grafana_free(expr)}
        for i, expr in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def grafana_free(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced by what PromQL takes."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


# -- the names the queries use ----------------------------------------------------------------


def served_metrics(tmp_path: Path) -> dict[str, set[str] | None]:
    """Each metric name healerd's /metrics serves (as in the exposition: counters with
    _total, histograms' _bucket, _sum and _count), with its labels (None: unknown, a
    family without samples). Read from the daemon's own registry, wired as the Daemon
    wires it (tests/unit/harness/api.py), after every hook has fed it once."""
    d = FakeDaemon(tmp_path / "healerd.sock")
    (hooks,) = d.controller.hooks
    assert isinstance(hooks, LoopMetrics)
    hooks.on_action("create", "web", True)
    hooks.on_pass("web", 0.02)
    hooks.on_heal("web", 0.3, "in-place")
    d.controller.events.record(EventKind.IMAGE_ROLLBACK, "web", "rolled back")
    d.metrics.image_gc.on_removed(1024)
    d.metrics.notified("ops", "sent")
    labels: dict[str, set[str]] = {}
    names: dict[str, set[str] | None] = {}
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    for family in d.metrics.registry.collect():
        for suffix in suffixes.get(family.type, [""]):
            names[family.name + suffix] = None
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                labels.setdefault(sample.name, set()).update(sample.labels)
    return {**names, **labels}


def known_metrics(tmp_path: Path) -> dict[str, set[str] | None]:
    return {**served_metrics(tmp_path), **SCRAPE_METRICS}


STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# A name not followed by "(" (a function, an aggregation) nor part of a number.
NAME = re.compile(r"(?<![\w.$:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
KEYWORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    bare = STRING.sub('""', expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = GROUPING.sub(" ", bare)
    return {n for n in NAME.findall(bare) if n.lower() not in KEYWORDS}


def selectors(expr: str) -> list[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of each label matcher."""
    return [
        (metric, *m.groups())
        for metric, inside in SELECTOR.findall(expr)
        for m in MATCHER.finditer(inside)
    ]


def problems(expr: str, known: dict[str, set[str] | None]) -> list[str]:
    found = metric_names(expr)
    if not found:
        return [f"no metric found in {expr!r} (a query this test cannot read?)"]
    wrong = [f"{name}: no such metric in {expr!r}" for name in sorted(found - set(known))]
    for metric, label, op, value in selectors(expr):
        labels = known.get(metric)
        if labels is not None and label not in labels | TARGET_LABELS:
            wrong.append(f"{metric} has no label {label!r} ({expr!r})")
        allowed = LABEL_VALUES.get((metric, label))
        if allowed is None or "$" in value:
            continue
        values = value.split("|") if op in ("=~", "!~") else [value]
        wrong += [f"{metric}{{{label}={v!r}}}: never said" for v in values if v not in allowed]
    return wrong


def rules() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    assert group["name"] == "healerd"
    found: list[dict[str, Any]] = group["rules"]
    return found


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found: list[dict[str, Any]] = []
    for p in board["panels"]:
        found.append(p)
        found.extend(p.get("panels", []))
    return found


def dashboard_queries() -> list[str]:
    board = dashboard()
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", e) for e in exprs]


def test_the_rules_name_only_metrics_and_labels_healerd_serves(tmp_path: Path) -> None:
    known = known_metrics(tmp_path)
    wrong = [p for rule in rules() for p in problems(rule["expr"], known)]
    assert wrong == []


def test_the_dashboard_names_only_metrics_and_labels_healerd_serves(tmp_path: Path) -> None:
    known = known_metrics(tmp_path)
    wrong = [p for expr in dashboard_queries() for p in problems(expr, known)]
    assert wrong == []


def test_a_misspelled_metric_or_state_is_caught(tmp_path: Path) -> None:
    known = known_metrics(tmp_path)
    assert problems('healerd_service_state{state="Degraded"} == 1', known) == []
    assert problems("rate(healerd_heals_total[5m])", known) == []
    assert problems("healerd_heal_latency_seconds_bucket", known) == []
    assert problems("healerd_heals[5m]", known) != []  # a counter without _total
    assert problems("rate(healerd_engine_cals_total[5m])", known) != []
    assert problems('healerd_service_state{state="Crashloop"}', known) != []
    assert problems('healerd_events_total{kind=~"image-update|image-rolback"}', known) != []
    assert problems('healerd_events_total{service="web"}', known) != []


# -- the rules' shape -------------------------------------------------------------------------


def test_each_alert_has_a_severity_and_says_where() -> None:
    alerts = {rule["alert"]: rule for rule in rules()}
    assert set(alerts) == ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        notes = rule["annotations"]
        assert set(notes) >= {"summary", "description"}, name
        for text in (notes["summary"], notes["description"]):
            assert "{{ $labels.instance }}" in text, name
            if name.startswith("HealerdService"):
                assert "{{ $labels.service }}" in text, name


# -- the dashboard ----------------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"] == "healerd"
    assert 36 <= board["schemaVersion"] <= 41
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "instance" in variables
    every = panels(board)
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in every:
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        for t in [p, *p["targets"]]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            assert 'instance=~"$instance"' in t["expr"], (p["title"], t["expr"])
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24, p["title"]


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    queries = "\n".join(dashboard_queries())
    for needed in (
        "healerd_service_state",
        "healerd_heals_total",
        "healerd_service_restarts",
        "histogram_quantile(0.5, sum by (le) (rate(healerd_heal_latency_seconds_bucket",
        "histogram_quantile(0.95, sum by (le) (rate(healerd_heal_latency_seconds_bucket",
        "healerd_engine_calls_total",
        'kind=~"image-update|image-updated|image-rollback"',
        "healerd_notifications_total",
    ):
        assert needed in queries, needed
