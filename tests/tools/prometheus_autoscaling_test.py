"""The autoscaling signal through a real Prometheus (Debian's `prometheus` package): three local
`gecd serve` daemons (echo backend, engine.echo_step_ms so that a request takes tens of ms, two
workers each, so that a pod's value is the supervisor's sum over processes) stand in for three
pods. Prometheus scrapes each twice, once per job, as a cluster scraping both by annotation and
by ServiceMonitor would, with the namespace and pod labels Kubernetes discovery gives. One
gecd-load per daemon offers a different open-loop rate. Then, through the HTTP API:

- the Prometheus Adapter's rule (deploy/k8s/prometheus-adapter, rendered as the adapter renders
  it for an HPA asking for the three pods) gives, per pod and averaged over the load's window,
  the concurrency the load produced there: Little's law, that pod's achieved rate x the mean
  latency gecd-load measured, within TOLERANCE;
- KEDA's query (deploy/k8s/gecd/keda) gives their sum, and so per pod the same average the HPA
  computes from the adapter;
- without the rule's `avg by (instance)` each pod would count twice (the two jobs);
- the server's own view agrees: rate(gecd_request_duration_seconds_sum) per pod, which is
  Little's law again on the daemon's side.

`promtool check config` passes the generated Prometheus config. Loads last LOAD_S seconds, on
127.0.0.1 only; every process started here is stopped by its pid. scripts/prometheus_check.sh
runs this with the figures printed.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

import gecd_daemon
import k8s_manifests as k8s

PODS = ("gecd-a", "gecd-b", "gecd-c")
RATES = (60, 120, 180)  # requests/s offered to each pod, open loop
# Long steps make the concurrency high at low rates (little CPU for the clients on a shared
# box) and the client's own delays small beside the latency; not a divisor of the 1 s scrape,
# so that the samples fall on every phase of a step.
ECHO_STEP_MS = 97
WARMUP_S, LOAD_S = 5, 30
SCRAPE_INTERVAL_S = 1
JOBS = ("kubernetes-pods", "serviceMonitor/gecd/gecd/0")
# The per-pod values are averages of ~28 one-second samples of a gauge that one sample puts
# 17-30% off its mean (the table's sd column), so the average is within ~4-6%; the client's
# latency also counts what happens outside the daemon (the network stack, gecd-load's own
# threads, which a busy box delays: at 360 req/s and a 43 ms step, load average 7, the client
# saw 23% more than the daemons did).
TOLERANCE = 0.20
NAMESPACE = "gecd"
SENTENCES = os.path.join(k8s.ROOT, "bench", "short_sentences.txt")


def render_adapter_query(rule, pods):
    """The query the adapter sends for an HPA's Pods metric over `pods` of NAMESPACE."""
    matchers = f'namespace="{NAMESPACE}",pod=~"{"|".join(pods)}"'
    metric = rule["name"]["as"]
    return (rule["metricsQuery"].replace("<<.Series>>", metric)
            .replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod"))


class Prometheus:
    """A Prometheus on a free 127.0.0.1 port, its TSDB in a temporary directory."""

    def __init__(self, config, workdir):
        self.port = gecd_daemon.free_port()
        self.config_path = os.path.join(workdir, "prometheus.yml")
        with open(self.config_path, "w") as f:
            yaml.safe_dump(config, f)
        self._workdir = workdir
        self.process = None

    def check_config(self):
        return subprocess.run(["promtool", "check", "config", self.config_path],
                              capture_output=True, text=True, timeout=30)

    def start(self, timeout=30.0):
        self._log = open(os.path.join(self._workdir, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={self.config_path}",
             f"--storage.tsdb.path={os.path.join(self._workdir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.process.returncode}")
            if gecd_daemon.http_get(self.port, "/-/ready", timeout=1.0)[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError("prometheus not ready")

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.load(r)
        if answer.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {answer}")
        return answer["data"]

    def query(self, promql, at):
        """{labels as a sorted tuple: value} of an instant query at unix time `at`."""
        data = self.api("query", query=promql, time=f"{at:.3f}")
        return {tuple(sorted(r["metric"].items())): float(r["value"][1])
                for r in data["result"]}

    def stop(self):
        if self.process is not None:
            gecd_daemon.terminate(self.process)
            self._log.close()


def by_pod(result):
    return {dict(labels).get("pod"): v for labels, v in result.items()}


class PrometheusAutoscalingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gecd = gecd_daemon.find_binary("gecd", "GECD_BINARY")
        cls.load = gecd_daemon.find_binary("gecd-load", "GECD_LOAD_BINARY")
        missing = [n for n, p in (("gecd", cls.gecd), ("gecd-load", cls.load),
                                  ("prometheus", shutil.which("prometheus")),
                                  ("promtool", shutil.which("promtool"))) if not p]
        if missing:
            raise unittest.SkipTest(f"not installed or built: {', '.join(missing)}")
        adapter = k8s.load(os.path.join(k8s.DEPLOY, "prometheus-adapter", "configmap.yaml"))
        (cls.rule,) = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
        scaled_object = k8s.load(os.path.join(k8s.DEPLOY, "gecd", "keda", "scaledobject.yaml"))
        cls.keda_query = scaled_object["spec"]["triggers"][0]["metadata"]["query"]
        cls.workdir = tempfile.mkdtemp(prefix="gecd-prometheus-")
        cls.daemons, cls.prometheus, cls.loads = [], None, []
        try:
            cls.run_everything()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def run_everything(cls):
        for pod in PODS:
            daemon = gecd_daemon.Daemon(cls.gecd, "", [
                "--set", "server.workers=2", "--set", f"engine.echo_step_ms={ECHO_STEP_MS}",
                # No shedding on a predicted time (an hour's objective): a busy box's stalls would
                # refuse a few calls.
                "--set", "server.slo_p99_ms=3600000",
                "--set", "server.grace_period_ms=2000", "--set", "server.drain_quiet_ms=100"],
                name=pod)
            cls.daemons.append(daemon)
            daemon.start()
        config = {
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                       "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                       "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
            "scrape_configs": [{
                "job_name": job,
                "static_configs": [{"targets": [f"127.0.0.1:{d.metrics_port}"],
                                    "labels": {"namespace": NAMESPACE, "pod": pod}}
                                   for pod, d in zip(PODS, cls.daemons)]} for job in JOBS]}
        cls.prometheus = Prometheus(config, cls.workdir)
        cls.promtool = cls.prometheus.check_config()
        cls.prometheus.start()
        deadline = time.monotonic() + 30
        while True:  # every target scraped at least once
            targets = cls.prometheus.api("targets")["activeTargets"]
            if len(targets) == len(PODS) * len(JOBS) and all(
                    t["health"] == "up" for t in targets):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"targets not up: {targets}")
            time.sleep(0.5)
        cls.load_start = time.time()
        for pod, daemon, rate in zip(PODS, cls.daemons, RATES):
            out = os.path.join(cls.workdir, f"load-{pod}.json")
            log = open(os.path.join(cls.workdir, f"load-{pod}.log"), "w")
            process = subprocess.Popen(
                [cls.load, "--target", daemon.target, "--input", SENTENCES, "--qps", str(rate),
                 "--duration", f"{LOAD_S}s", "--warmup", f"{WARMUP_S}s", "--channels", "2",
                 "--threads", "1", "--seed", str(rate), "--json", out],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            cls.loads.append((pod, process, out, log))
        cls.reports = {}
        for pod, process, out, log in cls.loads:
            rc = process.wait(WARMUP_S + LOAD_S + 60)
            log.close()
            if rc != 0:
                raise RuntimeError(f"gecd-load for {pod} exited {rc}")
            with open(out) as f:
                cls.reports[pod] = json.load(f)
        # The measured window, less a second at each end for the load's start and drain.
        window_end = cls.load_start + WARMUP_S + LOAD_S - 1
        window_s = LOAD_S - 2
        cls.at = window_end

        def averaged(promql, over="avg_over_time"):
            return cls.prometheus.query(f"{over}(({promql})[{window_s}s:1s])", window_end)

        cls.adapter_query = render_adapter_query(cls.rule, PODS)
        cls.adapter = by_pod(averaged(cls.adapter_query))
        # What one reading (the HPA's, every 15 s) scatters by around that average.
        cls.adapter_sd = by_pod(averaged(cls.adapter_query, "stddev_over_time"))
        cls.adapter_series = cls.prometheus.api("series", **{"match[]": cls.rule["seriesQuery"]})
        cls.keda = averaged(cls.keda_query)
        cls.undeduplicated = by_pod(averaged(
            f'sum by (pod) (gecd_request_concurrency{{namespace="{NAMESPACE}"}})'))
        cls.server_little = by_pod(cls.prometheus.query(
            "sum by (pod) (avg by (namespace, pod, instance) "
            f"(rate(gecd_request_duration_seconds_sum[{window_s}s])))", window_end))
        cls.expected = {pod: r["achieved_qps"] * r["latency_ms"]["mean"] / 1000.0
                        for pod, r in cls.reports.items()}
        cls.print_table()

    @classmethod
    def print_table(cls):
        print(f"\n{len(PODS)} echo daemons (engine.echo_step_ms={ECHO_STEP_MS}, 2 workers), "
              f"Prometheus scrape {SCRAPE_INTERVAL_S}s x {len(JOBS)} jobs, gecd-load "
              f"{WARMUP_S}+{LOAD_S} s each; values averaged over the {LOAD_S - 2} s window")
        print("| pod | offered req/s | achieved req/s | mean latency ms | rate x latency "
              "| adapter per pod | error | one sample's sd | server rate(duration_sum) "
              "| without avg by instance |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for pod, rate in zip(PODS, RATES):
            r, e, a = cls.reports[pod], cls.expected[pod], cls.adapter.get(pod, float("nan"))
            print(f"| {pod} | {rate} | {r['achieved_qps']:.1f} | {r['latency_ms']['mean']:.1f} "
                  f"| {e:.2f} | {a:.2f} | {100 * (a - e) / e:+.1f}% "
                  f"| {cls.adapter_sd.get(pod, float('nan')):.2f} "
                  f"| {cls.server_little.get(pod, float('nan')):.2f} "
                  f"| {cls.undeduplicated.get(pod, float('nan')):.2f} |")
        total = sum(cls.expected.values())
        (keda,) = cls.keda.values() if len(cls.keda) == 1 else (float("nan"),)
        print(f"KEDA query (fleet total): {keda:.2f} against {total:.2f} "
              f"({100 * (keda - total) / total:+.1f}%); per pod (what the HPA compares with the "
              f"target): {keda / len(PODS):.2f}")

    @classmethod
    def tearDownClass(cls):
        for _, process, _, log in cls.loads:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
        if cls.prometheus is not None:
            cls.prometheus.stop()
        for daemon in cls.daemons:
            daemon.__exit__()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def test_promtool_passes_the_config(self):
        self.assertEqual(self.promtool.returncode, 0, self.promtool.stdout + self.promtool.stderr)

    def test_the_load_ran_as_offered(self):
        for pod, rate in zip(PODS, RATES):
            report = self.reports[pod]
            self.assertLessEqual(report["errors"], 0.01 * report["sent"],
                                 f"{pod}: {report['errors_by_code']}")
            self.assertGreater(report["achieved_qps"], 0.9 * rate, pod)
            # Latency is mostly the echo steps: the concurrency is the backend's, not noise.
            self.assertGreater(report["latency_ms"]["mean"], ECHO_STEP_MS / 2, pod)

    def test_the_adapter_finds_the_series_with_pod_labels(self):
        found = {(s["namespace"], s["pod"]) for s in self.adapter_series}
        self.assertEqual(found, {(NAMESPACE, pod) for pod in PODS})

    def test_the_adapter_rule_tracks_each_pods_concurrency(self):
        self.assertEqual(set(self.adapter), set(PODS))
        for pod in PODS:
            expected = self.expected[pod]
            self.assertAlmostEqual(self.adapter[pod], expected, delta=TOLERANCE * expected,
                                   msg=f"{pod}: adapter {self.adapter[pod]:.2f}, Little's law "
                                       f"{expected:.2f}")
        # The load differs per pod, so the values must too, in the same order.
        self.assertEqual(sorted(PODS, key=self.adapter.get), list(PODS))

    def test_keda_query_is_the_fleet_total(self):
        self.assertEqual(len(self.keda), 1, self.keda)
        (total,) = self.keda.values()
        expected = sum(self.expected.values())
        self.assertAlmostEqual(total, expected, delta=TOLERANCE * expected)
        self.assertAlmostEqual(total, sum(self.adapter.values()), delta=0.02 * total)

    def test_each_pod_counts_once_though_scraped_twice(self):
        for pod in PODS:
            self.assertAlmostEqual(self.undeduplicated[pod], len(JOBS) * self.adapter[pod],
                                   delta=0.02 * self.undeduplicated[pod], msg=pod)

    def test_the_servers_own_littles_law_agrees(self):
        for pod in PODS:
            self.assertAlmostEqual(self.server_little[pod], self.adapter[pod],
                                   delta=TOLERANCE * self.adapter[pod], msg=pod)


if __name__ == "__main__":
    unittest.main()
