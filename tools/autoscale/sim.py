#!/usr/bin/env python3
"""Replays a day of traffic through a gecd fleet under the Kubernetes HPA and compares scaling
behaviours and pod start-up times: minutes over the SLO, over-provisioned pod-hours, scale
events. docs/AUTOSCALING.md has the model, the figures and the commands.

  sim.py [--trace CSV] [--profile JSON] [--behavior NAME|FILE ...] [--startup 10s,60s,5m]

Bad input (a malformed trace, profile, behaviour file or option) is an error naming the line or
field, exit code 2."""

import argparse
import csv
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet  # noqa: E402
import hpa  # noqa: E402
import traffic  # noqa: E402

DEFAULT_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pod_profile.json")
DEFAULT_HEADROOM = 0.3  # gecd tune's

# The two behaviours the issue compares, in the HPA manifest's own form.
BEHAVIORS = {
    # Kubernetes' defaults: scale-up 100% or 4 pods per 15 s (Max), no window; scale-down
    # 100% per 15 s after a 300 s window. Symmetric in rate.
    "default": None,
    # Up at once and fast, down late and slowly.
    "asymmetric": {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15},
                                 {"type": "Pods", "value": 4, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 600, "selectPolicy": "Min",
                      "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]},
    },
}


class InputError(ValueError):
    """Bad input: reported with its message, exit code 2."""


def parse_duration(text, option):
    """'500ms', '10s', '5m', '1h' or plain seconds, to seconds."""
    body, scale = text, 1
    for unit, unit_scale in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(unit):
            body, scale = text[:-len(unit)], unit_scale
            break
    try:
        seconds = float(body) * scale
    except ValueError:
        raise InputError(f"{option}: {text!r} is not a duration (e.g. 10s, 5m)") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"{option}: {text!r} must be a duration >= 0")
    return seconds


def load_behavior(name):
    """A built-in behaviour by name, or a YAML/JSON file: an HPA manifest (its spec.behavior) or
    a bare `behavior` mapping."""
    if name in BEHAVIORS:
        return name, hpa.parse_behavior(BEHAVIORS[name])
    if not os.path.exists(name):
        raise InputError(f"--behavior: {name!r} is neither {' nor '.join(BEHAVIORS)} nor a file")
    with open(name) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError:
            raise InputError(f"{name}: not JSON, and PyYAML is not installed to read YAML") \
                from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise InputError(f"{name}: not YAML: {e}") from None
    path = "behavior"
    if isinstance(doc, dict) and doc.get("kind") == "HorizontalPodAutoscaler":
        doc, path = (doc.get("spec") or {}).get("behavior"), "spec.behavior"
    elif isinstance(doc, dict) and set(doc) == {"behavior"}:
        doc = doc["behavior"]
    try:
        return os.path.splitext(os.path.basename(name))[0], hpa.parse_behavior(doc, path)
    except hpa.BehaviorError as e:
        raise InputError(f"{name}: {e}") from None


# A second misses the SLO when the p99 of what was admitted is over it, or when more than this
# share of its requests was refused (refusals are errors to the client).
SHED_SHARE_OVER_SLO = 0.01


def poisson(rng, mean):
    """A Poisson variate (the normal approximation above a mean of 50)."""
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, n, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        n += 1
        product *= rng.random()
    return n


def simulate(rates, profile, behavior, startup_s, target, min_replicas, max_replicas,
             tolerance=hpa.DEFAULT_TOLERANCE, metric_window_s=15, max_queue_s=0.5,
             sync_period_s=hpa.SYNC_PERIOD_S, sample_s=0, periods=(), noise_seed=None):
    """One run. Returns (summary dict, samples): a sample every sample_s seconds (0: none) of
    (time_s, mean rate, pods, ready, ideal pods, worst p99, per-pod concurrency, shed, seconds
    over the SLO).
    periods: (name, start_s, end_s) whose seconds over the SLO summary["periods"] counts.
    noise_seed: None, the HPA reads the fluid mean; else, seeding it, the gauge's counting
    noise: at each sync the ready pods' readings add up to a Poisson count of that mean times
    the pods (requests in flight are counted, one reading per sync)."""
    rng = None if noise_seed is None else random.Random(noise_seed)
    initial = math.ceil(rates[0] / profile.rate_at_concurrency(target))
    initial = min(max(initial, min_replicas), max_replicas)
    pods = fleet.Fleet(profile, startup_s, initial, max_queue_s)
    scaler = hpa.Autoscaler(behavior, min_replicas, max_replicas, target, tolerance)
    window = []  # the per-pod concurrency of the last metric_window_s seconds
    summary = {"seconds_over_slo": 0, "pod_seconds": 0, "ideal_pod_seconds": 0,
               "over_pod_seconds": 0, "scale_ups": 0, "scale_downs": 0, "max_pods": initial,
               "requests": 0.0, "shed": 0.0, "worst_p99_s": 0.0,
               "periods": {name: 0 for name, _, _ in periods}}
    samples, bucket = [], []
    for t, rate in enumerate(rates):
        if t % sync_period_s == 0 and t > 0:
            spec = pods.pods()
            ready = pods.ready(t)
            metric = sum(window) / len(window) if window else 0.0
            if rng and ready:
                metric = poisson(rng, metric * ready) / ready
            new = scaler.sync(t, spec, [metric] * ready, ignored=spec - ready)
            if new != spec:
                summary["scale_ups" if new > spec else "scale_downs"] += 1
                pods.scale_to(t, new)
        tick = pods.tick(t, rate)
        window.append(tick.concurrency_per_pod)
        if len(window) > metric_window_s:
            window.pop(0)
        ideal = math.ceil(rate / profile.max_rps)
        summary["pod_seconds"] += tick.pods
        summary["ideal_pod_seconds"] += ideal
        summary["over_pod_seconds"] += max(0, tick.pods - ideal)
        over = tick.p99_s > profile.slo_p99_s or tick.shed > SHED_SHARE_OVER_SLO * rate
        summary["seconds_over_slo"] += over
        for name, start, end in periods:
            summary["periods"][name] += over and start <= t < end
        summary["max_pods"] = max(summary["max_pods"], tick.pods)
        summary["requests"] += rate
        summary["shed"] += tick.shed
        summary["worst_p99_s"] = max(summary["worst_p99_s"], tick.p99_s)
        if sample_s:
            bucket.append((rate, tick, ideal, over))
            if len(bucket) == sample_s or t == len(rates) - 1:
                samples.append((t - len(bucket) + 1, sum(b[0] for b in bucket) / len(bucket),
                                tick.pods, tick.ready, max(b[2] for b in bucket),
                                max(b[1].p99_s for b in bucket), tick.concurrency_per_pod,
                                sum(b[1].shed for b in bucket), sum(b[3] for b in bucket)))
                bucket = []
    return summary, samples


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", help="CSV time_s,rate (default: the generated day)")
    parser.add_argument("--seed", type=int, default=1, help="of the generated day's noise")
    parser.add_argument("--write-trace", metavar="CSV", help="write the load replayed, 1 row/s")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="pod profile JSON")
    parser.add_argument("--behavior", action="append", metavar="NAME|FILE",
                        help=f"{', '.join(BEHAVIORS)} or a YAML/JSON HPA manifest or behavior "
                             "block; repeatable (default: default and asymmetric)")
    parser.add_argument("--startup", default="10s,60s,5m",
                        help="pod start-up times to compare, comma-separated (default %(default)s)")
    parser.add_argument("--headroom", type=float,
                        help="target = concurrency_at_max x (1 - headroom), as gecd tune "
                             "computes it (default: the profile's hpa_target where it has one, "
                             f"else headroom {DEFAULT_HEADROOM})")
    parser.add_argument("--target", type=float, help="the AverageValue target (overrides "
                                                     "--headroom)")
    parser.add_argument("--load-scale", type=float, default=1.0, metavar="FACTOR",
                        help="multiply the load by this, e.g. to give pods of another capacity "
                             "the same pod counts (default %(default)s)")
    parser.add_argument("--min-replicas", type=int, default=4)
    parser.add_argument("--max-replicas", type=int, default=200)
    parser.add_argument("--tolerance", type=float, default=hpa.DEFAULT_TOLERANCE)
    parser.add_argument("--max-queue", default="500ms",
                        help="a pod refuses what would wait longer (gecd's fixed server.max_queue_ms, "
                             "since replaced by server.slo_p99_ms) "
                             "(0: no refusals, an unbounded backlog; default %(default)s)")
    parser.add_argument("--metric-window", default="15s",
                        help="the metric is the per-pod concurrency averaged over this "
                             "(scrape interval and adapter lag; default %(default)s)")
    parser.add_argument("--metric-noise", choices=("none", "poisson"), default="none",
                        help="none: the HPA reads the fluid mean; poisson: the gauge's counting "
                             "noise, a Poisson count of in-flight requests over the ready pods "
                             "at each sync (seeded by --seed; default %(default)s)")
    parser.add_argument("--periods", default="", metavar="NAME=HH:MM-HH:MM,...",
                        help="also tabulate the minutes over the SLO within these spans")
    parser.add_argument("--csv", help="write samples of every run here (for plot.py)")
    parser.add_argument("--sample", default="10s", help="CSV sample period (default %(default)s)")
    return parser.parse_args(argv)


def check_args(args):
    if args.headroom is not None and not 0 <= args.headroom < 1:
        raise InputError(f"--headroom: {args.headroom} must be in [0, 1)")
    if args.target is not None and not (math.isfinite(args.target) and args.target > 0):
        raise InputError(f"--target: {args.target} must be a number > 0")
    if not (math.isfinite(args.load_scale) and args.load_scale > 0):
        raise InputError(f"--load-scale: {args.load_scale} must be a number > 0")
    if args.min_replicas < 1:
        raise InputError(f"--min-replicas: {args.min_replicas} must be >= 1")
    if args.max_replicas < args.min_replicas:
        raise InputError(f"--max-replicas: {args.max_replicas} is below --min-replicas "
                         f"{args.min_replicas}")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise InputError(f"--tolerance: {args.tolerance} must be a number >= 0")
    startups = [parse_duration(s.strip(), "--startup") for s in args.startup.split(",")]
    max_queue = parse_duration(args.max_queue, "--max-queue")
    window = parse_duration(args.metric_window, "--metric-window")
    if window < 1:
        raise InputError(f"--metric-window: {args.metric_window!r} must be at least 1s")
    sample = parse_duration(args.sample, "--sample")
    if sample < 1:
        raise InputError(f"--sample: {args.sample!r} must be at least 1s")
    return startups, max_queue, int(window), int(sample), parse_periods(args.periods)


def parse_periods(text):
    """'ramp=07:00-09:00,spike=13:55-14:30' to [(name, start_s, end_s)]."""
    periods = []
    for item in filter(None, text.split(",")):
        try:
            name, span = item.split("=")
            start, end = (int(h) * 3600 + int(m) * 60
                          for h, m in (hhmm.split(":") for hhmm in span.split("-")))
        except ValueError:
            raise InputError(f"--periods: {item!r} is not NAME=HH:MM-HH:MM") from None
        if not name or end <= start:
            raise InputError(f"--periods: {item!r} is not NAME=HH:MM-HH:MM with the end after "
                             "the start")
        periods.append((name, start, end))
    return periods


def target_of(profile, target=None, headroom=None):
    """The AverageValue: `target`, else concurrency_at_max x (1 - headroom), else the profile's
    hpa_target, else the default headroom's."""
    if target is not None:
        return target
    if headroom is None and profile.hpa_target is not None:
        return profile.hpa_target
    return profile.concurrency_at_max * (1 - (DEFAULT_HEADROOM if headroom is None else headroom))


def fmt_duration(seconds):
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def main(argv=None):
    args = parse_args(argv)
    try:
        startups, max_queue, window, sample, periods = check_args(args)
        profile = fleet.load_profile(args.profile)
        rates = traffic.read_trace(args.trace) if args.trace else traffic.day(args.seed)
        behaviors = [load_behavior(b) for b in (args.behavior or list(BEHAVIORS))]
    except (InputError, fleet.ProfileError, traffic.TraceError) as e:
        print(f"sim.py: {e}", file=sys.stderr)
        return 2
    rates = [rate * args.load_scale for rate in rates]
    if args.write_trace:
        traffic.write_trace(args.write_trace, rates)
    target = target_of(profile, args.target, args.headroom)

    print(f"profile: {args.profile}: {profile.max_rps:g} req/s per pod within p99 "
          f"{profile.slo_p99_s:g} s, {profile.concurrency_at_max:g} in flight there"
          + (f" ({profile.source})" if profile.source else ""))
    print(f"target: AverageValue {target:g} requests in flight per pod (a pod holds that at "
          f"{profile.rate_at_concurrency(target):.{0 if profile.max_rps >= 100 else 1}f} "
          f"req/s); {len(rates) / 3600:g} h of load"
          + (f" x {args.load_scale:g}" if args.load_scale != 1 else "")
          + f", peak {max(rates):.0f} req/s; replicas {args.min_replicas}..{args.max_replicas}\n")
    print("| behavior | start-up | minutes over SLO | over-provisioned pod-hours | pod-hours "
          "(ideal) | scale events (up/down) | max pods | requests shed | worst p99 admitted |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    out = None
    if args.csv:
        out = open(args.csv, "w", newline="")
        writer = csv.writer(out)
        writer.writerow(("behavior", "startup_s", "time_s", "rate", "pods", "ready", "ideal",
                         "p99_s", "concurrency_per_pod", "shed", "seconds_over_slo"))
    split = []
    for name, behavior in behaviors:
        for startup in startups:
            summary, samples = simulate(rates, profile, behavior, startup, target,
                                        args.min_replicas, args.max_replicas, args.tolerance,
                                        window, max_queue, sample_s=sample if out else 0,
                                        periods=periods,
                                        noise_seed=(args.seed if args.metric_noise == "poisson"
                                                    else None))
            split.append((name, startup, summary))
            s = summary
            worst = "unbounded" if math.isinf(s["worst_p99_s"]) else f"{s['worst_p99_s']:.2f} s"
            print(f"| {name} | {fmt_duration(startup)} | {s['seconds_over_slo'] / 60:.1f} | "
                  f"{s['over_pod_seconds'] / 3600:.0f} | {s['pod_seconds'] / 3600:.0f} "
                  f"({s['ideal_pod_seconds'] / 3600:.0f}) | "
                  f"{s['scale_ups'] + s['scale_downs']} ({s['scale_ups']}/{s['scale_downs']}) | "
                  f"{s['max_pods']} | {100 * s['shed'] / s['requests']:.3f}% | {worst} |")
            if out:
                for row in samples:
                    writer.writerow((name, f"{startup:g}", row[0], f"{row[1]:.1f}", row[2],
                                     row[3], row[4], f"{row[5]:.4f}", f"{row[6]:.2f}",
                                     f"{row[7]:.0f}", row[8]))
    if out:
        out.close()
    if periods:
        print("\nminutes over the SLO by period:\n")
        print(f"| behavior | start-up | {' | '.join(p[0] for p in periods)} | the rest |")
        print("| --- | ---: |" + " ---: |" * (len(periods) + 1))
        for name, startup, s in split:
            within = [s["periods"][p[0]] for p in periods]
            cells = [f"{n / 60:.1f}" for n in within + [s["seconds_over_slo"] - sum(within)]]
            print(f"| {name} | {fmt_duration(startup)} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
