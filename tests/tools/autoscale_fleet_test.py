"""tools/autoscale/fleet.py: the pod profile's format and curve, and the fleet's fluid model
(capacity, backlog, latency, the concurrency metric, pods starting and removed)."""

import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "autoscale"))
import fleet  # noqa: E402

DEFAULT_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                               "autoscale", "pod_profile.json")
PROFILE = {"format": "gecd-pod-profile/1", "max_rps": 1000, "concurrency_at_max": 500,
           "p99_at_max_s": 0.9, "slo_p99_s": 1.0, "latency_alone_s": 0.2}


def profile(**changes):
    doc = dict(PROFILE, **changes)
    return fleet.profile_from_dict({k: v for k, v in doc.items() if v is not None})


class ProfileTest(unittest.TestCase):
    def test_default_profile_is_the_readme_target(self):
        p = fleet.load_profile(DEFAULT_PROFILE)
        self.assertEqual(p.max_rps, 3000)
        self.assertLessEqual(p.p99_at_max_s, 1.0)
        self.assertIn("PLACEHOLDER", p.source)

    def test_curve_passes_through_its_points(self):
        p = profile()
        self.assertAlmostEqual(p.mean_latency_s(0), 0.2)
        self.assertAlmostEqual(p.mean_latency_s(1000), 0.5)
        self.assertAlmostEqual(p.concurrency(1000), 500)  # Little's law at max_rps
        self.assertAlmostEqual(p.p99_s(1000), 0.9)
        # T0 / (1 - r / r_sat) with r_sat = 1000 / (1 - 0.2 / 0.5) = 1666.7: at 500 req/s
        # 0.2 / 0.7.
        self.assertAlmostEqual(p.mean_latency_s(500), 0.2 / 0.7)
        self.assertAlmostEqual(p.p99_s(500), 0.9 * (0.2 / 0.7) / 0.5)
        for rate in (1, 100, 700, 999):
            self.assertAlmostEqual(p.rate_at_concurrency(p.concurrency(rate)), rate)
        self.assertEqual(p.rate_at_concurrency(1e9), 1000)  # capped at max_rps

    def test_without_latency_alone_the_latency_is_flat(self):
        p = profile(latency_alone_s=None)
        self.assertAlmostEqual(p.mean_latency_s(10), 0.5)
        self.assertAlmostEqual(p.concurrency(400), 200)
        self.assertAlmostEqual(p.rate_at_concurrency(200), 400)

    def test_invalid_profiles_name_the_field(self):
        cases = [
            ({"max_rps": None}, "max_rps: required"),
            ({"max_rps": -5}, "max_rps: -5 is not a number > 0"),
            ({"concurrency_at_max": "500"}, "concurrency_at_max: '500' is not a number > 0"),
            ({"p99_at_max_s": 1.5}, "p99_at_max_s: 1.5 is above slo_p99_s 1 "),
            ({"concurrency_at_max": 1000}, "concurrency_at_max: 1000 / max_rps is a mean latency"),
            ({"latency_alone_s": 0.6}, "latency_alone_s: 0.6 must be below"),
            ({"format": "v2"}, "format: 'v2', expected 'gecd-pod-profile/1'"),
            ({"max_rsp": 3}, "max_rsp: unknown field"),
            ({"source": 3}, "source: expected a string"),
        ]
        for changes, message in cases:
            with self.subTest(changes=changes):
                with self.assertRaises(fleet.ProfileError) as ctx:
                    profile(**changes)
                self.assertIn(message, str(ctx.exception))

    def test_file_errors_name_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.json")
            with open(path, "w") as f:
                f.write('{\n  "max_rps": 3000,\n  oops\n}\n')
            with self.assertRaisesRegex(fleet.ProfileError, r"p\.json:3: not JSON"):
                fleet.load_profile(path)
            with open(path, "w") as f:
                json.dump(dict(PROFILE, slo_p99_s=0), f)
            with self.assertRaisesRegex(fleet.ProfileError, r"p\.json: slo_p99_s: 0 is not"):
                fleet.load_profile(path)
            with self.assertRaisesRegex(fleet.ProfileError, r"nope\.json: No such file"):
                fleet.load_profile(os.path.join(d, "nope.json"))


class FleetTest(unittest.TestCase):
    def test_below_capacity_no_backlog(self):
        f = fleet.Fleet(profile(), startup_s=60, ready_pods=4)
        tick = f.tick(0, 2000)  # 500 req/s per pod
        self.assertEqual((tick.pods, tick.ready, tick.served, tick.backlog), (4, 4, 2000, 0))
        self.assertAlmostEqual(tick.p99_s, profile().p99_s(500))
        self.assertAlmostEqual(tick.concurrency_per_pod, 500 * 0.2 / 0.7)

    def test_overload_queues_and_drains(self):
        p = profile()
        f = fleet.Fleet(p, startup_s=60, ready_pods=2)
        tick = f.tick(0, 2500)  # 500 req/s over the 2 x 1000
        self.assertEqual((tick.served, tick.backlog), (2000, 500))
        self.assertAlmostEqual(tick.p99_s, 0.9 + 500 / 2000)  # the wait for the backlog
        self.assertAlmostEqual(tick.concurrency_per_pod, 500 + 250)  # in service + queued
        tick = f.tick(1, 2500)
        self.assertEqual(tick.backlog, 1000)
        tick = f.tick(2, 1000)  # 1000 of spare capacity drains it
        self.assertEqual((tick.served, tick.backlog), (2000, 0))
        self.assertAlmostEqual(tick.p99_s, 0.9)

    def test_new_pods_serve_once_ready(self):
        f = fleet.Fleet(profile(), startup_s=30, ready_pods=1, max_queue_s=0)  # no refusals
        f.scale_to(100, 3)
        self.assertEqual((f.pods(), f.ready(129), f.ready(130)), (3, 1, 3))
        self.assertEqual(f.tick(129, 3000).served, 1000)
        self.assertEqual(f.tick(130, 1000).served, 3000)  # 2000 backlog + 1000

    def test_scale_down_removes_starting_pods_first(self):
        f = fleet.Fleet(profile(), startup_s=30, ready_pods=2)
        f.scale_to(100, 4)
        f.scale_to(110, 3)
        self.assertEqual((f.pods(), f.ready(200)), (3, 3))
        f.scale_to(115, 2)
        self.assertEqual((f.pods(), f.ready(115), f.ready(200)), (2, 2, 2))

    def test_refuses_beyond_max_queue(self):
        # server.max_queue_ms 500: 2 pods hold at most 0.5 s x 2000 req/s waiting; the rest of
        # the excess is refused at once.
        f = fleet.Fleet(profile(), startup_s=30, ready_pods=2, max_queue_s=0.5)
        tick = f.tick(0, 3000)
        self.assertEqual((tick.served, tick.backlog, tick.shed), (2000, 1000, 0))
        tick = f.tick(1, 3000)
        self.assertEqual((tick.served, tick.backlog, tick.shed), (2000, 1000, 1000))
        self.assertAlmostEqual(tick.p99_s, 0.9 + 0.5)
        self.assertAlmostEqual(tick.concurrency_per_pod, 500 + 500)

    def test_no_ready_pod(self):
        tick = fleet.Fleet(profile(), startup_s=30, ready_pods=0).tick(0, 10)
        self.assertEqual((tick.ready, tick.backlog, tick.shed), (0, 0, 10))  # all refused
        tick = fleet.Fleet(profile(), startup_s=30, ready_pods=0, max_queue_s=0).tick(0, 10)
        self.assertEqual((tick.ready, tick.backlog, tick.shed), (0, 10, 0))
        self.assertTrue(math.isinf(tick.p99_s))

if __name__ == "__main__":
    unittest.main()
