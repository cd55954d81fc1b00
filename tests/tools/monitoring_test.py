"""deploy/k8s/monitoring: the alerting rules and the Grafana dashboard, offline (no cluster).

- The rules: `promtool check rules` on gecd-rules.yaml and on the groups of prometheusrule.yaml,
  `promtool test rules` (monitoring_rules_test.yaml: synthetic series that must and must not
  fire) against both, and prometheusrule.yaml is what tools/monitoring/prometheusrule.py writes
  from gecd-rules.yaml (no drift).
- The dashboard: its JSON structure (panels, ids, grid, datasources, variables, targets), every
  PromQL expression parsed by promtool (each becomes a recording rule of a temporary rules
  file), and every metric name that it and the rules read scraped from a running daemon (echo
  backend) and router, or recorded by gecd-rules.yaml, or one of the few kube-state-metrics
  series named below.

Exits 77 (ctest: skipped) without promtool (Debian's prometheus package, which
scripts/install_deps.sh installs). The scrape needs the built gecd ($GECD_BINARY or build/gecd).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

import gecd_daemon
import k8s_manifests as k8s

ROOT = gecd_daemon.ROOT
MONITORING = os.path.join(ROOT, "deploy", "k8s", "monitoring")
RULES = os.path.join(MONITORING, "gecd-rules.yaml")
PROMETHEUS_RULE = os.path.join(MONITORING, "prometheusrule.yaml")
DASHBOARD = os.path.join(MONITORING, "dashboards", "gecd.json")
RULES_TEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "monitoring_rules_test.yaml")
PROMTOOL = shutil.which("promtool")

sys.path.insert(0, os.path.join(ROOT, "tools", "monitoring"))
import prometheusrule  # noqa: E402

# Series gecd does not export that the rules and the dashboard read: kube-state-metrics'.
KUBE_STATE_METRICS = {
    "kube_deployment_status_replicas_unavailable",
    "kube_horizontalpodautoscaler_spec_target_metric",
    "kube_horizontalpodautoscaler_status_current_replicas",
    "kube_horizontalpodautoscaler_status_desired_replicas",
}

# What Grafana substitutes before a query reaches Prometheus: a range and a label value.
GRAFANA_SUBSTITUTIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                         "$namespace": ".*"}

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                   "or", "unless", "offset", "atan2", "inf", "nan"}


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def metric_names(expr):
    """The metric (and recorded series) names an expression reads: identifiers outside label
    matchers, strings, ranges and grouping lists that are not functions or keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        name = m.group(0)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or name.lower() in PROMQL_KEYWORDS:
            continue
        if m.start() > 0 and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e3, 5m)
        names.add(name)
    return names


def load_rules(path=RULES):
    with open(path) as f:
        return yaml.safe_load(f)


def rule_exprs():
    return [(r.get("alert") or r["record"], r["expr"])
            for g in load_rules()["groups"] for r in g["rules"]]


def dashboard_targets(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


class RulesTest(unittest.TestCase):
    def test_rules_file_is_valid(self):
        result = promtool("check", "rules", RULES)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_prometheusrule_is_generated_from_the_rules_file(self):
        with open(PROMETHEUS_RULE) as f:
            self.assertEqual(f.read(), prometheusrule.render(),
                             "prometheusrule.yaml is stale: run tools/monitoring/prometheusrule.py")
        crd = load_rules(PROMETHEUS_RULE)
        self.assertEqual(crd["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(crd["kind"], "PrometheusRule")
        self.assertEqual(crd["spec"]["groups"], load_rules()["groups"])

    def test_alerts_fire_when_they_must_and_only_then(self):
        result = promtool("test", "rules", RULES_TEST)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("SUCCESS", result.stdout)

    def test_prometheusrule_groups_pass_the_same_tests(self):
        """The groups as the operator reads them, written back as a rules file under the name
        the unit tests load."""
        crd = load_rules(PROMETHEUS_RULE)
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "deploy", "k8s", "monitoring"))
            os.makedirs(os.path.join(tmp, "tests", "tools"))
            with open(os.path.join(tmp, "deploy", "k8s", "monitoring", "gecd-rules.yaml"),
                      "w") as f:
                yaml.safe_dump({"groups": crd["spec"]["groups"]}, f)
            shutil.copy(RULES_TEST, os.path.join(tmp, "tests", "tools"))
            result = promtool("test", "rules",
                              os.path.join(tmp, "tests", "tools", os.path.basename(RULES_TEST)))
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_alerts_have_severity_summary_and_runbook(self):
        for group in load_rules()["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                with self.subTest(alert=rule["alert"]):
                    self.assertIn(rule["labels"]["severity"], ("critical", "warning"))
                    self.assertTrue(rule["annotations"]["summary"])
                    self.assertTrue(rule["annotations"]["description"])
                    anchor = rule["annotations"]["runbook"].split("#")
                    self.assertEqual(anchor[0], "docs/OPERATIONS.md")
                    with open(os.path.join(ROOT, anchor[0])) as f:
                        self.assertTrue("\n## Alerts and dashboard\n" in f.read(),
                                        f"{anchor[0]} has no section Alerts and dashboard")

    def test_every_alert_is_unit_tested(self):
        with open(RULES_TEST) as f:
            tested = {t["alertname"] for case in yaml.safe_load(f)["tests"]
                      for t in case.get("alert_rule_test", [])
                      if t.get("exp_alerts")}
        alerts = {r["alert"] for g in load_rules()["groups"] for r in g["rules"] if "alert" in r}
        self.assertEqual(alerts - tested, set(), "alerts no test sees fire")


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dashboard = json.load(f)

    def test_structure(self):
        d = self.dashboard
        for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
            self.assertIn(key, d)
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        cells = set()
        for panel in d["panels"]:
            with self.subTest(panel=panel["title"]):
                g = panel["gridPos"]
                self.assertTrue(0 <= g["x"] and g["w"] > 0 and g["x"] + g["w"] <= 24, g)
                self.assertTrue(g["y"] >= 0 and g["h"] > 0, g)
                for x in range(g["x"], g["x"] + g["w"]):
                    for y in range(g["y"], g["y"] + g["h"]):
                        self.assertNotIn((x, y), cells, "panels overlap")
                        cells.add((x, y))
                if panel["type"] == "row":
                    continue
                self.assertEqual(panel["datasource"], {"type": "prometheus", "uid": "${datasource}"})
                self.assertTrue(panel["targets"])
                ref_ids = [t["refId"] for t in panel["targets"]]
                self.assertEqual(len(ref_ids), len(set(ref_ids)))
                for t in panel["targets"]:
                    self.assertTrue(t["expr"].strip())
                    # Every $variable a query uses is defined (or one Grafana provides).
                    for var in re.findall(r"\$(\w+)", t["expr"]):
                        self.assertTrue(var in variables or var.startswith("__"), var)

    def test_the_issue_s_panels_are_there(self):
        exprs = " ".join(t["expr"] for _, t in dashboard_targets(self.dashboard))
        for needed in ("gecd_requests_total", "gecd_goodput_requests_total",
                       "histogram_quantile(0.5", "histogram_quantile(0.99",
                       "gecd_request_concurrency", "kube_horizontalpodautoscaler_spec_target_metric",
                       "gecd_batch_size", "gecd_engine_step_seconds", "gecd_requests_shed_total",
                       'code!="OK"', "gecd_route_endpoints"):
            self.assertIn(needed, exprs)

    def test_every_expression_parses(self):
        """promtool parses each query (Grafana's variables substituted) as a recording rule;
        its error names the panel and target."""
        rules = []
        exprs = [(f"{p['id']}_{t['refId']}", t["expr"])
                 for p, t in dashboard_targets(self.dashboard)]
        for v in self.dashboard["templating"]["list"]:
            if v["type"] == "query":
                # label_values(METRIC, LABEL) is Grafana's; the metric must parse.
                m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["definition"])
                self.assertIsNotNone(m, v["definition"])
                exprs.append((f"variable_{v['name']}", m.group(1)))
        for where, expr in exprs:
            for var, value in GRAFANA_SUBSTITUTIONS.items():
                expr = expr.replace(var, value)
            self.assertNotIn("$", expr, f"{where}: a variable left unsubstituted")
            rules.append({"record": f"dashboard:panel_{where}", "expr": expr})
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            f.flush()
            result = promtool("check", "rules", f.name)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn(f"SUCCESS: {len(rules)} rules found", result.stdout)

    def test_metric_names_are_found(self):
        self.assertEqual(metric_names(
            'sum by (code) (rate(gecd_requests_total{code!="OK"}[5m])) / 1e3 + '
            'histogram_quantile(0.99, sum by (le) (rate(x_bucket[$__rate_interval]))) or on(pod) y'),
            {"gecd_requests_total", "x_bucket", "y"})


class KustomizationTest(unittest.TestCase):
    """What `kubectl apply -k deploy/k8s/monitoring` creates (skipped without kubectl)."""

    def test_rule_and_dashboard_config_map(self):
        objects = k8s.kustomize(MONITORING)
        if objects is None:
            self.skipTest("no kubectl")
        by_kind = {(d["kind"], d["metadata"]["name"]): d for d in objects}
        self.assertEqual(set(by_kind), {("PrometheusRule", "gecd"), ("ConfigMap", "gecd-dashboard")})
        for doc in objects:
            self.assertEqual(doc["metadata"]["namespace"], "gecd")
        rule = by_kind[("PrometheusRule", "gecd")]
        self.assertEqual(rule["spec"]["groups"], load_rules()["groups"])
        config_map = by_kind[("ConfigMap", "gecd-dashboard")]
        # The label Grafana's dashboard sidecar (kube-prometheus-stack) selects by default.
        self.assertEqual(config_map["metadata"]["labels"]["grafana_dashboard"], "1")
        with open(DASHBOARD) as f:
            self.assertEqual(config_map["data"]["gecd.json"], f.read())
        validator = k8s.SchemaValidator()
        self.assertEqual(validator.errors(config_map), [])


class ScrapedNamesTest(unittest.TestCase):
    """Every metric the dashboard and the rules read, against a real scrape."""

    @classmethod
    def setUpClass(cls):
        gecd = gecd_daemon.find_binary("gecd", "GECD_BINARY")
        if gecd is None:
            raise unittest.SkipTest("no built gecd ($GECD_BINARY or build/gecd)")
        cls.scraped = set()
        with gecd_daemon.Daemon(gecd, overrides=("--set", "server.workers=1")) as daemon:
            cls.scraped |= cls.sample_names(daemon.metrics())
            with Router(gecd, daemon.target) as router:
                cls.scraped |= cls.sample_names(router.metrics())

    @staticmethod
    def sample_names(families):
        return {sample.split("{")[0] for _, samples in families.values() for sample, _ in samples}

    def known(self):
        recorded = {r["record"] for g in load_rules()["groups"] for r in g["rules"]
                    if "record" in r}
        return self.scraped | recorded | KUBE_STATE_METRICS

    def test_scrape_has_both_processes(self):
        self.assertIn("gecd_requests_total", self.scraped)
        self.assertIn("gecd_engine_step_seconds_bucket", self.scraped)
        self.assertIn("gecd_route_endpoints", self.scraped)

    def test_dashboard_reads_only_metrics_that_exist(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        for panel, target in dashboard_targets(dashboard):
            with self.subTest(panel=panel["title"], refId=target["refId"]):
                self.assertEqual(metric_names(target["expr"]) - self.known(), set())

    def test_rules_read_only_metrics_that_exist(self):
        for name, expr in rule_exprs():
            with self.subTest(rule=name):
                self.assertEqual(metric_names(expr) - self.known(), set())


class Router:
    """`gecd route` on free 127.0.0.1 ports in front of one daemon, until /readyz (an endpoint
    eligible)."""

    def __init__(self, gecd, target):
        self.metrics_port = gecd_daemon.free_port()
        self._dir = tempfile.mkdtemp(prefix="gecd-route-")
        config = os.path.join(self._dir, "gecd.yaml")
        with open(config, "w") as f:
            yaml.safe_dump({"route": {"listen": f"127.0.0.1:{gecd_daemon.free_port()}",
                                      "metrics_listen": f"127.0.0.1:{self.metrics_port}",
                                      "threads": 1,
                                      "endpoints": {"source": "static", "static": [target]}},
                            "logging": {"level": "warn"}}, f)
        self._log = open(os.path.join(self._dir, "route.log"), "w")
        self.process = subprocess.Popen([gecd, "route", "--config", config], stdout=self._log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def __enter__(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"gecd route exited {self.process.returncode}")
            if gecd_daemon.http_get(self.metrics_port, "/readyz", timeout=1.0)[0] == 200:
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("gecd route not ready in 30 s")

    def metrics(self):
        status, body = gecd_daemon.http_get(self.metrics_port, "/metrics")
        if status != 200:
            raise RuntimeError(f"gecd route: /metrics answered {status}")
        return gecd_daemon.parse_metrics(body)

    def __exit__(self, *exc):
        gecd_daemon.terminate(self.process)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    if PROMTOOL is None:
        print("SKIPPED: promtool is not installed (Debian package prometheus)")
        sys.exit(77)
    unittest.main()
