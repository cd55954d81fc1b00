#!/usr/bin/env python3
"""Plots fleet_sim's CSV (bench/fleet_sim): p99 and p99.9 against utilisation, one line per
policy, log latency axis. Usage: plot_fleet_sim.py CSV PNG [--title TEXT]."""

import argparse
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {  # policy: (label, colour, marker)
    "round_robin": ("round robin", "tab:red", "s"),
    "random": ("random", "tab:orange", "v"),
    "p2c": ("p2c", "tab:blue", "o"),
    "least_request": ("least request (all pods)", "tab:green", "^"),
}
NEEDED = ("policy", "utilisation", "p99_ms", "p999_ms", "unbounded")


def read_rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: no column {', '.join(missing)} (is it fleet_sim's --csv?)")
        rows = defaultdict(list)
        for line, row in enumerate(reader, start=2):
            try:
                rows[row["policy"]].append((float(row["utilisation"]), float(row["p99_ms"]),
                                            float(row["p999_ms"]), row["unbounded"] == "1"))
            except ValueError as e:
                sys.exit(f"{path}:{line}: {e}")
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    rows = read_rows(args.csv)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, column, name in ((axes[0], 1, "p99"), (axes[1], 2, "p99.9")):
        for policy, points in rows.items():
            label, colour, marker = STYLE.get(policy, (policy, None, "x"))
            points.sort()
            xs = [p[0] * 100 for p in points]
            ys = [p[column] for p in points]
            ax.plot(xs, ys, color=colour, marker=marker, markersize=4, label=label)
            # Unbounded points (the queue of a slow pod grows with the run): hollow markers.
            hollow = [(x, y) for (x, y, p) in zip(xs, ys, points) if p[3]]
            if hollow:
                ax.plot(*zip(*hollow), linestyle="none", marker=marker, markersize=8,
                        markerfacecolor="white", color=colour)
        ax.set_yscale("log")
        ax.set_xlabel("utilisation (% of the fleet's capacity)")
        ax.set_title(f"{name} end-to-end latency")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms (log scale)")
    axes[0].legend(loc="upper left", fontsize=8)
    note = "hollow: a slow pod gets more than it serves; its queue grows with the run's length"
    fig.text(0.5, 0.005, note, ha="center", fontsize=8)
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
