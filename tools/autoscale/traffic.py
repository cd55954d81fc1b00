"""Offered load, one rate (req/s) per second: read from a trace file or generated.

A trace is CSV: an optional header `time_s,rate`, then one `time_s,rate` row per line with
time_s (seconds, >= 0) strictly increasing and rate (req/s) >= 0; blank lines and lines that
start with `#` are skipped. Between rows the rate is linear; the trace lasts from its first row's
time to its last's. Anything else is rejected with the line number.

The generated day (`day`) is grammar-correction traffic as the issue describes it: a night
trough of 40,000 req/s, a morning ramp to 220,000 req/s within 30 minutes, a daytime plateau, a
spike and an evening decline, with correlated noise of a few percent."""

import math
import random

DAY_S = 86400

# (hour of day, req/s) through which the day's base curve passes, joined by half-cosines so the
# curve is smooth. 07:30 -> 08:00 is the fast ramp.
DAY_POINTS = ((0.0, 70000), (3.5, 40000), (7.5, 40000), (8.0, 220000), (11.0, 200000),
              (13.0, 190000), (17.0, 210000), (19.0, 170000), (21.0, 120000), (24.0, 70000))
# The spike, a factor on the base curve: x1.5 reached in 60 s at 14:00, held 4 min, gone 3 min
# later (a news item, a batch client switched on).
SPIKE_START_S, SPIKE_RISE_S, SPIKE_HOLD_S, SPIKE_FALL_S, SPIKE_FACTOR = 14 * 3600, 60, 240, 180, 1.5
NOISE_SIGMA, NOISE_CORRELATION_S = 0.02, 60.0


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


def _number(text, name, where):
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {name} {text.strip()!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: {name} {text.strip()!r} must be a finite number >= 0")
    return value


def parse_trace(lines, name="trace"):
    """CSV lines to the per-second rates (rate at each whole second from the first row)."""
    rows = []
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{name}:{lineno}"
        fields = text.split(",")
        if not rows and [f.strip() for f in fields] == ["time_s", "rate"]:
            continue  # the header
        if len(fields) != 2:
            raise TraceError(f"{where}: expected 2 fields (time_s,rate), got {len(fields)}")
        t = _number(fields[0], "time_s", where)
        rate = _number(fields[1], "rate", where)
        if rows and t <= rows[-1][0]:
            raise TraceError(f"{where}: time_s {t:g} is not after the previous row's "
                             f"{rows[-1][0]:g}")
        rows.append((t, rate))
    if len(rows) < 2:
        raise TraceError(f"{name}: needs at least 2 rows (time_s,rate), found {len(rows)}")
    start, rates, i = rows[0][0], [], 0
    for k in range(int(rows[-1][0] - start)):
        t = start + k
        while rows[i + 1][0] < t:
            i += 1
        (t0, r0), (t1, r1) = rows[i], rows[i + 1]
        rates.append(r0 + (r1 - r0) * (t - t0) / (t1 - t0))
    return rates


def read_trace(path):
    try:
        with open(path) as f:
            return parse_trace(f, path)
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from None


def write_trace(path, rates):
    """The per-second rates as a trace that reads back as the same rates: a row per second and
    one at the end (a trace lasts to its last row), each rate written exactly."""
    with open(path, "w") as f:
        f.write("time_s,rate\n")
        for k, rate in enumerate(rates + rates[-1:]):
            f.write(f"{k},{rate!r}\n")


def _base(hour):
    for (h0, r0), (h1, r1) in zip(DAY_POINTS, DAY_POINTS[1:]):
        if h0 <= hour <= h1:
            x = (hour - h0) / (h1 - h0)
            return r0 + (r1 - r0) * (1 - math.cos(math.pi * x)) / 2
    raise ValueError(f"hour {hour} outside the day")


def _spike(t):
    x = t - SPIKE_START_S
    if x < 0 or x > SPIKE_RISE_S + SPIKE_HOLD_S + SPIKE_FALL_S:
        return 1.0
    if x < SPIKE_RISE_S:
        share = x / SPIKE_RISE_S
    elif x < SPIKE_RISE_S + SPIKE_HOLD_S:
        share = 1.0
    else:
        share = 1 - (x - SPIKE_RISE_S - SPIKE_HOLD_S) / SPIKE_FALL_S
    return 1 + (SPIKE_FACTOR - 1) * share


def day(seed=1, seconds=DAY_S):
    """The generated day: one rate per second. Noise is AR(1), log-normal-ish, so that the
    metric wanders like a real one and the tolerance and windows have something to absorb."""
    rng = random.Random(seed)
    phi = math.exp(-1 / NOISE_CORRELATION_S)
    innovation = NOISE_SIGMA * math.sqrt(1 - phi * phi)
    noise, rates = 0.0, []
    for t in range(seconds):
        noise = phi * noise + innovation * rng.gauss(0, 1)
        rates.append(_base(t / 3600 % 24) * _spike(t) * math.exp(noise))
    return rates
