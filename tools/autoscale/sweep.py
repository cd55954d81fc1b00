#!/usr/bin/env python3
"""Searches HPA behaviours around the asymmetric one on the same day as sim.py: scale-up
policies, scale-down windows and rates, and the target's headroom, for each pod start-up time.
Prints one table row per combination (docs/AUTOSCALING.md, "Choosing the values").

  sweep.py [--trace CSV] [--startup 60s,5m] [--up fast,paced] [--down-window 300,600,900]
           [--down-percent 5,10,20] [--headroom 0.3] [--profile JSON] [--load-scale F]
           [--metric-noise poisson]"""

import argparse
import itertools
import sys

import sim

# Scale-up policy sets, in manifest form, selectPolicy Max and no window for both.
UP = {
    "fast": [{"type": "Percent", "value": 100, "periodSeconds": 15},
             {"type": "Pods", "value": 4, "periodSeconds": 15}],
    "paced": [{"type": "Percent", "value": 50, "periodSeconds": 60},
              {"type": "Pods", "value": 4, "periodSeconds": 15}],
}
UP_TEXT = {"fast": "100% or 4 pods / 15 s", "paced": "50% / 60 s or 4 pods / 15 s"}


def numbers(text, option, kind):
    try:
        return [kind(x) for x in text.split(",")]
    except ValueError:
        raise sim.InputError(f"{option}: {text!r} is not a comma-separated list of numbers") \
            from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="CSV time_s,rate (default: the generated day)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default=sim.DEFAULT_PROFILE)
    parser.add_argument("--startup", default="60s,5m")
    parser.add_argument("--up", default="fast,paced", help=f"of {', '.join(UP)}")
    parser.add_argument("--down-window", default="300,600,900", help="seconds")
    parser.add_argument("--down-percent", default="5,10,20", help="per 60 s, selectPolicy Min")
    parser.add_argument("--headroom", help="comma-separated (default: the profile's "
                                           "hpa_target where it has one, else 0.3)")
    parser.add_argument("--metric-noise", choices=("none", "poisson"), default="none",
                        help="as sim.py (seeded by --seed)")
    parser.add_argument("--load-scale", type=float, default=1.0, metavar="FACTOR",
                        help="multiply the load by this (as sim.py)")
    parser.add_argument("--min-replicas", type=int, default=4)
    parser.add_argument("--max-replicas", type=int, default=200)
    args = parser.parse_args(argv)
    try:
        startups = [sim.parse_duration(s, "--startup") for s in args.startup.split(",")]
        ups = args.up.split(",")
        for up in ups:
            if up not in UP:
                raise sim.InputError(f"--up: {up!r} is not one of {', '.join(UP)}")
        windows = numbers(args.down_window, "--down-window", int)
        percents = numbers(args.down_percent, "--down-percent", int)
        headrooms = numbers(args.headroom, "--headroom", float) if args.headroom else [None]
        for headroom in headrooms:
            if headroom is not None and not 0 <= headroom < 1:
                raise sim.InputError(f"--headroom: {headroom:g} must be in [0, 1)")
        if not (sim.math.isfinite(args.load_scale) and args.load_scale > 0):
            raise sim.InputError(f"--load-scale: {args.load_scale} must be a number > 0")
        profile = sim.fleet.load_profile(args.profile)
        rates = (sim.traffic.read_trace(args.trace) if args.trace
                 else sim.traffic.day(args.seed))
        rates = [rate * args.load_scale for rate in rates]
        behaviors = {}
        for up, window, percent in itertools.product(ups, windows, percents):
            spec = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                                "policies": UP[up]},
                    "scaleDown": {"stabilizationWindowSeconds": window, "selectPolicy": "Min",
                                  "policies": [{"type": "Percent", "value": percent,
                                                "periodSeconds": 60}]}}
            behaviors[up, window, percent] = sim.hpa.parse_behavior(spec)
    except (sim.InputError, sim.hpa.BehaviorError, sim.fleet.ProfileError,
            sim.traffic.TraceError) as e:
        print(f"sweep.py: {e}", file=sys.stderr)
        return 2

    print("| start-up | scale-up | scale-down window | scale-down rate | headroom | minutes over "
          "SLO | over-provisioned pod-hours | scale events |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for startup in startups:
        for (up, window, percent), headroom in itertools.product(behaviors, headrooms):
            target = sim.target_of(profile, headroom=headroom)
            s, _ = sim.simulate(rates, profile, behaviors[up, window, percent], startup, target,
                                args.min_replicas, args.max_replicas,
                                noise_seed=args.seed if args.metric_noise == "poisson" else None)
            print(f"| {sim.fmt_duration(startup)} | {UP_TEXT[up]} | {window} s | "
                  f"{percent}% / 60 s | {1 - target / profile.concurrency_at_max:.2g} | "
                  f"{s['seconds_over_slo'] / 60:.1f} | "
                  f"{s['over_pod_seconds'] / 3600:.0f} | {s['scale_ups'] + s['scale_downs']} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
