"""tools/autoscale/hpa.py against the Kubernetes documentation's worked examples (each test names
the page and the example it reproduces; "HPA page" is
https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/) and against
the controller's rules: tolerance, starting and missing pods, stabilisation windows, rate
policies over their trailing periods, min/max replicas, and the behaviour spec's validation."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "autoscale"))
import hpa  # noqa: E402


def scaler(behavior=None, min_replicas=1, max_replicas=1000, target=100.0):
    return hpa.Autoscaler(hpa.parse_behavior(behavior), min_replicas, max_replicas, target)


def run(autoscaler, replicas, metric_for, until, every=hpa.SYNC_PERIOD_S):
    """Syncs every 15 s from t=0 with all pods ready; metric_for(t, replicas) is the per-pod
    metric. Returns [(t, replicas)] after each sync that changed the count."""
    changes = []
    for t in range(0, until + 1, every):
        new = autoscaler.sync(t, replicas, [metric_for(t, replicas)] * replicas)
        if new != replicas:
            changes.append((t, new))
            replicas = new
    return changes


class ReplicaArithmeticTest(unittest.TestCase):
    def test_doubles_and_halves(self):
        # HPA page, "Algorithm details": current 200m against a desired 100m doubles the
        # replicas; 50m halves them.
        self.assertEqual(hpa.pods_metric_replicas(4, 0.1, [0.2] * 4), 8)
        self.assertEqual(hpa.pods_metric_replicas(4, 0.1, [0.05] * 4), 2)

    def test_ceil_of_current_times_ratio(self):
        # Horizontal Pod Autoscaler Walkthrough: one php-apache pod at 305% of its CPU request
        # against a 50% target is resized to 7 replicas (ceil(1 x 305 / 50) = ceil(6.1)).
        self.assertEqual(hpa.pods_metric_replicas(1, 50, [305]), 7)

    def test_blog_configurable_tolerance_example(self):
        # Kubernetes v1.33 blog, "HorizontalPodAutoscaler Configurable Tolerance": 50 replicas at
        # 90% CPU against a 75% target -> 50 x 90 / 75 = 60; 20% off target, beyond the 10%.
        self.assertEqual(hpa.pods_metric_replicas(50, 75, [90] * 50), 60)

    def test_tolerance_skips_small_changes(self):
        # HPA page: "The control plane skips any scaling action if the ratio is sufficiently
        # close to 1.0 (within a configurable tolerance, 0.1 by default)".
        self.assertEqual(hpa.pods_metric_replicas(10, 100, [110] * 10), 10)  # ratio 1.1: within
        self.assertEqual(hpa.pods_metric_replicas(10, 100, [90] * 10), 10)  # 0.9: within
        self.assertEqual(hpa.pods_metric_replicas(10, 100, [111] * 10), 12)  # ceil(11.1)
        self.assertEqual(hpa.pods_metric_replicas(10, 100, [89] * 10), 9)  # ceil(8.9)

    def test_per_direction_tolerance(self):
        # HPA page, "Tolerance": a 100MiB target with a 5% scale-up tolerance "will only
        # consider scaling up if the memory consumption is higher than 105MiB".
        for metric, expected in ((105, 10), (106, 11)):
            self.assertEqual(hpa.pods_metric_replicas(10, 100, [metric] * 10, tolerance_up=0.05),
                             expected, metric)
        # The scale-down side keeps the default 10%.
        self.assertEqual(hpa.pods_metric_replicas(10, 100, [91] * 10, tolerance_up=0.05), 10)

    def test_averages_over_the_ready_pods(self):
        # "the currentMetricValue is computed by taking the average of the given metric across
        # all Pods": 100+300 average 200 against 100 -> 2 x 2 = 4.
        self.assertEqual(hpa.pods_metric_replicas(2, 100, [100, 300]), 4)

    def test_starting_pods_count_as_zero_on_a_scale_up(self):
        # HPA page: "if any not-yet-ready pods were present, and the workload would have scaled
        # up ... the controller conservatively assumes that the not-yet-ready pods are
        # consuming 0% of the desired metric". 4 ready at 130 would give ceil(5.2) = 6; with one
        # starting pod counted as 0 the ratio is 520 / 5 / 100 = 1.04, within the tolerance.
        self.assertEqual(hpa.pods_metric_replicas(4, 100, [130] * 4), 6)
        self.assertEqual(hpa.pods_metric_replicas(5, 100, [130] * 4, ignored=1), 5)
        # 4 ready at 150 with 4 more starting: 600 / 8 = 75 reverses the direction -> no change
        # ("If the new ratio reverses the scale direction ... doesn't take any scaling action").
        self.assertEqual(hpa.pods_metric_replicas(8, 100, [150] * 4, ignored=4), 8)
        # 2 ready at 400, 2 starting: 800 / 4 = 200 -> ceil(2 x 4) = 8.
        self.assertEqual(hpa.pods_metric_replicas(4, 100, [400] * 2, ignored=2), 8)

    def test_starting_pods_are_left_out_of_a_scale_down(self):
        # Pending pods are set aside and not rebalanced on a scale-down: ceil(0.5 x 4) = 2.
        self.assertEqual(hpa.pods_metric_replicas(6, 100, [50] * 4, ignored=2), 2)

    def test_missing_metrics(self):
        # HPA page: missing metrics count as "100% of the desired value in case of a scale down,
        # and 0% in case of a scale up". Down: (4 x 50 + 2 x 100) / 6 / 100 -> ceil(0.667 x 6).
        self.assertEqual(hpa.pods_metric_replicas(6, 100, [50] * 4, missing=2), 4)
        # Up: (4 x 200 + 0) / 6 / 100 = 1.333 -> 8.
        self.assertEqual(hpa.pods_metric_replicas(6, 100, [200] * 4, missing=2), 8)

    def test_no_ready_metric_means_no_scaling(self):
        self.assertIsNone(hpa.pods_metric_replicas(3, 100, [], ignored=3))
        self.assertEqual(scaler().sync(0, 3, [], ignored=3), 3)


class ScaleDownPoliciesTest(unittest.TestCase):
    def test_pods_or_percent_per_minute_max(self):
        # HPA page, "Scaling policies": Pods 4 / 60 s and Percent 10 / 60 s; from 80 replicas
        # towards 10 "during the first step 8 replicas will be reduced. In the next iteration
        # when the number of replicas is 72, 10% of the pods is 7.2 but the number is rounded up
        # to 8 ... When the number of replicas falls below 40 the first policy (Pods) is applied
        # and 4 replicas will be reduced at a time." One step per 60 s period.
        behavior = {"scaleDown": {"policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 60},
            {"type": "Percent", "value": 10, "periodSeconds": 60}]}}
        changes = run(scaler(behavior, min_replicas=10), 80, lambda t, n: 1, until=1200)
        self.assertEqual([n for _, n in changes],
                         [72, 64, 57, 51, 45, 40, 36, 32, 28, 24, 20, 16, 12, 10])
        self.assertEqual([t for t, _ in changes], list(range(0, 60 * 14, 60)))

    def test_select_policy_min(self):
        # HPA page, "Example: limit scale down rate": 10% and 5 pods per 60 s with selectPolicy
        # Min: "no more than 5 Pods are removed per minute". From 80 the smaller change is 5;
        # from 40 it is 10% = 4.
        behavior = {"scaleDown": {"selectPolicy": "Min", "policies": [
            {"type": "Percent", "value": 10, "periodSeconds": 60},
            {"type": "Pods", "value": 5, "periodSeconds": 60}]}}
        changes = run(scaler(behavior, min_replicas=10), 80, lambda t, n: 1, until=60 * 8)
        self.assertEqual([n for _, n in changes][:9], [75, 70, 65, 60, 55, 50, 45, 40, 36])

    def test_percent_10_per_minute(self):
        # HPA page, "Example: limit scale down rate ... to 10% per minute".
        behavior = {"scaleDown": {"stabilizationWindowSeconds": 0, "policies": [
            {"type": "Percent", "value": 10, "periodSeconds": 60}]}}
        changes = run(scaler(behavior, min_replicas=25), 100, lambda t, n: 1, until=180)
        self.assertEqual(changes, [(0, 90), (60, 81), (120, 72), (180, 64)])

    def test_disabled(self):
        # HPA page, "Example: disable scale down": selectPolicy Disabled.
        self.assertEqual(run(scaler({"scaleDown": {"selectPolicy": "Disabled"}}), 10,
                             lambda t, n: 1.0, until=900), [])

    def test_default_scale_down_can_drop_to_min_at_once(self):
        # HPA page, "Default behavior": one scale-down policy, 100% per 15 s, "which means the
        # scaling target can be scaled down to the minimum allowed replicas" (after the 300 s
        # window).
        changes = run(scaler(min_replicas=2), 50, lambda t, n: 100 if t == 0 else 1, until=600)
        self.assertEqual(changes, [(300, 2)])


class StabilizationTest(unittest.TestCase):
    def test_scale_down_waits_for_the_window_max(self):
        # HPA page, "Stabilization window": stabilizationWindowSeconds 300; "all desired states
        # from the past 5 minutes will be considered" and the highest is used. The metric halves
        # after t=0 (recommendation 10 at t=0, then 5): no scale-down until the t=0
        # recommendation has left the window.
        changes = run(scaler({"scaleDown": {"stabilizationWindowSeconds": 300}}), 10,
                      lambda t, n: 100 if t == 0 else 500 / n, until=600)
        self.assertEqual(changes, [(300, 5)])

    def test_scale_down_follows_the_highest_recent_recommendation(self):
        # A brief high recommendation in the window holds the count up: 10 -> 8 is allowed only
        # when the 8 recommendation is the highest in the last 60 s.
        load = {0: 1000, 15: 800, 30: 880}  # total metric; recommendations 10, 8, 9, then 5
        changes = run(scaler({"scaleDown": {"stabilizationWindowSeconds": 60}}), 10,
                      lambda t, n: load.get(t, 450) / n, until=150)
        self.assertEqual(changes, [(60, 9), (90, 5)])

    def test_scale_up_window_uses_the_lowest(self):
        # scaleUp.stabilizationWindowSeconds 60: the lowest recommendation of the last 60 s.
        changes = run(scaler({"scaleUp": {"stabilizationWindowSeconds": 60}}), 10,
                      lambda t, n: 100 if t == 0 else 2000 / n, until=120)
        self.assertEqual(changes, [(60, 20)])

    def test_default_scale_up_has_no_window(self):
        changes = run(scaler(), 10, lambda t, n: 100 if t == 0 else 1500 / n, until=60)
        self.assertEqual(changes, [(15, 15)])


class ScaleUpPoliciesTest(unittest.TestCase):
    def test_default_100_percent_or_4_pods_per_15s(self):
        # HPA page, "Default behavior": "4 pods or a 100% of the currently running replicas may
        # at most be added every 15 seconds". From 10 towards 100: 20, 40, 80, 100. From 2: the
        # 4-pod policy allows more (6), then 100% (12, 24).
        changes = run(scaler(), 10, lambda t, n: 100 * 100 / n, until=60)
        self.assertEqual(changes, [(0, 20), (15, 40), (30, 80), (45, 100)])
        changes = run(scaler(), 2, lambda t, n: 100 * 24 / n, until=30)
        self.assertEqual(changes, [(0, 6), (15, 12), (30, 24)])

    def test_walkthrough_reaches_7_in_two_syncs(self):
        # The walkthrough's 1 -> 7: the default policies allow 1 + 4 = 5 in the first 15 s.
        changes = run(scaler(target=50), 1, lambda t, n: 305 / n, until=30)
        self.assertEqual(changes, [(0, 5), (15, 7)])

    def test_policy_counts_events_in_its_trailing_period(self):
        # Pods 4 per 60 s, synced every 15 s: one step per minute, the event at t falls out of
        # the period at t + 60 exactly (the controller counts events after now - period).
        behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}}
        changes = run(scaler(behavior), 10, lambda t, n: 100 * 30 / n, until=200)
        self.assertEqual(changes, [(0, 14), (60, 18), (120, 22), (180, 26)])

    def test_percent_rounds_up(self):
        # "the proposal has to be rounded up because the proposed change might not increase the
        # replica count": 10% of 3 pods is 0.3, rounded up to one pod.
        behavior = {"scaleUp": {"policies": [{"type": "Percent", "value": 10,
                                              "periodSeconds": 15}]}}
        self.assertEqual(run(scaler(behavior), 3, lambda t, n: 1000, until=0), [(0, 4)])

    def test_scale_down_in_the_period_raises_the_scale_up_limit(self):
        # The period's starting count is current - added + removed: 20 -> 10 at t=0, then at
        # t=5 a scale-up may go to 20 + 4, not 10 + 4.
        behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
                    "scaleDown": {"stabilizationWindowSeconds": 0}}
        s = scaler(behavior)
        self.assertEqual(s.sync(0, 20, [50] * 20), 10)
        self.assertEqual(s.sync(5, 10, [1000] * 10), 24)

    def test_select_policy_min_for_scale_up(self):
        behavior = {"scaleUp": {"selectPolicy": "Min", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15},
            {"type": "Pods", "value": 4, "periodSeconds": 15}]}}
        changes = run(scaler(behavior), 10, lambda t, n: 100 * 100 / n, until=30)
        self.assertEqual(changes, [(0, 14), (15, 18), (30, 22)])

    def test_disabled_scale_up(self):
        self.assertEqual(run(scaler({"scaleUp": {"selectPolicy": "Disabled"}}), 10,
                             lambda t, n: 1000, until=60), [])


class MinMaxTest(unittest.TestCase):
    def test_desired_is_clamped(self):
        self.assertEqual(run(scaler(max_replicas=30), 10, lambda t, n: 1000, until=60)[-1][1],
                         30)
        self.assertEqual(run(scaler({"scaleDown": {"stabilizationWindowSeconds": 0}},
                                    min_replicas=4), 10, lambda t, n: 1, until=0), [(0, 4)])

    def test_out_of_range_count_is_set_to_the_bound_at_once(self):
        # reconcileAutoscaler: a Deployment above maxReplicas (or below min) is set to it,
        # without rate limits.
        self.assertEqual(scaler(max_replicas=10).sync(0, 50, [1] * 50), 10)
        self.assertEqual(scaler(min_replicas=8).sync(0, 2, [1000] * 2), 8)


class BehaviorSpecTest(unittest.TestCase):
    def test_defaults_filled_per_field(self):
        b = hpa.parse_behavior({"scaleDown": {"stabilizationWindowSeconds": 600}})
        self.assertEqual(b.scale_up, hpa.DEFAULT_SCALE_UP)
        self.assertEqual(b.scale_down.stabilization_window_s, 600)
        self.assertEqual(b.scale_down.policies, hpa.DEFAULT_SCALE_DOWN.policies)
        self.assertEqual(b.scale_down.select_policy, "Max")
        self.assertEqual(hpa.parse_behavior(None), hpa.DEFAULT_BEHAVIOR)
        self.assertEqual(hpa.parse_behavior({"scaleUp": {"tolerance": "50m"}}).scale_up.tolerance,
                         0.05)

    def test_invalid_specs_name_the_field(self):
        cases = [
            ({"scaleup": {}}, "behavior.scaleup: unknown field"),
            ({"scaleUp": {"policies": [{"type": "pods", "value": 4, "periodSeconds": 15}]}},
             "behavior.scaleUp.policies[0].type: 'pods' is not Pods or Percent"),
            ({"scaleUp": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}},
             "behavior.scaleUp.policies[0].value: 0 is outside"),
            ({"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}},
             "behavior.scaleDown.policies[0].periodSeconds: 1801 is outside 1..1800"),
            ({"scaleDown": {"policies": [{"type": "Pods", "value": 1}]}},
             "behavior.scaleDown.policies[0].periodSeconds: required"),
            ({"scaleDown": {"policies": [{"type": "Pods", "value": "4", "periodSeconds": 15}]}},
             "behavior.scaleDown.policies[0].value: '4' is not an integer"),
            ({"scaleDown": {"policies": []}}, "behavior.scaleDown.policies: must specify"),
            ({"scaleDown": {"selectPolicy": "max"}},
             "behavior.scaleDown.selectPolicy: 'max' is not Max, Min or Disabled"),
            ({"scaleDown": {"stabilizationWindowSeconds": 3601}},
             "behavior.scaleDown.stabilizationWindowSeconds: 3601 is outside 0..3600"),
            ({"scaleUp": {"tolerance": "-0.1"}}, "behavior.scaleUp.tolerance: '-0.1' must be"),
            ({"scaleUp": []}, "behavior.scaleUp: expected a mapping"),
        ]
        for spec, message in cases:
            with self.subTest(spec=spec):
                with self.assertRaises(hpa.BehaviorError) as ctx:
                    hpa.parse_behavior(spec)
                self.assertIn(message, str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
