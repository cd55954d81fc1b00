"""The HorizontalPodAutoscaler's replica arithmetic, as kube-controller-manager does it for one
autoscaling/v2 HPA on one Pods metric with an AverageValue target.

Follows pkg/controller/podautoscaler in kubernetes/kubernetes: the replica calculator
(calcPlainMetricReplicas, groupPods) and the behaviour path of the controller
(normalizeDesiredReplicasWithBehaviors: stabilizeRecommendationWithBehaviors, then
convertDesiredReplicasWithBehaviorRate with its scale-event history). Time is in seconds, as a
float; the controller's time.Now() is the `now` passed to Autoscaler.sync.

Behaviour specs are parsed from the `behavior` block of an HPA manifest (a dict from YAML or
JSON); missing fields get the API server's defaults (GenerateHPAScaleUpRules /
GenerateHPAScaleDownRules), invalid ones raise BehaviorError naming the field."""

import math
from dataclasses import dataclass, field

SYNC_PERIOD_S = 15  # --horizontal-pod-autoscaler-sync-period
DEFAULT_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DEFAULT_DOWNSCALE_STABILIZATION_S = 300  # --horizontal-pod-autoscaler-downscale-stabilization
MAX_STABILIZATION_WINDOW_S = 3600  # API validation: MaxStabilizationWindowSeconds
MAX_PERIOD_S = 1800  # API validation: MaxPeriodSeconds

PODS, PERCENT = "Pods", "Percent"
MAX, MIN, DISABLED = "Max", "Min", "Disabled"


class BehaviorError(ValueError):
    """A behaviour spec the API server would reject; the message names the field."""


@dataclass(frozen=True)
class Policy:
    type: str  # PODS or PERCENT
    value: int
    period_s: int


@dataclass(frozen=True)
class Rules:
    """HPAScalingRules for one direction, every field filled."""
    stabilization_window_s: int
    policies: tuple
    select_policy: str = MAX
    tolerance: float = None  # None: the controller's --horizontal-pod-autoscaler-tolerance


@dataclass(frozen=True)
class Behavior:
    scale_up: Rules
    scale_down: Rules


# The API server's defaults (pkg/apis/autoscaling/v2/defaults.go), as the HPA docs list them.
DEFAULT_SCALE_UP = Rules(0, (Policy(PERCENT, 100, 15), Policy(PODS, 4, 15)), MAX)
DEFAULT_SCALE_DOWN = Rules(DEFAULT_DOWNSCALE_STABILIZATION_S, (Policy(PERCENT, 100, 15),), MAX)
DEFAULT_BEHAVIOR = Behavior(DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN)


def _int(value, path, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int):
        raise BehaviorError(f"{path}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise BehaviorError(f"{path}: {value} is outside {lo}..{hi}")
    return value


def _tolerance(value, path):
    # A Quantity in the API ("0.05", "50m" or a number); plain decimals are enough here.
    if isinstance(value, bool):
        raise BehaviorError(f"{path}: {value!r} is not a number")
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise BehaviorError(f"{path}: {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise BehaviorError(f"{path}: {value!r} must be a finite number >= 0")
    return number


def _check_keys(spec, path, allowed):
    if not isinstance(spec, dict):
        raise BehaviorError(f"{path}: expected a mapping, got {type(spec).__name__}")
    for key in spec:
        if key not in allowed:
            raise BehaviorError(f"{path}.{key}: unknown field (expected one of "
                                f"{', '.join(allowed)})")


def _parse_rules(spec, path, default):
    if spec is None:
        return default
    _check_keys(spec, path, ("stabilizationWindowSeconds", "selectPolicy", "policies",
                             "tolerance"))
    window = default.stabilization_window_s
    if "stabilizationWindowSeconds" in spec:
        window = _int(spec["stabilizationWindowSeconds"], f"{path}.stabilizationWindowSeconds",
                      0, MAX_STABILIZATION_WINDOW_S)
    select = spec.get("selectPolicy", default.select_policy)
    if select not in (MAX, MIN, DISABLED):
        raise BehaviorError(f"{path}.selectPolicy: {select!r} is not Max, Min or Disabled")
    policies = default.policies
    if "policies" in spec:
        items = spec["policies"]
        if not isinstance(items, list):
            raise BehaviorError(f"{path}.policies: expected a list")
        if not items:
            raise BehaviorError(f"{path}.policies: must specify at least one policy")
        parsed = []
        for i, item in enumerate(items):
            where = f"{path}.policies[{i}]"
            _check_keys(item, where, ("type", "value", "periodSeconds"))
            for key in ("type", "value", "periodSeconds"):
                if key not in item:
                    raise BehaviorError(f"{where}.{key}: required")
            if item["type"] not in (PODS, PERCENT):
                raise BehaviorError(f"{where}.type: {item['type']!r} is not Pods or Percent")
            parsed.append(Policy(item["type"], _int(item["value"], f"{where}.value", 1, 2**31 - 1),
                                 _int(item["periodSeconds"], f"{where}.periodSeconds", 1,
                                      MAX_PERIOD_S)))
        policies = tuple(parsed)
    tolerance = default.tolerance
    if "tolerance" in spec:
        tolerance = _tolerance(spec["tolerance"], f"{path}.tolerance")
    return Rules(window, policies, select, tolerance)


def parse_behavior(spec, path="behavior"):
    """An HPA `behavior` mapping (None: the defaults) to a Behavior, defaults filled."""
    if spec is None:
        return DEFAULT_BEHAVIOR
    _check_keys(spec, path, ("scaleUp", "scaleDown"))
    return Behavior(_parse_rules(spec.get("scaleUp"), f"{path}.scaleUp", DEFAULT_SCALE_UP),
                    _parse_rules(spec.get("scaleDown"), f"{path}.scaleDown", DEFAULT_SCALE_DOWN))


def milli(value):
    """A metric value as the controller reads it: Quantity.MilliValue(), rounded up. (Rounded
    to 1e-6 first, so that 0.2 is 200m as the decimal string "0.2" would be.)"""
    return math.ceil(round(value * 1000, 6))


def pods_metric_replicas(current_replicas, target, ready_metrics, ignored=0, missing=0,
                         tolerance_up=DEFAULT_TOLERANCE, tolerance_down=DEFAULT_TOLERANCE):
    """Desired replicas for a Pods metric with an AverageValue target (calcPlainMetricReplicas).

    ready_metrics: the metric of each pod that groupPods counts as ready (Running, with a metric).
    ignored: pods set aside (Pending: still starting). missing: Running pods with no metric.
    Returns None where the controller gets no metric from any ready pod ("did not receive metrics
    for any ready pods"): it then does not scale at all. The average is of milli-values in
    integers, as GetMetricUsageRatio takes it."""
    if not ready_metrics:
        return None
    target_m = milli(target)

    def within(ratio):
        return 1.0 - tolerance_down <= ratio <= 1.0 + tolerance_up

    total, count = sum(milli(v) for v in ready_metrics), len(ready_metrics)
    usage = total // count / target_m
    rebalance_ignored = ignored > 0 and usage > 1.0
    if not rebalance_ignored and missing == 0:
        if within(usage):
            return current_replicas
        return math.ceil(usage * count)

    # Missing pods count as using the target on a scale-down and nothing on a scale-up; on a
    # scale-up the starting pods count as using nothing. Both damp the change.
    count += missing
    if missing and usage < 1.0:
        total += missing * target_m
    if rebalance_ignored:
        count += ignored
    new_usage = total // count / target_m
    if within(new_usage) or (usage < 1.0 < new_usage) or (usage > 1.0 > new_usage):
        return current_replicas  # too small a change, or the direction reversed
    return math.ceil(new_usage * count)


@dataclass
class Autoscaler:
    """One HPA's controller state: its past recommendations and scale events (what the
    controller keeps in memory per HPA), and the limits it applies each sync."""
    behavior: Behavior
    min_replicas: int
    max_replicas: int
    target: float  # the AverageValue target of the Pods metric
    tolerance: float = DEFAULT_TOLERANCE
    recommendations: list = field(default_factory=list)  # (time, replicas)
    scale_up_events: list = field(default_factory=list)  # (time, pods added)
    scale_down_events: list = field(default_factory=list)  # (time, pods removed)

    def sync(self, now, spec_replicas, ready_metrics, ignored=0, missing=0):
        """One reconcile of the HPA: the Deployment's new spec.replicas (== spec_replicas when
        it does not scale). Records the recommendation and the scale event as the controller
        does."""
        if spec_replicas > self.max_replicas:
            desired = self.max_replicas
        elif spec_replicas < self.min_replicas:
            desired = self.min_replicas
        else:
            up = self.behavior.scale_up.tolerance
            down = self.behavior.scale_down.tolerance
            metric_desired = pods_metric_replicas(
                spec_replicas, self.target, ready_metrics, ignored, missing,
                self.tolerance if up is None else up, self.tolerance if down is None else down)
            if metric_desired is None:
                return spec_replicas
            desired = self._normalize(now, spec_replicas, metric_desired)
        if desired != spec_replicas:
            self._store_scale_event(now, spec_replicas, desired)
        return desired

    def _normalize(self, now, current, desired):
        stabilized = self._stabilize(now, current, desired)
        return self._limit_rate(now, current, stabilized)

    def _stabilize(self, now, current, desired):
        # Scale-up uses the lowest recommendation of its window, scale-down the highest of its;
        # the result moves from the current count towards them, never past.
        up_cutoff = now - self.behavior.scale_up.stabilization_window_s
        down_cutoff = now - self.behavior.scale_down.stabilization_window_s
        up_rec = down_rec = desired
        for t, rec in self.recommendations:
            if t > up_cutoff:
                up_rec = min(up_rec, rec)
            if t > down_cutoff:
                down_rec = max(down_rec, rec)
        oldest_kept = min(up_cutoff, down_cutoff)
        self.recommendations = [(t, r) for t, r in self.recommendations if t >= oldest_kept]
        self.recommendations.append((now, desired))  # the unstabilised recommendation
        return min(max(current, up_rec), down_rec)

    def _limit_rate(self, now, current, desired):
        if desired > current:
            limit = max(scale_up_limit(now, current, self.scale_up_events,
                                       self.scale_down_events, self.behavior.scale_up), current)
            return min(desired, self.max_replicas, limit)
        if desired < current:
            limit = min(scale_down_limit(now, current, self.scale_up_events,
                                         self.scale_down_events, self.behavior.scale_down),
                        current)
            return max(desired, self.min_replicas, limit)
        return desired

    def _store_scale_event(self, now, previous, new):
        # Events older than the direction's longest policy period are never read again.
        if new > previous:
            keep = now - max(p.period_s for p in self.behavior.scale_up.policies)
            self.scale_up_events = [e for e in self.scale_up_events if e[0] >= keep]
            self.scale_up_events.append((now, new - previous))
        else:
            keep = now - max(p.period_s for p in self.behavior.scale_down.policies)
            self.scale_down_events = [e for e in self.scale_down_events if e[0] >= keep]
            self.scale_down_events.append((now, previous - new))


def _change_in_period(now, period_s, events):
    # getReplicasChangePerPeriod: events strictly after now - period.
    return sum(change for t, change in events if t > now - period_s)


def _period_start(now, current, policy, up_events, down_events):
    return (current - _change_in_period(now, policy.period_s, up_events)
            + _change_in_period(now, policy.period_s, down_events))


def scale_up_limit(now, current, up_events, down_events, rules):
    """calculateScaleUpLimitWithScalingRules: the most replicas the policies allow now."""
    if rules.select_policy == DISABLED:
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start(now, current, policy, up_events, down_events)
        if policy.type == PODS:
            proposals.append(start + policy.value)
        else:  # rounded up, or a small percentage would never add a pod
            proposals.append(math.ceil(float(start) * (1 + policy.value / 100)))
    return min(proposals) if rules.select_policy == MIN else max(proposals)


def scale_down_limit(now, current, up_events, down_events, rules):
    """calculateScaleDownLimitWithBehaviors: the fewest replicas the policies allow now."""
    if rules.select_policy == DISABLED:
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start(now, current, policy, up_events, down_events)
        if policy.type == PODS:
            proposals.append(start - policy.value)
        else:  # int32() truncates: the pods removed round up
            proposals.append(int(float(start) * (1 - policy.value / 100)))
    return max(proposals) if rules.select_policy == MIN else min(proposals)
