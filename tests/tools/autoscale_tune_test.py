"""tools/autoscale/tune_summary.py: a `gecd tune --json` summary read as a pod profile (the
mapping onto the profile's fields, the idle latency from the lowest-rate passing trial, the
target), and a malformed one rejected naming the field, exit code 2 from sim.py."""

import copy
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "autoscale"))
import fleet  # noqa: E402
import sim  # noqa: E402
import tune_summary  # noqa: E402

# What `gecd tune --json` wrote on the default model (bench/RESULTS.md, "gecd tune on the
# default model").
MEASURED = os.path.join(ROOT, "bench", "tune", "default-model-2026-12-01.json")


def trial(offered, mean_ms, passed=True):
    return {"offered_qps": offered, "achieved_qps": offered, "p99_ms": 2 * mean_ms,
            "mean_latency_ms": mean_ms, "error_rate": 0.0, "passed": passed}


# A summary in the shape tune_command.cc writes: 100 req/s at p99 400 ms, 20 in flight by the
# gauge (0.2 s), 250 ms mean by the client.
SUMMARY = {
    "slo_met": True, "slo_p99_ms": 1000.0, "max_error_rate": 0.01, "headroom": 0.3,
    "rps": 100.0, "achieved_rps": 99.0, "concurrency": 20.0, "concurrency_gauge": 20.0,
    "concurrency_littles_law": 24.75, "p99_ms": 400.0, "mean_latency_ms": 250.0,
    "hpa_target": 14.0, "settings": {"engine.max_batch_size": 64},
    "config": "configs/gecd.yaml", "out": "/tmp/tuned.yaml", "budget_s": 600.0, "elapsed_s": 90.0,
    "candidates": [
        {"settings": {"engine.max_batch_size": 128}, "max_qps": 80.0, "status": "ok",
         "abandoned": False, "seconds": 20.0,
         "trials": [trial(10, 999, passed=False), trial(40, 150), trial(80, 240),
                    trial(160, 900, passed=False)]},
        {"settings": {"engine.max_batch_size": 64}, "max_qps": 100.0, "status": "ok",
         "abandoned": False, "seconds": 20.0,
         "trials": [trial(80, 200), trial(100, 250), trial(120, 800, passed=False)]},
    ],
    "untried": [],
}


def summary(edit=None):
    doc = copy.deepcopy(SUMMARY)
    if edit:
        edit(doc)
    return doc


def profile_of(doc):
    return fleet.profile_from_dict(tune_summary.to_pod_profile(doc, "tune.json"), "tune.json")


class MappingTest(unittest.TestCase):
    def test_fields(self):
        p = profile_of(summary())
        self.assertEqual((p.max_rps, p.concurrency_at_max, p.hpa_target), (100, 20, 14))
        self.assertAlmostEqual(p.p99_at_max_s, 0.4)
        self.assertAlmostEqual(p.slo_p99_s, 1.0)
        self.assertAlmostEqual(p.mean_at_max_s, 0.2)  # the gauge's concurrency over the rate
        # The lowest passing trial (40 req/s, of another candidate; the failed 10 req/s one
        # does not count): 150 of the 250 ms at rps, applied to the 0.2 s mean at max_rps.
        self.assertAlmostEqual(p.latency_alone_s, 0.2 * 150 / 250)
        self.assertIn("40.0 req/s trial (engine.max_batch_size=128)", p.source)
        self.assertEqual(sim.target_of(p), 14)  # the tune's target, not a headroom of the sim's
        self.assertAlmostEqual(sim.target_of(p, headroom=0.5), 10)
        self.assertEqual(sim.target_of(p, target=3), 3)

    def test_flat_curve_without_a_usable_low_trial(self):
        def only_max(doc):
            for c in doc["candidates"]:
                c["trials"] = [t for t in c["trials"] if t["offered_qps"] >= 100 or
                               not t["passed"]]

        def noisy(doc):  # the lowest passing trial was slower than the one at rps
            doc["candidates"][0]["trials"][1]["mean_latency_ms"] = 260

        for edit, why in ((only_max, "no trial passed below rps"),
                          (noisy, "the 40.0 req/s trial's mean 260.0 ms is not below 250.0 ms")):
            with self.subTest(why=why):
                p = profile_of(summary(edit))
                self.assertIsNone(p.latency_alone_s)
                self.assertIn(why, p.source)
                self.assertAlmostEqual(p.mean_latency_s(10), 0.2)  # flat

    def test_the_measured_default_model(self):
        p = fleet.load_profile(MEASURED)
        self.assertAlmostEqual(p.max_rps, 45.94, places=2)
        self.assertAlmostEqual(p.concurrency_at_max, 3.8)
        self.assertAlmostEqual(p.p99_at_max_s, 0.226815)
        self.assertAlmostEqual(p.slo_p99_s, 1.0)
        self.assertAlmostEqual(p.hpa_target, 2.66)
        # Its lowest passing trial: 20.4 req/s, 62.3 ms mean, against 92.3 ms at rps.
        self.assertAlmostEqual(p.latency_alone_s,
                               62.275957142857145 / 92.28545833333334 * 3.8 / p.max_rps)
        self.assertIn("20.4 req/s trial", p.source)
        # The curve passes through the measured point the HPA sees.
        self.assertAlmostEqual(p.concurrency(p.max_rps), 3.8)
        self.assertLess(p.rate_at_concurrency(2.66), p.max_rps)


class MalformedTest(unittest.TestCase):
    def assert_rejected(self, edit, message):
        with self.assertRaises(tune_summary.TuneSummaryError) as ctx:
            tune_summary.to_pod_profile(summary(edit), "tune.json")
        self.assertIn(message, str(ctx.exception))

    def test_each_error_names_the_field(self):
        def set_(key, value):
            return lambda d: d.__setitem__(key, value)

        def first_trial(key, value):
            return lambda d: d["candidates"][1]["trials"][0].__setitem__(key, value)

        cases = [
            (lambda d: d.pop("rps"), "tune.json: rps: required"),
            (set_("rps", "45.9"), "tune.json: rps: '45.9' is not a number > 0"),
            (set_("concurrency", 0), "tune.json: concurrency: 0 is not a number > 0"),
            (set_("p99_ms", None), "tune.json: p99_ms: None is not a number > 0"),
            (set_("slo_p99_ms", True), "tune.json: slo_p99_ms: True is not a number > 0"),
            (lambda d: d.pop("mean_latency_ms"), "tune.json: mean_latency_ms: required"),
            (set_("slo_met", False), "tune.json: slo_met: false: gecd tune found no setting"),
            (set_("slo_met", "yes"), "tune.json: slo_met: 'yes' is not true or false"),
            (set_("headroom", 1), "tune.json: headroom: 1 is not in [0, 1)"),
            (set_("hpa_target", 21), "tune.json: hpa_target: 21 is not concurrency 20 x "
                                     "(1 - headroom 0.3) = 14"),
            (set_("p99_ms", 1200), "tune.json: p99_ms: 1200 is above slo_p99_ms 1000"),
            (set_("settings", []), "tune.json: settings: [] is not an object"),
            (lambda d: d.pop("candidates"), "tune.json: candidates: required"),
            (set_("candidates", {}), "tune.json: candidates: {} is not a list"),
            (lambda d: d["candidates"].append(3), "tune.json: candidates[2]: 3 is not an object"),
            (lambda d: d["candidates"][1].pop("trials"), "tune.json: candidates[1].trials: "
                                                         "required"),
            (first_trial("offered_qps", -1), "tune.json: candidates[1].trials[0].offered_qps: "
                                             "-1 is not a number > 0"),
            (first_trial("mean_latency_ms", "fast"), "tune.json: candidates[1].trials[0]."
                                                     "mean_latency_ms: 'fast' is not a number"),
            (first_trial("passed", 1), "tune.json: candidates[1].trials[0].passed: 1 is not "
                                       "true or false"),
        ]
        for edit, message in cases:
            with self.subTest(message=message):
                self.assert_rejected(edit, message)

    def test_a_mean_above_the_p99(self):
        def edit(d):
            d["concurrency"], d["hpa_target"] = 50, 35
        self.assert_rejected(edit, "tune.json: concurrency: 50 / rps 100 is a mean latency above "
                                   "p99_ms 400")

    def test_what_is_read_as_a_summary(self):
        self.assertTrue(tune_summary.is_tune_summary({"rps": 1}))
        self.assertTrue(tune_summary.is_tune_summary(summary()))
        self.assertFalse(tune_summary.is_tune_summary({"format": "gecd-pod-profile/1",
                                                       "hpa_target": 3}))
        self.assertFalse(tune_summary.is_tune_summary({"max_rps": 3}))
        self.assertFalse(tune_summary.is_tune_summary([1]))


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.trace = os.path.join(self.dir.name, "t.csv")
        with open(self.trace, "w") as f:  # 800 -> 2400 req/s: 8 -> 24 of the summary's pods
            f.write("0,800\n600,800\n900,2400\n1800,2400\n")

    def cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = sim.main(["--trace", self.trace, "--startup", "10s", *args])
        return code, out.getvalue(), err.getvalue()

    def write(self, doc):
        path = os.path.join(self.dir.name, "tune.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_runs_on_a_summary_with_its_target(self):
        code, out, err = self.cli("--profile", self.write(summary()))
        self.assertEqual((code, err), (0, ""))
        self.assertIn("100 req/s per pod within p99 1 s, 20 in flight there (gecd tune summary",
                      out)
        self.assertIn("target: AverageValue 14 requests in flight per pod", out)
        self.assertIn("| asymmetric | 10 s |", out)

    def test_load_scale(self):
        code, out, _ = self.cli("--profile", self.write(summary()), "--load-scale", "0.5")
        self.assertEqual(code, 0)
        self.assertIn("0.5 h of load x 0.5, peak 1200 req/s", out)
        code, out, err = self.cli("--load-scale", "0")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("--load-scale: 0.0 must be a number > 0", err)

    def test_malformed_summary_exits_2_naming_the_field(self):
        doc = summary()
        doc["candidates"][0]["trials"][2]["passed"] = "no"
        code, out, err = self.cli("--profile", self.write(doc))
        self.assertEqual((code, out), (2, ""))
        self.assertIn("tune.json: candidates[0].trials[2].passed: 'no' is not true or false", err)
        code, _, err = self.cli("--profile", self.write(summary(lambda d: d.pop("rps"))))
        self.assertEqual(code, 2)
        self.assertIn("tune.json: rps: required", err)


if __name__ == "__main__":
    unittest.main()
