"""A fleet of identical gecd pods behind one Service, as a fluid model in 1 s ticks.

A pod serves up to its capacity (the highest req/s `gecd tune` found within the p99 SLO); the
fleet's load is spread evenly over its ready pods, and what they cannot serve waits in a backlog
(fleet-wide, as a least-request balancer keeps the pods' queues level). A request's latency is
the pod's latency at the rate it serves (the profile's curve) plus the wait for the backlog ahead
of it; as gecd did with its fixed server.max_queue_ms, a pod refuses what would wait too long. The
autoscaling signal is gecd_request_concurrency per pod: by Little's law the served rate times its
latency, plus the pod's share of the backlog.

Pods start when the HPA adds them and are ready (counted by the HPA, sent traffic) start-up
seconds later; a scale-down removes the pods still starting first, then the newest ready ones, as
a ReplicaSet does."""

import bisect
import json
import math
from dataclasses import dataclass

import tune_summary

FORMAT = "gecd-pod-profile/1"
FIELDS = ("format", "source", "max_rps", "concurrency_at_max", "p99_at_max_s", "slo_p99_s",
          "latency_alone_s", "hpa_target")


class ProfileError(ValueError):
    """A pod profile that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class PodProfile:
    """What one pod does under load. The latency curve is continuous batching's: with a step
    time a + b * batch and K steps per request, the mean latency at rate r is
    T0 / (1 - r / r_sat), T0 the latency of a request alone. The profile gives T0 and one point,
    (max_rps, concurrency_at_max / max_rps), which fixes r_sat; p99 keeps its ratio to the mean
    at max_rps. Without latency_alone_s the latency is flat (concurrency linear in the rate).
    hpa_target: the AverageValue the measurement gave (gecd tune's), or None."""
    max_rps: float
    concurrency_at_max: float
    p99_at_max_s: float
    slo_p99_s: float
    latency_alone_s: float = None
    source: str = ""
    hpa_target: float = None

    @property
    def mean_at_max_s(self):
        return self.concurrency_at_max / self.max_rps

    def mean_latency_s(self, rate):
        """Mean latency of a pod serving `rate` req/s (0 <= rate <= max_rps)."""
        if self.latency_alone_s is None:
            return self.mean_at_max_s
        saturation = self.max_rps / (1 - self.latency_alone_s / self.mean_at_max_s)
        return self.latency_alone_s / (1 - rate / saturation)

    def p99_s(self, rate):
        return self.p99_at_max_s * self.mean_latency_s(rate) / self.mean_at_max_s

    def concurrency(self, rate):
        return rate * self.mean_latency_s(rate)

    def rate_at_concurrency(self, concurrency):
        """The rate at which a pod holds `concurrency` requests in flight (inverse of
        concurrency(), capped at max_rps)."""
        if self.latency_alone_s is None:
            rate = concurrency / self.mean_at_max_s
        else:  # c = r T0 / (1 - r / r_sat)  =>  r = c / (T0 + c / r_sat)
            saturation = self.max_rps / (1 - self.latency_alone_s / self.mean_at_max_s)
            rate = concurrency / (self.latency_alone_s + concurrency / saturation)
        return min(rate, self.max_rps)


def _positive(doc, name, where, required=True):
    if name not in doc:
        if required:
            raise ProfileError(f"{where}: {name}: required")
        return None
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ProfileError(f"{where}: {name}: {value!r} is not a number > 0")
    return float(value)


def profile_from_dict(doc, where="profile"):
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    for key in doc:
        if key not in FIELDS:
            raise ProfileError(f"{where}: {key}: unknown field (expected {', '.join(FIELDS)})")
    if doc.get("format") != FORMAT:
        raise ProfileError(f"{where}: format: {doc.get('format')!r}, expected {FORMAT!r} "
                           "(or the summary `gecd tune --json` writes)")
    source = doc.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{where}: source: expected a string")
    profile = PodProfile(_positive(doc, "max_rps", where),
                         _positive(doc, "concurrency_at_max", where),
                         _positive(doc, "p99_at_max_s", where),
                         _positive(doc, "slo_p99_s", where),
                         _positive(doc, "latency_alone_s", where, required=False), source,
                         _positive(doc, "hpa_target", where, required=False))
    if profile.p99_at_max_s > profile.slo_p99_s:
        raise ProfileError(f"{where}: p99_at_max_s: {profile.p99_at_max_s:g} is above slo_p99_s "
                           f"{profile.slo_p99_s:g} (max_rps is the rate within the SLO)")
    if profile.mean_at_max_s > profile.p99_at_max_s:
        raise ProfileError(f"{where}: concurrency_at_max: {profile.concurrency_at_max:g} / max_rps "
                           f"is a mean latency above p99_at_max_s")
    if profile.latency_alone_s is not None and profile.latency_alone_s >= profile.mean_at_max_s:
        raise ProfileError(f"{where}: latency_alone_s: {profile.latency_alone_s:g} must be below "
                           f"the mean latency at max_rps (concurrency_at_max / max_rps = "
                           f"{profile.mean_at_max_s:g})")
    if profile.hpa_target is not None and profile.hpa_target > profile.concurrency_at_max:
        raise ProfileError(f"{where}: hpa_target: {profile.hpa_target:g} is above "
                           f"concurrency_at_max {profile.concurrency_at_max:g} (pods would run "
                           "beyond max_rps)")
    return profile


def load_profile(path):
    """A gecd-pod-profile/1 file, or the summary `gecd tune --json` writes."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ProfileError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
    if tune_summary.is_tune_summary(doc):
        try:
            doc = tune_summary.to_pod_profile(doc, path)
        except tune_summary.TuneSummaryError as e:
            raise ProfileError(str(e)) from None
    return profile_from_dict(doc, path)


@dataclass
class Tick:
    """One second of the fleet."""
    pods: int  # every pod that exists (ready or starting): what is paid for
    ready: int
    served: float  # req/s
    shed: float  # requests refused this second (RESOURCE_EXHAUSTED)
    backlog: float  # requests admitted and waiting at the end of the second
    p99_s: float  # of the requests admitted in this second (inf with no ready pod)
    concurrency_per_pod: float  # gecd_request_concurrency of each ready pod


class Fleet:
    """The pods (each by the time it is ready) and the backlog.

    max_queue_s is gecd's former server.max_queue_ms: a pod refuses a request at once when the
    predicted wait exceeds it, so the backlog is at most that many seconds of the ready pods'
    capacity and the rest is shed. 0: nothing is shed, the backlog has no bound."""

    def __init__(self, profile, startup_s, ready_pods, max_queue_s=0.5):
        self.profile = profile
        self.startup_s = startup_s
        self.max_queue_s = max_queue_s
        self.ready_at = [-math.inf] * ready_pods  # ascending
        self.backlog = 0.0

    def pods(self):
        return len(self.ready_at)

    def ready(self, now):
        return bisect.bisect_right(self.ready_at, now)

    def scale_to(self, now, replicas):
        if replicas > len(self.ready_at):
            self.ready_at.extend([now + self.startup_s] * (replicas - len(self.ready_at)))
        else:
            del self.ready_at[replicas:]  # the latest to be ready go first

    def tick(self, now, arrivals):
        """Serve one second of `arrivals` requests."""
        ready = self.ready(now)
        capacity = ready * self.profile.max_rps
        demand = arrivals + self.backlog
        served = min(capacity, demand)
        self.backlog = demand - served
        shed = 0.0
        if self.max_queue_s > 0 and self.backlog > self.max_queue_s * capacity:
            shed = self.backlog - self.max_queue_s * capacity
            self.backlog -= shed
        if ready == 0:
            return Tick(self.pods(), 0, 0.0, shed, self.backlog, math.inf, 0.0)
        per_pod = served / ready
        wait = self.backlog / capacity
        concurrency = self.profile.concurrency(per_pod) + self.backlog / ready
        return Tick(self.pods(), ready, served, shed, self.backlog,
                    self.profile.p99_s(per_pod) + wait, concurrency)
