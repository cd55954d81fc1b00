#!/usr/bin/env python3
"""Draws a Grafana dashboard's JSON (deploy/k8s/monitoring/dashboards/gecd.json by default) into
one PNG from a Prometheus's data, without Grafana: each panel's targets run through Prometheus's
HTTP API (/api/v1/query_range over --start..--end) with the dashboard's variables and Grafana's
built-in ones ($__interval, $__rate_interval, $__range...) substituted as Grafana would, and each
panel (rows and time series, the types gecd.json has) is drawn at its gridPos: titles, series
named by legendFormat, units, threshold lines, the right axis of overrides by query
(byFrameRefID). A panel none of whose queries returned a series says "No data", as Grafana's
does. Faithful to the JSON, not to Grafana's looks.
scripts/dashboard_picture.sh makes docs/dashboard.png with it from a real run. Needs matplotlib
(tools/route/requirements.txt).

  render_dashboard.py --prometheus http://127.0.0.1:9090 --start UNIX --end UNIX \\
      --output dashboard.png [--dashboard gecd.json] [--var namespace=gecd]
      [--scrape-interval 15s] [--note TEXT]
"""

import argparse
import datetime
import json
import math
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DASHBOARD = os.path.join(ROOT, "deploy", "k8s", "monitoring", "dashboards", "gecd.json")

# Grafana's grid: 24 columns; a height unit is 30 px plus an 8 px gap (GRID_CELL_HEIGHT,
# GRID_CELL_VMARGIN). The page is drawn at a 1920 px screen's width, whose panels' widths in
# pixels are also Grafana's default maxDataPoints for their queries.
COLUMNS = 24
CELL_PX, GAP_PX = 30, 8
PAGE_PX = 1920
HEADER_PX = 70
DPI = 100
# Grafana's classic palette, in its order.
PALETTE = ("#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9",
           "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C")
# Grafana's named colours (thresholds name them), as its light theme draws them.
NAMED_COLOURS = {"green": "#56A64B", "red": "#E02F44", "yellow": "#F2CC0C", "orange": "#FF9830",
                 "blue": "#3274D9", "purple": "#A352CC"}
# How Grafana rounds $__interval (its roundInterval): up to each bound, in seconds, the value
# after it; beyond the last, a week.
ROUNDED_INTERVALS = ((0.01, 0.001), (0.015, 0.01), (0.035, 0.02), (0.075, 0.05), (0.15, 0.1),
                     (0.35, 0.2), (0.75, 0.5), (1.5, 1), (3.5, 2), (7.5, 5), (12.5, 10),
                     (17.5, 15), (25, 20), (45, 30), (90, 60), (210, 120), (450, 300),
                     (750, 600), (1050, 900), (1500, 1200), (2700, 1800), (5400, 3600),
                     (9000, 7200), (16200, 10800), (24300, 21600), (64800, 43200),
                     (604800, 86400))


def parse_duration(text):
    """Seconds of a Prometheus duration such as 2s, 500ms, 1m30s or a bare number of seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * units[u] for n, u in parts)


def format_duration(seconds):
    """The shortest Prometheus duration for `seconds` (2s, 1m, 1500ms)."""
    ms = round(seconds * 1000)
    for unit, size in (("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def round_interval(seconds):
    return next((value for bound, value in ROUNDED_INTERVALS if seconds <= bound), 604800)


def panel_width_px(panel):
    return panel["gridPos"]["w"] * PAGE_PX / COLUMNS


def builtin_variables(panel, start, end, scrape_interval):
    """Grafana's built-ins for one panel's queries: $__interval is the range over the panel's
    data points (its width in pixels), rounded, and at least the data source's scrape interval
    (or the panel's own `interval`); $__rate_interval is max($__interval + scrape interval,
    4 x scrape interval), so that a rate always spans at least four samples."""
    span = end - start
    minimum = parse_duration(panel["interval"]) if panel.get("interval") else scrape_interval
    interval = max(round_interval(span / panel_width_px(panel)), minimum)
    rate_interval = max(interval + scrape_interval, 4 * scrape_interval)
    return {
        "__interval": format_duration(interval),
        "__interval_ms": str(round(interval * 1000)),
        "__rate_interval": format_duration(rate_interval),
        "__rate_interval_ms": str(round(rate_interval * 1000)),
        "__range": format_duration(round(span)),
        "__range_s": str(round(span)),
        "__range_ms": str(round(span * 1000)),
    }, interval


def template_values(dashboard, given):
    """{name: text to substitute} for the dashboard's template variables: the value given
    (several, comma-separated, become a regex alternation, as Grafana formats a multi-value
    variable inside a PromQL regex), else the variable's "All" value where it has one. The
    data source variable names no text in a query and is left out."""
    values = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        name = variable["name"]
        if variable.get("type") == "datasource":
            continue
        if name in given:
            parts = [re.escape(v) for v in given[name].split(",")]
            values[name] = parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"
        elif variable.get("includeAll"):
            values[name] = variable.get("allValue") or ".*"
        else:
            raise ValueError(f"variable {name} has no value: pass --var {name}=VALUE")
    unknown = set(given) - values.keys()
    if unknown:
        raise ValueError(f"the dashboard has no variable {', '.join(sorted(unknown))}")
    return values


def substitute(expr, variables):
    """`expr` with $name, ${name}, ${name:format} and [[name]] replaced from `variables`; a
    name it does not know is an error, so that no query reaches Prometheus half-substituted."""
    def replace(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in variables:
            raise ValueError(f"unknown variable ${name} in {expr!r}")
        return variables[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", replace, expr)


class Prometheus:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def query_range(self, query, start, end, step):
        """[(labels, [(unix time, value)])] of a range query; NaN where Prometheus says so."""
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": format_duration(step)})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{params}",
                                        timeout=30) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as e:
            answer = json.loads(e.read() or b"{}")
        if answer.get("status") != "success":
            raise RuntimeError(f"{query}: {answer.get('error', answer)}")
        data = answer["data"]
        if data["resultType"] != "matrix":
            raise RuntimeError(f"{query}: a {data['resultType']}, not a matrix")
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]])
                for r in data["result"]]


def legend(legend_format, labels, expr):
    """A series' name: legendFormat with {{label}} filled in, else Grafana's default, the metric
    name and its labels (or the expression when the series has none); the default too when the
    format names only labels the series lacks."""
    if legend_format and legend_format != "__auto":
        name = re.sub(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}",
                      lambda m: labels.get(m.group(1), ""), legend_format)
        if name.strip():
            return name
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return name + "{" + rest + "}" if rest else name or expr


def fetch(dashboard, prometheus, start, end, scrape_interval, given_values):
    """Every panel's queries: [(panel, [(target, step, [(name, points)])])]
    in the dashboard's order, rows with no targets included."""
    values = template_values(dashboard, given_values)
    panels = []
    for panel in dashboard["panels"]:
        builtins, step = builtin_variables(panel, start, end, scrape_interval)
        results = []
        for target in panel.get("targets", []):
            if target.get("hide") or not target.get("expr"):
                continue
            expr = substitute(target["expr"], {**values, **builtins})
            try:
                series = prometheus.query_range(expr, start, end, step)
            except RuntimeError as e:
                raise RuntimeError(f'panel "{panel["title"]}": {e}') from None
            named = sorted((legend(target.get("legendFormat"), labels, expr), points)
                           for labels, points in series)
            results.append((target, step, named))
        panels.append((panel, results))
    return panels


def field_config(panel, ref_id):
    """The panel's field defaults with the overrides that match the query `ref_id` applied
    (byFrameRefID, the only matcher gecd.json uses; others are reported and not applied)."""
    config = dict(panel.get("fieldConfig", {}).get("defaults", {}))
    config["custom"] = dict(config.get("custom", {}))
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        if matcher.get("id") != "byFrameRefID":
            print(f'panel "{panel["title"]}": override matcher {matcher.get("id")} not drawn',
                  file=sys.stderr)
            continue
        if matcher.get("options") != ref_id:
            continue
        for prop in override.get("properties", []):
            if prop["id"].startswith("custom."):
                config["custom"][prop["id"][len("custom."):]] = prop["value"]
            else:
                config[prop["id"]] = prop["value"]
    return config


def _number(value):
    """Three significant digits, without a trailing .0."""
    return f"{value:.3g}"


def unit_formatter(unit):
    """A y-axis tick formatter for the Grafana unit ids gecd.json uses; others as "short"."""
    def seconds(v, _):
        if v == 0:
            return "0 s"
        if abs(v) < 1e-3:
            return f"{_number(v * 1e6)} µs"
        if abs(v) < 1:
            return f"{_number(v * 1e3)} ms"
        return f"{_number(v)} s"

    def short(v, _):
        for size, suffix in ((1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
            if abs(v) >= size:
                return f"{_number(v / size)}{suffix}"
        return _number(v)

    formats = {
        "s": seconds,
        "percentunit": lambda v, _: f"{_number(v * 100)}%",
        "reqps": lambda v, _: f"{_number(v)} req/s",
        "short": short,
    }
    return FuncFormatter(formats.get(unit, short))


def with_gaps(points, step):
    """Times (as datetimes) and values with a NaN wherever the series skips more than a step and
    a half, so that a gap is drawn as one (Grafana does not join across missing samples)."""
    times, values = [], []
    for i, (t, v) in enumerate(points):
        if i and t - points[i - 1][0] > 1.5 * step:
            times.append(datetime.datetime.fromtimestamp(t - step, datetime.timezone.utc))
            values.append(math.nan)
        times.append(datetime.datetime.fromtimestamp(t, datetime.timezone.utc))
        values.append(v)
    return times, values


def value_range(axis):
    """The y range of an axis's lines: from 0 (or below, for negative values) to a little over
    the highest value; 0 to 1 when every value is 0 or there are none."""
    values = [v for line in axis.get_lines() for v in line.get_ydata() if math.isfinite(v)]
    low = min([0.0, *values])
    high = max([0.0, *values])
    if high <= low:
        return low, low + 1
    return low, high + 0.05 * (high - low)


def _rect(grid, page_height_px):
    """A gridPos in figure coordinates (left, bottom, width, height)."""
    left = grid["x"] * PAGE_PX / COLUMNS + GAP_PX / 2
    width = grid["w"] * PAGE_PX / COLUMNS - GAP_PX
    top = HEADER_PX + grid["y"] * (CELL_PX + GAP_PX)
    height = grid["h"] * (CELL_PX + GAP_PX) - GAP_PX
    return (left / PAGE_PX, 1 - (top + height) / page_height_px, width / PAGE_PX,
            height / page_height_px)


def _draw_row(fig, panel, page_height_px):
    left, bottom, width, height = _rect(panel["gridPos"], page_height_px)
    fig.text(left, bottom + height / 2, "\u25be " + panel["title"], fontsize=12,
             fontweight="bold", va="center", ha="left", color="#1f2328")
    fig.add_artist(Line2D([left, left + width], [bottom, bottom], color="#c7d0d9",
                          linewidth=0.8))


def _draw_timeseries(fig, panel, results, start, end, page_height_px):
    """One panel: its frame and title, its plot, its legend below. Returns the plot's axes
    (and the right axis when an override puts a query there)."""
    left, bottom, width, height = _rect(panel["gridPos"], page_height_px)
    frame = fig.add_axes((left, bottom, width, height))
    frame.set_xticks([])
    frame.set_yticks([])
    for spine in frame.spines.values():
        spine.set_color("#c7d0d9")
    frame.set_zorder(-1)
    px_w, px_h = width * PAGE_PX, height * page_height_px
    frame.text(8 / px_w, 1 - 14 / px_h, panel["title"], transform=frame.transAxes, fontsize=10.5,
               fontweight="bold", va="center", ha="left", color="#1f2328")

    drawn = [(target, step, name, points)
             for target, step, series in results for name, points in series]
    entries = [name for _, _, name, _ in drawn]
    longest = max((len(name) for name in entries), default=0)
    # Legend entries in as many columns as the longest name lets fit (~6 px a character).
    columns = max(1, min(len(entries), int((px_w - 16) // (6 * longest + 34))))
    legend_rows = math.ceil(len(entries) / columns)
    legend_px = 17 * legend_rows
    has_right = any(field_config(panel, t.get("refId")).get("custom", {}).get("axisPlacement")
                    == "right" for t, _, _ in results)
    plot_left, plot_right = 70 / px_w, (1 - 62 / px_w) if has_right else (1 - 12 / px_w)
    plot_bottom = (legend_px + 24) / px_h
    plot_top = 1 - 30 / px_h
    ax = fig.add_axes((left + plot_left * width, bottom + plot_bottom * height,
                       (plot_right - plot_left) * width, (plot_top - plot_bottom) * height))
    ax.set_xlim(datetime.datetime.fromtimestamp(start, datetime.timezone.utc),
                datetime.datetime.fromtimestamp(end, datetime.timezone.utc))
    locator = mdates.AutoDateLocator(minticks=3, maxticks=6, tz=datetime.timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=datetime.timezone.utc)
                                 if end - start > 600 else
                                 mdates.DateFormatter("%H:%M:%S", tz=datetime.timezone.utc))
    ax.grid(True, color="#e4e7eb", linewidth=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.tick_params(labelsize=8, colors="#464c54", length=0)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5))

    if not drawn:
        ax.set_yticks([])
        ax.set_xticks([])
        ax.grid(False)
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center",
                fontsize=13, color="#6e7781")
        return ax, None

    defaults = field_config(panel, None)
    ax.yaxis.set_major_formatter(unit_formatter(defaults.get("unit")))
    right = None
    handles = []
    for i, (target, step, name, points) in enumerate(drawn):
        config = field_config(panel, target.get("refId"))
        on = ax
        if config.get("custom", {}).get("axisPlacement") == "right":
            if right is None:
                right = ax.twinx()
                for spine in right.spines.values():
                    spine.set_visible(False)
                right.tick_params(labelsize=8, colors="#464c54", length=0)
                right.yaxis.set_major_locator(MaxNLocator(nbins=5))
                right.yaxis.set_major_formatter(unit_formatter(config.get("unit")))
            on = right
        times, values = with_gaps(points, step)
        line, = on.plot(times, values, color=PALETTE[i % len(PALETTE)], linewidth=1.3,
                        label=name)
        handles.append(line)
    for axis in (ax, right):
        if axis is not None:
            axis.set_ylim(*value_range(axis))

    # Thresholds drawn as lines (thresholdsStyle line / dashed), each step with a value; kept in
    # view, so that the picture shows where an objective lies even while the data is far below.
    style = defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "off")
    if style.startswith(("line", "dashed")):
        for step in defaults.get("thresholds", {}).get("steps", []):
            if step.get("value") is None:
                continue
            colour = NAMED_COLOURS.get(step.get("color"), step.get("color"))
            ax.axhline(step["value"], color=colour, linewidth=1.2,
                       linestyle="--" if style.startswith("dashed") else "-")
            low, high = ax.get_ylim()
            ax.set_ylim(low, max(high, step["value"] * 1.1))

    ax.legend(handles=handles, loc="upper left", ncols=columns, frameon=False, fontsize=8,
              bbox_to_anchor=(-plot_left / (plot_right - plot_left),
                              -20 / ((plot_top - plot_bottom) * px_h)),
              handlelength=1.6, columnspacing=1.2, borderaxespad=0, borderpad=0)
    return ax, right


def draw(dashboard, panels, start, end, values_text="", note=""):
    """The figure and {panel id: (axes, right axes or None)}."""
    rows = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p, _ in panels), default=0)
    page_height_px = HEADER_PX + rows * (CELL_PX + GAP_PX)
    fig = plt.figure(figsize=(PAGE_PX / DPI, page_height_px / DPI), dpi=DPI)
    fig.patch.set_facecolor("white")
    stamp = "%Y-%m-%d %H:%M:%S"
    span = (f"{datetime.datetime.fromtimestamp(start, datetime.timezone.utc):{stamp}} to "
            f"{datetime.datetime.fromtimestamp(end, datetime.timezone.utc):%H:%M:%S} UTC")
    fig.text(GAP_PX / 2 / PAGE_PX, 1 - 22 / page_height_px, dashboard.get("title", ""),
             fontsize=16, fontweight="bold", va="center")
    fig.text(GAP_PX / 2 / PAGE_PX, 1 - 50 / page_height_px,
             "  ".join(part for part in (span, values_text, note) if part), fontsize=10,
             va="center", color="#464c54")
    axes = {}
    for panel, results in panels:
        if panel["type"] == "row":
            _draw_row(fig, panel, page_height_px)
        elif panel["type"] != "timeseries":  # the two types gecd.json has
            raise ValueError(f'panel "{panel["title"]}": type {panel["type"]} is not drawn')
        else:
            axes[panel["id"]] = _draw_timeseries(fig, panel, results, start, end,
                                                 page_height_px)
    return fig, axes


def summary(panels):
    """One line per panel: each query's legend and how many series it returned."""
    lines = []
    for panel, results in panels:
        if panel["type"] == "row":
            continue
        parts = []
        for target, _, series in results:
            label = target.get("legendFormat") or target.get("refId", "")
            parts.append(f"{label}: {len(series)} series" if series else f"{label}: no data")
        status = "" if any(s for _, _, s in results) else "  [No data]"
        lines.append(f'{panel["title"]}: {"; ".join(parts)}{status}')
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prometheus", required=True, help="its URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--start", type=float, required=True, help="unix seconds")
    parser.add_argument("--end", type=float, required=True, help="unix seconds")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--dashboard", default=DASHBOARD)
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a template variable's value (comma-separated: several); "
                             "default: its All value")
    parser.add_argument("--scrape-interval", default="15s",
                        help="the data source's scrape interval (Grafana's default 15s), "
                             "the floor of $__interval")
    parser.add_argument("--note", default="", help="text for the header line")
    args = parser.parse_args(argv)
    if args.end <= args.start:
        parser.error("--end must be after --start")
    given = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--var {item}: NAME=VALUE")
        given[name] = value
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    panels = fetch(dashboard, Prometheus(args.prometheus), args.start, args.end,
                   parse_duration(args.scrape_interval), given)
    for line in summary(panels):
        print(line)
    values_text = "  ".join(f"{v['name']}: {given.get(v['name'], 'All')}"
                            for v in dashboard.get("templating", {}).get("list", [])
                            if v.get("type") != "datasource")
    fig, _ = draw(dashboard, panels, args.start, args.end, values_text, args.note)
    fig.savefig(args.output, dpi=DPI)
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
