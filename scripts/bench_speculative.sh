#!/usr/bin/env bash
# Speculative decoding (engine.speculate_tokens) off against on, side by side, on the default
# model (configs/gecd.yaml) and JFLEG dev sources (../shared/data/jfleg, detokenized as gecd
# eval feeds them). Builds nothing; first: ninja -C build gecd gecd-load
#
#   scripts/bench_speculative.sh [K]     (K: the drafts of the "on" runs, default 16)
#
# 1. gecd eval offline, off and on in one call (--compare-set): sequential decode steps per
#    sentence, acceptance, sentences/s, and the count of differing outputs (must be 0).
# 2. Through the daemon with gecd-load, in turns (off, on, off, on): median and p99 latency at
#    a light open-loop load (LIGHT_QPS, default 2 req/s), then find-max under p99 < 1 s.
# Reports and daemon logs go to $OUT (default: a new temp dir).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
GECD="$BUILD/gecd"
LOAD="$BUILD/gecd-load"
JFLEG="${JFLEG:-$ROOT/../shared/data/jfleg}"
OUT="${OUT:-$(mktemp -d /tmp/gecd-spec.XXXXXX)}"
K="${1:-16}"
LIGHT_QPS="${LIGHT_QPS:-2}"
for bin in "$GECD" "$LOAD"; do
  [[ -x "$bin" ]] || { echo "missing $bin: ninja -C $BUILD gecd gecd-load" >&2; exit 1; }
done
[[ -f "$JFLEG/dev.src" ]] || { echo "no JFLEG at $JFLEG (set JFLEG=DIR)" >&2; exit 1; }
mkdir -p "$OUT"
CONFIG="$ROOT/configs/gecd.yaml"

# shellcheck source=scripts/lib/daemon.sh
source "$ROOT/scripts/lib/daemon.sh"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== gecd eval, JFLEG dev: speculate_tokens=$K (model) vs 0 (compare)"
"$GECD" eval --config "$CONFIG" --set "engine.speculate_tokens=$K" \
  --compare-set engine.speculate_tokens=0 --jfleg "$JFLEG" --gleu-iterations 50 \
  --report "$OUT/eval.json" --report-outputs 2>/dev/null | sed -n '/^throughput/,$p'
python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))["outputs"]["jfleg"]
open(sys.argv[2], "w").write("".join(r["input"] + "\n" for r in rows))' \
  "$OUT/eval.json" "$OUT/jfleg_dev.txt"

start_daemon() {
  local name="$1"; shift
  GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
  "$GECD" serve --config "$CONFIG" --set "server.listen=127.0.0.1:$GRPC_PORT" \
    --set "server.metrics_listen=127.0.0.1:$METRICS_PORT" --set logging.level=warn "$@" \
    2>"$OUT/$name.daemon.log" &
  DAEMON_PID=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$METRICS_PORT/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "daemon $name did not become ready; log: $OUT/$name.daemon.log" >&2
  exit 1
}

summary() {  # the light-load report's QPS and latency percentiles
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
lat = r.get("latency_ms", r)
print("  ", {k: r[k] for k in r if k in ("achieved_qps", "ok", "errors")},
      {k: lat[k] for k in lat if k in ("p50", "p90", "p99", "max")})' "$1" 2>/dev/null || cat "$1"
}

for round in 1 2; do
  for k in 0 "$K"; do
    name="spec$k-r$round"
    start_daemon "$name" --set "engine.speculate_tokens=$k"
    echo "== round $round, speculate_tokens=$k: open loop $LIGHT_QPS req/s, 20 s"
    "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/jfleg_dev.txt" --qps "$LIGHT_QPS" \
      --warmup 2s --duration 20s --json "$OUT/$name-light.json" >"$OUT/$name-light.txt"
    grep -E "p50|achieved|latency" "$OUT/$name-light.txt" | head -4
    echo "== round $round, speculate_tokens=$k: find-max, SLO p99 < 1 s"
    "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/jfleg_dev.txt" --find-max \
      --slo-p99 1s --qps 8 --warmup 2s --duration 5s --max-trials 7 \
      --json "$OUT/$name-findmax.json" >"$OUT/$name-findmax.txt" 2>&1
    tail -3 "$OUT/$name-findmax.txt"
    curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$OUT/$name-metrics.txt"
    grep -E '^gecd_speculative_tokens_total' "$OUT/$name-metrics.txt" || true
    stop_daemon
  done
done
echo "reports and logs: $OUT"
