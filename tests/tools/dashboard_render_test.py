"""tools/monitoring/render_dashboard.py against a fake Prometheus HTTP API with canned series:

- every target of deploy/k8s/monitoring/dashboards/gecd.json reaches /api/v1/query_range once,
  with the namespace and Grafana's built-ins substituted ($__rate_interval as Grafana derives it
  from the scrape interval), over the window and at the step asked;
- series are named by legendFormat; a query with no series adds nothing to its panel, and a
  panel none of whose queries returned a series is drawn as "No data";
- the latency panel carries its 1 s threshold line; the KV-cache panel's queue (refId B) and
  the router's calls in flight (refId C) have their own right axis, in their own unit; an axis
  starts at 0;
- the PNG is written, at the page's size;
- a query Prometheus rejects fails the run, naming the panel.

Exits 77 (ctest: skipped) without matplotlib (tools/route/requirements.txt, which
tests/tools/requirements.txt includes).
"""

import http.server
import json
import os
import struct
import sys
import tempfile
import threading
import unittest
import urllib.parse

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DASHBOARD = os.path.join(ROOT, "deploy", "k8s", "monitoring", "dashboards", "gecd.json")
sys.path.insert(0, os.path.join(ROOT, "tools", "monitoring"))

try:
    import render_dashboard
except ImportError as e:  # matplotlib missing
    render_dashboard = None
    IMPORT_ERROR = e

START, END = 1_800_000_000.0, 1_800_000_300.0  # a five-minute window
SCRAPE_S = 2
# With a 2 s scrape and five minutes over panels hundreds of pixels wide, $__interval is the
# scrape interval and $__rate_interval four of them.
STEP_S, RATE_INTERVAL = 2, "8s"
NAMESPACE = "gecd"


class FakePrometheus(http.server.ThreadingHTTPServer):
    """Answers /api/v1/query_range: no series for kube-state-metrics' and the restarts' queries
    (so that "Process restarts" has none at all), two codes for the by-code queries, one flat
    series otherwise; a query containing REJECT is a 400 as Prometheus answers a bad query."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = []


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        self.server.requests.append((url.path, params))
        query = params.get("query", "")
        if "REJECT" in query:
            return self.answer(400, {"status": "error", "errorType": "bad_data",
                                     "error": "parse error"})
        start, end = float(params["start"]), float(params["end"])
        times = [start + i * STEP_S for i in range(int((end - start) / STEP_S) + 1)]
        if "kube_" in query or "gecd_process_restarts_total" in query:
            labels_list = []
        elif "by (code)" in query:
            labels_list = [{"code": "RESOURCE_EXHAUSTED"}, {"code": "OK"}]
        else:
            labels_list = [{}]
        result = [{"metric": labels,
                   # A sample missing in the middle: a gap, not a line across it.
                   "values": [[t, "NaN" if i == 3 else str(1 + n)]
                              for i, t in enumerate(times) if i != 10]}
                  for n, labels in enumerate(labels_list)]
        self.answer(200, {"status": "success",
                          "data": {"resultType": "matrix", "result": result}})

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise AssertionError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


class RenderDashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dashboard = json.load(f)
        cls.server = FakePrometheus()
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}"
        cls.tmp = tempfile.TemporaryDirectory()
        cls.png = os.path.join(cls.tmp.name, "dashboard.png")
        cls.rc = render_dashboard.main([
            "--prometheus", cls.url, "--start", str(START), "--end", str(END),
            "--output", cls.png, "--var", f"namespace={NAMESPACE}",
            "--scrape-interval", f"{SCRAPE_S}s", "--dashboard", DASHBOARD])
        cls.requests = list(cls.server.requests)
        cls.panels = render_dashboard.fetch(
            cls.dashboard, render_dashboard.Prometheus(cls.url), START, END, SCRAPE_S,
            {"namespace": NAMESPACE})
        cls.figure, cls.axes = render_dashboard.draw(cls.dashboard, cls.panels, START, END)

    @classmethod
    def tearDownClass(cls):
        render_dashboard.plt.close("all")
        cls.server.shutdown()
        cls.server.server_close()
        cls.tmp.cleanup()

    def panel(self, title):
        (panel,) = [p for p in self.dashboard["panels"] if p["title"] == title]
        return panel

    def legend_texts(self, title):
        ax, _ = self.axes[self.panel(title)["id"]]
        legend = ax.get_legend()
        return [t.get_text() for t in legend.get_texts()] if legend else []

    def test_every_target_is_queried_substituted_over_the_window(self):
        expected = [t["expr"].replace("$namespace", NAMESPACE)
                    .replace("$__rate_interval", RATE_INTERVAL)
                    for p in self.dashboard["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(expected), 30)
        queried = [params["query"] for path, params in self.requests]
        self.assertEqual(sorted(queried), sorted(expected))
        for path, params in self.requests:
            self.assertEqual(path, "/api/v1/query_range")
            self.assertNotIn("$", params["query"])
            self.assertEqual(float(params["start"]), START)
            self.assertEqual(float(params["end"]), END)
            self.assertEqual(params["step"], f"{STEP_S}s")

    def test_series_are_named_by_legend_format(self):
        self.assertEqual(self.legend_texts("Requests by code"), ["OK", "RESOURCE_EXHAUSTED"])
        self.assertEqual(self.legend_texts("Latency p50 / p99"),
                         ["p50", "p99", "p99 time to first token"])
        # The HPA's two kube-state-metrics series returned nothing: only the scraped pods.
        self.assertEqual(self.legend_texts("Pods"), ["scraped"])

    def test_a_panel_without_series_says_no_data(self):
        ax, _ = self.axes[self.panel("Process restarts")["id"]]
        self.assertEqual(ax.get_lines(), [])
        self.assertIn("No data", [t.get_text() for t in ax.texts])
        ax, _ = self.axes[self.panel("Requests by code")["id"]]
        self.assertNotIn("No data", [t.get_text() for t in ax.texts])
        self.assertEqual(len(ax.get_lines()), 2)
        no_data = [line for line in render_dashboard.summary(self.panels)
                   if line.endswith("[No data]")]
        self.assertEqual(no_data, ["Process restarts: {{process}}: no data  [No data]"])

    def test_missing_samples_are_gaps(self):
        ax, _ = self.axes[self.panel("Goodput")["id"]]
        values = list(ax.get_lines()[0].get_ydata())
        # 151 samples less the one left out, plus the NaN marking its gap, the NaN sample kept.
        self.assertEqual(len(values), 151)
        self.assertEqual(sum(v != v for v in values), 2)

    def test_threshold_line_and_right_axis(self):
        ax, _ = self.axes[self.panel("Latency p50 / p99")["id"]]
        flat = [line for line in ax.get_lines() if list(line.get_ydata()) == [1, 1]]
        self.assertEqual(len(flat), 1, "the 1 s threshold line")
        self.assertGreaterEqual(ax.get_ylim()[1], 1)
        ax, right = self.axes[self.panel("KV cache and queue")["id"]]
        self.assertIsNotNone(right)
        self.assertEqual([line.get_label() for line in ax.get_lines()], ["KV cache "])
        self.assertEqual([line.get_label() for line in right.get_lines()], ["queued "])
        self.assertEqual(ax.yaxis.get_major_formatter()(0.5, 0), "50%")
        self.assertEqual(right.yaxis.get_major_formatter()(2, 0), "2")
        ax, right = self.axes[self.panel("Router latency and in flight")["id"]]
        self.assertEqual([line.get_label() for line in right.get_lines()], ["in flight"])
        self.assertEqual(ax.yaxis.get_major_formatter()(0.25, 0), "250 ms")

    def test_value_range(self):
        figure = render_dashboard.plt.figure()
        ax = figure.add_subplot()
        ax.plot([0, 1], [0, 0])
        self.assertEqual(render_dashboard.value_range(ax), (0, 1))  # not -0.05 to 0.05
        ax.plot([0, 1], [float("nan"), 2])
        self.assertEqual(render_dashboard.value_range(ax), (0, 2.1))
        render_dashboard.plt.close(figure)

    def test_the_png_is_written_at_the_page_size(self):
        self.assertEqual(self.rc, 0)
        width, height = png_size(self.png)
        rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in self.dashboard["panels"])
        self.assertEqual(width, render_dashboard.PAGE_PX)
        self.assertEqual(height, render_dashboard.HEADER_PX
                         + rows * (render_dashboard.CELL_PX + render_dashboard.GAP_PX))

    def test_a_rejected_query_names_its_panel(self):
        dashboard = json.loads(json.dumps(self.dashboard))
        dashboard["panels"][1]["targets"][0]["expr"] = "REJECT"
        with self.assertRaisesRegex(RuntimeError, 'panel "Requests by code": REJECT: parse'):
            render_dashboard.fetch(dashboard, render_dashboard.Prometheus(self.url), START, END,
                                   SCRAPE_S, {})


class SubstitutionTest(unittest.TestCase):
    def test_variables(self):
        dashboard = {"templating": {"list": [
            {"name": "datasource", "type": "datasource"},
            {"name": "namespace", "type": "query", "includeAll": True, "allValue": ".*"}]}}
        values = render_dashboard.template_values(dashboard, {})
        self.assertEqual(values, {"namespace": ".*"})
        values = render_dashboard.template_values(dashboard, {"namespace": "a,b.c"})
        self.assertEqual(values, {"namespace": r"(a|b\.c)"})
        self.assertEqual(render_dashboard.substitute(
            'x{n=~"$namespace",m="${namespace}",o="[[namespace]]"}', values),
            r'x{n=~"(a|b\.c)",m="(a|b\.c)",o="(a|b\.c)"}')
        with self.assertRaisesRegex(ValueError, "unknown variable"):
            render_dashboard.substitute("rate(x[$__nope])", values)
        with self.assertRaisesRegex(ValueError, "no variable pod"):
            render_dashboard.template_values(dashboard, {"pod": "p"})

    def test_legend(self):
        legend = render_dashboard.legend
        self.assertEqual(legend("KV cache {{pod}}", {"pod": "gecd-0"}, "e"), "KV cache gecd-0")
        self.assertEqual(legend("{{reason}} {{priority}}", {}, "sum(x)"), "sum(x)")
        self.assertEqual(legend("", {"__name__": "up", "job": "a"}, "up"), 'up{job="a"}')

    def test_grafana_intervals(self):
        panel = {"gridPos": {"w": 8}}
        # Five minutes over a 640 px panel: 0.47 s a point, rounded to 0.5 s, floored at the
        # scrape interval; the rate spans four scrapes.
        builtins, step = render_dashboard.builtin_variables(panel, 0, 300, 2)
        self.assertEqual((step, builtins["__rate_interval"], builtins["__range"]),
                         (2, "8s", "5m"))
        # Six hours (the dashboard's default): 33.75 s a point rounds to 30 s; the rate spans
        # four 15 s scrapes, more than the interval and a scrape.
        builtins, step = render_dashboard.builtin_variables(panel, 0, 6 * 3600, 15)
        self.assertEqual((step, builtins["__interval"], builtins["__rate_interval"]),
                         (30, "30s", "1m"))
        # A panel's own minimum interval floors it instead.
        builtins, step = render_dashboard.builtin_variables({**panel, "interval": "10s"},
                                                            0, 300, 2)
        self.assertEqual((step, builtins["__rate_interval"]), (10, "12s"))


if __name__ == "__main__":
    if render_dashboard is None:
        print(f"SKIPPED: {IMPORT_ERROR} (matplotlib: tools/route/requirements.txt)")
        sys.exit(77)
    unittest.main()
