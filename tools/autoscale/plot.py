#!/usr/bin/env python3
"""Plots sim.py's --csv: load and replicas over the day, one panel per pod start-up time, one
line per behaviour (DAY_PNG), and the ramp and the spike up close (ZOOM_PNG). Samples with a
second over the SLO (its p99, or more than 1% refused: the CSV's seconds_over_slo; the p99
against --slo in a CSV without it) are marked along the top of each panel. Needs matplotlib
(tools/route/requirements.txt).

  plot.py CSV DAY_PNG ZOOM_PNG [--slo 1.0] [--title TEXT]"""

import argparse
import csv
import math
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = ("tab:red", "tab:blue", "tab:green", "tab:orange", "tab:purple")
NEEDED = ("behavior", "startup_s", "time_s", "rate", "pods", "ideal", "p99_s")
ZOOMS = (("the morning ramp", 7.25, 9.0), ("the spike", 13.9, 14.5))  # hours


def read_runs(path):
    """{startup_s: {behavior: columns}} in file order."""
    runs = defaultdict(dict)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: no column {', '.join(missing)} (is it sim.py's --csv?)")
        for line, row in enumerate(reader, start=2):
            try:
                run = runs[float(row["startup_s"])].setdefault(
                    row["behavior"], {"hour": [], "rate": [], "pods": [], "ideal": [], "p99": [],
                                      "over": []})
                run["hour"].append(float(row["time_s"]) / 3600)
                run["rate"].append(float(row["rate"]))
                run["pods"].append(int(row["pods"]))
                run["ideal"].append(int(row["ideal"]))
                run["p99"].append(float(row["p99_s"]))
                over = row.get("seconds_over_slo")
                run["over"].append(None if over is None else int(over))
            except ValueError as e:
                sys.exit(f"{path}:{line}: {e}")
    if not runs:
        sys.exit(f"{path}: no rows")
    return runs


def startup_label(seconds):
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def draw(ax, runs_for_startup, slo, lo=None, hi=None):
    """Pods of each behaviour against the ideal; SLO misses as ticks at the top."""
    first = next(iter(runs_for_startup.values()))
    keep = [i for i, h in enumerate(first["hour"]) if (lo is None or lo <= h <= hi)]
    hours = [first["hour"][i] for i in keep]
    ax.fill_between(hours, [first["ideal"][i] for i in keep], step="post", color="0.85",
                    label="ideal pods (load / pod capacity)")
    top = max(max(run["pods"][i] for i in keep) for run in runs_for_startup.values()) * 1.12
    for n, (name, run) in enumerate(runs_for_startup.items()):
        colour = COLOURS[n % len(COLOURS)]
        ax.step(hours, [run["pods"][i] for i in keep], where="post", color=colour, lw=1,
                label=f"{name}: pods")
        missed = [run["hour"][i] for i in keep
                  if (run["p99"][i] > slo if run["over"][i] is None else run["over"][i] > 0)]
        if missed:
            ax.plot(missed, [top * (0.985 - 0.03 * n)] * len(missed), "|", color=colour, ms=5)
    ax.set_ylim(0, top)
    ax.grid(True, alpha=0.3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("day_png")
    parser.add_argument("zoom_png")
    parser.add_argument("--slo", type=float, default=1.0, help="p99 SLO in seconds")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    runs = read_runs(args.csv)
    startups = sorted(runs)

    fig, axes = plt.subplots(1 + len(startups), 1, figsize=(11, 2.4 * (1 + len(startups))),
                             sharex=True)
    first = next(iter(runs[startups[0]].values()))
    axes[0].plot(first["hour"], [r / 1000 for r in first["rate"]], color="0.3", lw=0.8)
    axes[0].set_ylabel("load, 1000 req/s")
    axes[0].grid(True, alpha=0.3)
    for ax, startup in zip(axes[1:], startups):
        draw(ax, runs[startup], args.slo)
        ax.set_ylabel("pods")
        ax.set_title(f"pods start in {startup_label(startup)} (ticks: over the SLO)",
                     fontsize=9, loc="left")
    axes[1].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("hour of day")
    axes[-1].set_xticks(range(0, 25, 2))
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.day_png, dpi=100)

    fig, axes = plt.subplots(len(startups), len(ZOOMS), figsize=(11, 2.6 * len(startups)),
                             squeeze=False)
    for row, startup in enumerate(startups):
        for col, (what, lo, hi) in enumerate(ZOOMS):
            ax = axes[row][col]
            draw(ax, runs[startup], args.slo, lo, hi)
            ax.set_title(f"{what}, pods start in {startup_label(startup)}", fontsize=9,
                         loc="left")
            ax.set_xlim(lo, hi)
            per_hour = 4 if hi - lo > 1 else 12  # a tick every 15 or 5 minutes
            ticks = [h / per_hour for h in range(math.ceil(lo * per_hour),
                                                 math.floor(hi * per_hour) + 1)]
            ax.set_xticks(ticks, [f"{int(h):02d}:{int(round(h % 1 * 60)):02d}" for h in ticks],
                          fontsize=8)
        axes[row][0].set_ylabel("pods")
    axes[0][0].legend(loc="upper left", fontsize=8)
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.zoom_png, dpi=100)


if __name__ == "__main__":
    main()
