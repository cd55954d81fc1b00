"""tools/autoscale/sim.py: the fleet under the HPA on short traces (steady load, a ramp, a sharp
drop), and the command line: its table and CSV, behaviours from HPA manifests, and bad input
rejected with exit code 2 and a message naming the line, field or option."""

import csv
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "autoscale")
sys.path.insert(0, TOOLS)
import fleet  # noqa: E402
import sim  # noqa: E402
import traffic  # noqa: E402

PROFILE = fleet.load_profile(sim.DEFAULT_PROFILE)
TARGET = PROFILE.concurrency_at_max * 0.7


def trace(*rows):
    return traffic.parse_trace([f"{t},{rate}" for t, rate in rows])


def run(rates, behavior, startup_s, **kwargs):
    _, spec = sim.load_behavior(behavior)
    summary, _ = sim.simulate(rates, PROFILE, spec, startup_s, TARGET, 4, 200, **kwargs)
    return summary


class SimulationTest(unittest.TestCase):
    def test_steady_load_holds_the_target(self):
        # 100,000 req/s: a pod holds the target at 2,561 req/s, so 40 pods; no scale events;
        # the over-provisioning is the headroom (40 pods for an ideal 34).
        rates = trace((0, 100000), (3600, 100000))
        for behavior in sim.BEHAVIORS:
            s = run(rates, behavior, 60)
            self.assertEqual((s["scale_ups"], s["scale_downs"], s["max_pods"]), (0, 0, 40))
            self.assertEqual(s["seconds_over_slo"], 0)
            self.assertEqual(s["over_pod_seconds"], (40 - 34) * 3600)

    def test_slower_start_up_misses_more_of_a_ramp(self):
        # 20,000 -> 120,000 req/s in 20 minutes: with 10 s start-up the fleet keeps up; the
        # longer pods take to start, the longer the SLO is missed.
        rates = trace((0, 20000), (300, 20000), (1500, 120000), (3600, 120000))
        missed = [run(rates, "asymmetric", s)["seconds_over_slo"] for s in (10, 60, 300)]
        self.assertEqual(missed[0], 0)
        self.assertLess(missed[0], missed[1])
        self.assertLess(missed[1], missed[2])

    def test_fast_scale_down_undershoots_a_sharp_drop(self):
        # 200,000 -> 60,000 req/s in a minute. Concurrency falls faster than the load (the
        # latency falls with it), so the HPA's proportional step asks for too few pods; the
        # default policy (100% per 15 s) takes the whole step and overloads the fleet, 10% per
        # minute takes it in re-measured steps and never misses.
        rates = trace((0, 200000), (600, 200000), (660, 60000), (3600, 60000))
        for startup in (10, 60, 300):
            fast, slow = run(rates, "default", startup), run(rates, "asymmetric", startup)
            self.assertGreater(fast["seconds_over_slo"], 0, startup)
            self.assertEqual(slow["seconds_over_slo"], 0, startup)
            self.assertGreater(fast["scale_ups"], slow["scale_ups"], startup)

    def test_counting_noise_moves_a_small_target(self):
        # Pods like the default model's (gecd tune: 46 req/s, 3.8 in flight, target 2.66) on a
        # steady load for 10 of them: the fluid mean holds 10 pods without an event, but a
        # count of ~27 in flight over the fleet scatters by ~19%, past the 10% tolerance. Fast
        # scale-up acts on it, so both behaviours scale and hold more pods than needed; the
        # slow scale-down makes fewer events.
        small = fleet.profile_from_dict({
            "format": "gecd-pod-profile/1", "max_rps": 46, "concurrency_at_max": 3.8,
            "p99_at_max_s": 0.23, "slo_p99_s": 1.0, "latency_alone_s": 0.056})
        rate = 10 * small.rate_at_concurrency(2.66)
        rates = trace((0, rate), (7200, rate))
        events = {}
        for behavior in sim.BEHAVIORS:
            spec = sim.load_behavior(behavior)[1]
            fluid, _ = sim.simulate(rates, small, spec, 60, 2.66, 4, 200)
            self.assertEqual((fluid["scale_ups"], fluid["scale_downs"], fluid["max_pods"]),
                             (0, 0, 10))
            events[behavior] = 0
            for seed in (1, 2, 3):
                noisy, _ = sim.simulate(rates, small, spec, 60, 2.66, 4, 200, noise_seed=seed)
                self.assertGreater(noisy["scale_ups"], 0, (behavior, seed))
                self.assertGreater(noisy["pod_seconds"] / 7200, 11, (behavior, seed))
                events[behavior] += noisy["scale_ups"] + noisy["scale_downs"]
        self.assertLess(events["asymmetric"], events["default"])

    def test_poisson(self):
        rng = random.Random(1)
        for mean in (2.66, 26.6, 500):  # the direct draw and the normal approximation
            draws = [sim.poisson(rng, mean) for _ in range(20000)]
            self.assertAlmostEqual(statistics.mean(draws), mean, delta=0.05 * mean)
            self.assertAlmostEqual(statistics.variance(draws), mean, delta=0.1 * mean)
        self.assertEqual(sim.poisson(rng, 0), 0)

    def test_samples(self):
        rates = trace((0, 30000), (100, 30000))
        _, samples = sim.simulate(rates, PROFILE, sim.load_behavior("default")[1], 10, TARGET, 4,
                                  200, sample_s=30)
        self.assertEqual([row[0] for row in samples], [0, 30, 60, 90])
        self.assertEqual(samples[0][1:5], (30000, 12, 12, 10))


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = sim.main(list(args))
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue(), err.getvalue()


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.trace = self.path("t.csv")
        with open(self.trace, "w") as f:
            f.write("time_s,rate\n0,40000\n600,40000\n1200,80000\n1800,80000\n")

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def test_table_and_csv(self):
        code, out, err = cli("--trace", self.trace, "--startup", "10s,1m", "--csv",
                             self.path("s.csv"), "--sample", "60s")
        self.assertEqual((code, err), (0, ""))
        rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertEqual(len(rows), 1 + 4)  # header, 2 behaviours x 2 start-up times
        self.assertTrue(rows[1].startswith("| default | 10 s |"), rows[1])
        self.assertTrue(rows[4].startswith("| asymmetric | 1 min |"), rows[4])
        with open(self.path("s.csv")) as f:
            samples = list(csv.DictReader(f))
        self.assertEqual(len(samples), 4 * 30)
        self.assertEqual(samples[0]["behavior"], "default")
        self.assertEqual(float(samples[0]["rate"]), 40000)

    def test_csv_seconds_over_slo_add_up(self):
        # 5-minute pods miss this ramp; the samples' seconds over the SLO are the table's.
        code, out, _ = cli("--trace", self.trace, "--startup", "5m", "--behavior", "default",
                           "--csv", self.path("s.csv"), "--sample", "60s")
        self.assertEqual(code, 0)
        minutes = out.split("| default | 5 min | ")[1].split(" |")[0]
        with open(self.path("s.csv")) as f:
            seconds = sum(int(r["seconds_over_slo"]) for r in csv.DictReader(f))
        self.assertGreater(seconds, 0)
        self.assertEqual(f"{seconds / 60:.1f}", minutes)

    def test_periods(self):
        code, out, _ = cli("--trace", self.trace, "--startup", "5m", "--behavior", "asymmetric",
                           "--periods", "ramp=00:10-00:20,after=00:20-00:30")
        self.assertEqual(code, 0)
        table = out.split("minutes over the SLO by period:")[1]
        self.assertIn("| behavior | start-up | ramp | after | the rest |", table)
        total = float(out.split("| asymmetric | 5 min | ")[1].split(" |")[0])
        cells = table.split("| asymmetric | 5 min | ")[1].split(" |")[:3]
        self.assertGreater(float(cells[0]), 0)  # 5-minute pods miss the ramp
        self.assertAlmostEqual(sum(map(float, cells)), total, delta=0.15)

    def test_behavior_from_an_hpa_manifest(self):
        manifest = self.write("gecd-hpa.yaml", """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: gecd}
spec:
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 900
      policies: [{type: Pods, value: 2, periodSeconds: 60}]
""")
        code, out, _ = cli("--trace", self.trace, "--startup", "10s", "--behavior", manifest)
        self.assertEqual(code, 0)
        self.assertIn("| gecd-hpa | 10 s |", out)

    def test_write_trace_round_trips(self):
        code, _, _ = cli("--trace", self.trace, "--startup", "10s", "--behavior", "default",
                         "--write-trace", self.path("out.csv"))
        self.assertEqual(code, 0)
        self.assertEqual(traffic.read_trace(self.path("out.csv")), traffic.read_trace(self.trace))

    def test_bad_input_exits_2_naming_it(self):
        bad_trace = self.write("bad.csv", "time_s,rate\n0,100\n10,fast\n")
        bad_profile = self.write("p.json", '{"format": "gecd-pod-profile/1", "max_rps": 3000}')
        bad_behavior = self.write("b.yaml", "behavior:\n  scaleDown:\n    selectPolicy: Fastest\n")
        manifest = self.write("m.yaml", "kind: HorizontalPodAutoscaler\nspec:\n  behavior:\n"
                              "    scaleUp: {policies: [{type: Pods, value: 4}]}\n")
        cases = [
            (["--trace", bad_trace], "bad.csv:3: rate 'fast' is not a number"),
            (["--trace", self.path("none.csv")], "none.csv: No such file"),
            (["--profile", bad_profile], "p.json: concurrency_at_max: required"),
            (["--behavior", bad_behavior],
             "b.yaml: behavior.scaleDown.selectPolicy: 'Fastest' is not Max, Min or Disabled"),
            (["--behavior", manifest], "m.yaml: spec.behavior.scaleUp.policies[0].periodSeconds:"
                                       " required"),
            (["--behavior", "fastest"], "--behavior: 'fastest' is neither default nor asymmetric"),
            (["--startup", "10s,soon"], "--startup: 'soon' is not a duration"),
            (["--startup=-5s"], "--startup: '-5s' must be a duration >= 0"),
            (["--metric-window", "0s"], "--metric-window: '0s' must be at least 1s"),
            (["--max-queue", "half"], "--max-queue: 'half' is not a duration"),
            (["--headroom", "1.5"], "--headroom: 1.5 must be in [0, 1)"),
            (["--max-replicas", "2"], "--max-replicas: 2 is below --min-replicas 4"),
            (["--min-replicas", "three"], "argument --min-replicas: invalid int value: 'three'"),
            (["--tolerance", "-1"], "--tolerance: -1.0 must be a number >= 0"),
            (["--metric-noise", "gauss"], "argument --metric-noise: invalid choice: 'gauss'"),
            (["--periods", "ramp=7-9"], "--periods: 'ramp=7-9' is not NAME=HH:MM-HH:MM"),
            (["--periods", "x=09:00-08:00"], "--periods: 'x=09:00-08:00' is not NAME=HH:MM-HH:MM"
                                             " with the end after the start"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                code, out, err = cli("--trace", self.trace, *args)
                self.assertEqual(code, 2)
                self.assertIn(message, err)
                self.assertEqual(out, "")

    def test_sweep(self):
        import sweep
        out = io.StringIO()
        with redirect_stdout(out):
            code = sweep.main(["--trace", self.trace, "--startup", "10s", "--up", "fast,paced",
                               "--down-window", "600", "--down-percent", "10", "--headroom",
                               "0.3,0.4"])
        self.assertEqual(code, 0)
        self.assertEqual(len([l for l in out.getvalue().splitlines() if l.startswith("| 10 s")]),
                         4)
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(sweep.main(["--trace", self.trace, "--down-window", "600,long"]), 2)
            self.assertEqual(sweep.main(["--trace", self.trace, "--up", "faster"]), 2)
        self.assertIn("--down-window: '600,long' is not a comma-separated list", err.getvalue())
        self.assertIn("--up: 'faster' is not one of fast, paced", err.getvalue())

    def test_runs_as_a_script(self):
        result = subprocess.run([sys.executable, os.path.join(TOOLS, "sim.py"), "--trace",
                                 self.write("bad.csv", "0,1\n0,2\n")],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn("bad.csv:2: time_s 0 is not after the previous row's 0", result.stderr)


if __name__ == "__main__":
    unittest.main()
