"""Reads the summary `gecd tune --json FILE` writes (src/cli/tune_command.cc) as a pod profile,
so that the simulator runs pods with what tune measured rather than a hand-written profile.

The mapping (docs/AUTOSCALING.md, "Formats"):

  max_rps             rps: the highest offered rate whose trial met the SLO
  concurrency_at_max  concurrency: requests in flight there, the daemon's own
                      gecd_request_concurrency where tune sampled it (what the HPA reads, and
                      what hpa_target was computed from), else Little's law
  p99_at_max_s        p99_ms / 1000
  slo_p99_s           slo_p99_ms / 1000
  hpa_target          hpa_target, which must be concurrency x (1 - headroom)
  latency_alone_s     from the passing trial of the lowest offered rate (any candidate: at a low
                      rate the batch limits the search turns do not bind): its mean latency over
                      the mean latency at rps, times the profile's mean at max_rps
                      (concurrency / rps). Tune measures no idle pod, so this is an upper bound
                      of its latency (a flatter curve than the real one). Left out (a flat
                      curve) when no passing trial ran below rps or its mean was not below the
                      one at rps (noise).

The ratio is taken between the two client-side means, not against concurrency / rps, because
the gauge and the client measure latency differently (the gauge reads ~12% below Little's law
on the default model); the profile's curve keeps its measured shape and passes through the
metric the HPA sees at max_rps."""

import math

# Keys of a tune summary that a pod profile does not have: a JSON object without "format" and
# with one of these is read as a tune summary.
MARKERS = ("slo_met", "hpa_target", "candidates", "rps")


class TuneSummaryError(ValueError):
    """A tune summary that cannot be used; the message names the file and the field."""


def is_tune_summary(doc):
    return isinstance(doc, dict) and "format" not in doc and any(k in doc for k in MARKERS)


def _number(node, name, where, minimum=0.0, inclusive=False):
    if name not in node:
        raise TuneSummaryError(f"{where}{name}: required")
    value = node[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < minimum or (value == minimum and not inclusive):
        relation = ">=" if inclusive else ">"
        raise TuneSummaryError(f"{where}{name}: {value!r} is not a number {relation} {minimum:g}")
    return float(value)


def _typed(node, name, where, kind, what):
    if name not in node:
        raise TuneSummaryError(f"{where}{name}: required")
    if not isinstance(node[name], kind) or (kind is not bool and isinstance(node[name], bool)):
        raise TuneSummaryError(f"{where}{name}: {node[name]!r} is not {what}")
    return node[name]


def _describe(settings):
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "the config's"


def _passing_trials(doc, where):
    """(offered_qps, mean_latency_ms, settings) of every passing trial, checked."""
    found = []
    for i, candidate in enumerate(_typed(doc, "candidates", where, list, "a list")):
        at = f"{where}candidates[{i}]."
        if not isinstance(candidate, dict):
            raise TuneSummaryError(f"{at[:-1]}: {candidate!r} is not an object")
        settings = _typed(candidate, "settings", at, dict, "an object")
        for j, trial in enumerate(_typed(candidate, "trials", at, list, "a list")):
            tat = f"{at}trials[{j}]."
            if not isinstance(trial, dict):
                raise TuneSummaryError(f"{tat[:-1]}: {trial!r} is not an object")
            offered = _number(trial, "offered_qps", tat)
            mean = _number(trial, "mean_latency_ms", tat, inclusive=True)  # 0: no OK answer
            if _typed(trial, "passed", tat, bool, "true or false"):
                found.append((offered, mean, settings))
    return found


def to_pod_profile(doc, where="tune summary"):
    """The gecd-pod-profile/1 object (a dict) for a tune summary; TuneSummaryError naming the
    field when it is malformed or records no rate within the SLO."""
    if not isinstance(doc, dict):
        raise TuneSummaryError(f"{where}: expected a JSON object")
    at = f"{where}: "
    if not _typed(doc, "slo_met", at, bool, "true or false"):
        raise TuneSummaryError(f"{at}slo_met: false: gecd tune found no setting within the SLO, "
                               "so its rps is no pod's capacity")
    rps = _number(doc, "rps", at)
    concurrency = _number(doc, "concurrency", at)
    p99_ms = _number(doc, "p99_ms", at)
    mean_ms = _number(doc, "mean_latency_ms", at)
    slo_ms = _number(doc, "slo_p99_ms", at)
    headroom = _number(doc, "headroom", at, inclusive=True)
    if headroom >= 1:
        raise TuneSummaryError(f"{at}headroom: {headroom:g} is not in [0, 1)")
    target = _number(doc, "hpa_target", at)
    if not math.isclose(target, concurrency * (1 - headroom), rel_tol=1e-6):
        raise TuneSummaryError(f"{at}hpa_target: {target:g} is not concurrency {concurrency:g} x "
                               f"(1 - headroom {headroom:g}) = {concurrency * (1 - headroom):g}")
    if p99_ms > slo_ms:
        raise TuneSummaryError(f"{at}p99_ms: {p99_ms:g} is above slo_p99_ms {slo_ms:g}")
    mean_at_max_s = concurrency / rps
    if mean_at_max_s * 1e3 > p99_ms:
        raise TuneSummaryError(f"{at}concurrency: {concurrency:g} / rps {rps:g} is a mean latency "
                               f"above p99_ms {p99_ms:g}")
    settings = _typed(doc, "settings", at, dict, "an object")

    profile = {"format": "gecd-pod-profile/1", "max_rps": rps, "concurrency_at_max": concurrency,
               "p99_at_max_s": p99_ms / 1e3, "slo_p99_s": slo_ms / 1e3, "hpa_target": target}
    below = [t for t in _passing_trials(doc, at) if t[0] < rps]
    lowest = min(below, key=lambda t: t[0], default=None)
    if lowest is not None and 0 < lowest[1] < mean_ms:
        profile["latency_alone_s"] = lowest[1] / mean_ms * mean_at_max_s
        curve = (f"latency_alone_s {profile['latency_alone_s'] * 1e3:.1f} ms from the "
                 f"{lowest[0]:.1f} req/s trial ({_describe(lowest[2])}): {lowest[1]:.1f} ms mean "
                 f"against {mean_ms:.1f} ms at rps")
    elif lowest is not None:
        curve = (f"no latency_alone_s (a flat curve): the {lowest[0]:.1f} req/s trial's mean "
                 f"{lowest[1]:.1f} ms is not below {mean_ms:.1f} ms at rps")
    else:
        curve = "no latency_alone_s (a flat curve): no trial passed below rps"
    profile["source"] = (f"gecd tune summary: {rps:.1f} req/s, {concurrency:.2f} in flight, p99 "
                         f"{p99_ms:.1f} ms with {_describe(settings)}; {curve}")
    return profile
