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

# free_port, start_daemon NAME ARGS..., DAEMON_PID, stop_daemon (run on exit).
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

for round in 1 2; do
  for k in 0 "$K"; do
    name="spec$k-r$round"
    start_daemon "$name" --config "$CONFIG" --set "engine.speculate_tokens=$k"
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
