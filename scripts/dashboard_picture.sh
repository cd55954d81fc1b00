#!/usr/bin/env bash
# docs/dashboard.png: the Grafana dashboard (deploy/k8s/monitoring/dashboards/gecd.json) drawn
# from a real run, without Grafana (tools/monitoring/render_dashboard.py):
#   1. `gecd serve` on the default config and model (configs/gecd.yaml, as scripts/run.sh runs
#      it, the engine's OpenMP threads waiting as `gecd serve` sets them (docs/OPERATIONS.md)
#      or as OMP_WAIT_POLICY / GOMP_SPINCOUNT in the environment say; no sentence cache, which
#      would answer JFLEG's 754 cycled sentences from memory after the first pass) and
#      `gecd route` in front of it, on free 127.0.0.1 ports;
#   2. the capacity through the router: gecd-load --find-max at p99 < 1 s on the input (JFLEG
#      dev), unless CAPACITY (req/s) is given;
#   3. Prometheus (Debian's) scraping both every SCRAPE_S seconds with the labels the dashboard
#      filters on (namespace, pod, as Kubernetes discovery's relabelling gives them) and
#      evaluating deploy/k8s/monitoring/gecd-rules.yaml (the burn-rate panel's recording rules);
#   4. gecd-load through the router in PHASES, each a share of the capacity for some seconds:
#      light, near capacity, an overload (shed at admission), light again;
#   5. the dashboard drawn over that window, namespace=gecd, into $PNG.
# About six minutes; loads only 127.0.0.1. Builds nothing: first
# `cmake --build build --target gecd gecd-load`. The plot's venv (matplotlib, pinned in
# tools/route/requirements.txt) is made in $VENV once, re-made when that file changes.
#
#   bash scripts/dashboard_picture.sh
#   (env: BUILD=build INPUT=../shared/data/jfleg/dev.src CAPACITY= SCRAPE_S=2 PNG=docs/dashboard.png
#    OUT=dir PHASES="light:0.2:60 near:0.8:90 overload:3:40 light:0.2:60")
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
GECD="$BUILD/gecd"
LOAD="$BUILD/gecd-load"
CONFIG="${CONFIG:-$ROOT/configs/gecd.yaml}"
INPUT="${INPUT:-$ROOT/../shared/data/jfleg/dev.src}"
CAPACITY="${CAPACITY:-}"
SCRAPE_S="${SCRAPE_S:-2}"
PNG="${PNG:-$ROOT/docs/dashboard.png}"
OUT="${OUT:-$(mktemp -d /tmp/gecd-dashboard.XXXXXX)}"
VENV="${VENV:-$ROOT/.venv-plot}"
PHASES="${PHASES:-light:0.2:60 near:0.8:90 overload:3:40 light:0.2:60}"
NAMESPACE=gecd
REQUIREMENTS="$ROOT/tools/route/requirements.txt"

die() { echo "dashboard_picture: $*" >&2; exit 1; }
for bin in "$GECD" "$LOAD"; do
  [[ -x "$bin" ]] || die "missing $bin: cmake --build $BUILD --target gecd gecd-load"
done
for tool in prometheus promtool curl; do
  command -v "$tool" >/dev/null || die "$tool is not installed (scripts/install_deps.sh)"
done
[[ -r "$INPUT" ]] || die "no input $INPUT (JFLEG dev: ../shared/data/jfleg/dev.src)"
mkdir -p "$OUT"

if [[ ! -x "$VENV/bin/python" ]] || ! cmp -s "$REQUIREMENTS" "$VENV/requirements.txt"; then
  echo "dashboard_picture: making the venv $VENV (PyPI, $REQUIREMENTS)"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (Debian: python3-venv)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS" ||
    die "pip install -r $REQUIREMENTS into $VENV failed (PyPI reachable?)"
  cp "$REQUIREMENTS" "$VENV/requirements.txt"
fi

# free_port, start_daemon NAME ARGS... (GRPC_PORT, METRICS_PORT, DAEMON_PID), stop_daemon.
# shellcheck source=scripts/lib/daemon.sh
source "$ROOT/scripts/lib/daemon.sh"
ROUTE_PID="" PROMETHEUS_PID="" LOAD_PID=""
cleanup() {
  for pid in "$LOAD_PID" "$PROMETHEUS_PID" "$ROUTE_PID"; do
    if [[ -n "$pid" ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  stop_daemon
}
trap cleanup EXIT

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); work dir: $OUT"

# logging.level=info after start_daemon's warn: the start-up log names the engine's kernels.
start_daemon gecd --config "$CONFIG" --set logging.level=info
grep -E "engine backend|compute threads" "$OUT/gecd.daemon.log" || true

ROUTE_PORT="$(free_port)" ROUTE_METRICS_PORT="$(free_port)"
"$GECD" route --config "$CONFIG" --set "route.listen=127.0.0.1:$ROUTE_PORT" \
  --set "route.metrics_listen=127.0.0.1:$ROUTE_METRICS_PORT" --set route.endpoints.source=static \
  --set "route.endpoints.static=127.0.0.1:$GRPC_PORT" --set logging.level=warn \
  2>"$OUT/route.log" &
ROUTE_PID=$!
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$ROUTE_METRICS_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$ROUTE_PID" 2>/dev/null || die "gecd route exited: $OUT/route.log"
  sleep 0.1
done
curl -sf "http://127.0.0.1:$ROUTE_METRICS_PORT/readyz" >/dev/null || die "gecd route not ready"

load() {
  "$LOAD" --target "127.0.0.1:$ROUTE_PORT" --input "$INPUT" --channels 8 --threads 1 "$@"
}
if [[ -z "$CAPACITY" ]]; then
  echo "== capacity through the router: gecd-load --find-max, p99 < 1 s ($(basename "$INPUT"))"
  # Before Prometheus starts, so that the search is not in the picture.
  load --find-max --slo-p99 1s --qps 10 --warmup 2s --duration 5s --max-trials 8 \
    --precision 0.1 --json "$OUT/find-max.json" | tee "$OUT/find-max.log"
  CAPACITY="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_qps"])' \
    "$OUT/find-max.json")"
  python3 -c "import sys; sys.exit(float(sys.argv[1]) <= 0)" "$CAPACITY" ||
    die "find-max found no rate meeting p99 < 1 s"
fi
echo "capacity: $CAPACITY req/s"

PROMETHEUS_PORT="$(free_port)"
cat >"$OUT/prometheus.yml" <<EOF
global:
  scrape_interval: ${SCRAPE_S}s
  scrape_timeout: ${SCRAPE_S}s
  evaluation_interval: ${SCRAPE_S}s
rule_files:
  - $ROOT/deploy/k8s/monitoring/gecd-rules.yaml
scrape_configs:
  - job_name: gecd
    static_configs:
      - targets: ["127.0.0.1:$METRICS_PORT"]
        labels: {namespace: $NAMESPACE, pod: gecd-0}
  - job_name: gecd-route
    static_configs:
      - targets: ["127.0.0.1:$ROUTE_METRICS_PORT"]
        labels: {namespace: $NAMESPACE, pod: gecd-route-0}
EOF
promtool check config "$OUT/prometheus.yml" >"$OUT/promtool.log" 2>&1 ||
  die "promtool check config failed: $OUT/promtool.log"
prometheus --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/tsdb" \
  --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --log.level=warn >"$OUT/prometheus.log" 2>&1 &
PROMETHEUS_PID=$!
api="http://127.0.0.1:$PROMETHEUS_PORT"
for _ in $(seq 60); do
  [[ "$(curl -s "$api/api/v1/targets" | grep -o '"health":"up"' | wc -l)" -eq 2 ]] && break
  kill -0 "$PROMETHEUS_PID" 2>/dev/null || die "prometheus exited: $OUT/prometheus.log"
  sleep 0.5
done
[[ "$(curl -s "$api/api/v1/targets" | grep -o '"health":"up"' | wc -l)" -eq 2 ]] ||
  die "prometheus does not scrape both targets: $api/api/v1/targets"

# A few idle scrapes first, so that the picture starts from nothing; a few after the last phase.
START="$(date +%s)"
sleep $((3 * SCRAPE_S))
note="gecd-load on $(basename "$INPUT") through gecd route, capacity ${CAPACITY} req/s:"
seed=1  # one per phase: each its own Poisson arrivals
for phase in $PHASES; do
  IFS=: read -r name share seconds <<<"$phase"
  qps="$(python3 -c "print(round(float('$CAPACITY') * $share, 1))")"
  echo "== $name: $qps req/s ($share x capacity), $seconds s"
  note+=" $name $qps req/s ${seconds} s,"
  load --qps "$qps" --warmup 0s --duration "${seconds}s" --seed "$seed" \
    --json "$OUT/$name-$seed.json" >"$OUT/$name-$seed.log" 2>&1 &
  LOAD_PID=$!
  wait "$LOAD_PID" || die "gecd-load exited $?: $OUT/$name-$seed.log"
  LOAD_PID=""
  grep -E "achieved|latency|errors|refus" "$OUT/$name-$seed.log" || true
  seed=$((seed + 1))
done
sleep $((5 * SCRAPE_S))
END="$(date +%s)"

mkdir -p "$(dirname "$PNG")"
"$VENV/bin/python" "$ROOT/tools/monitoring/render_dashboard.py" --prometheus "$api" \
  --start "$START" --end "$END" --var "namespace=$NAMESPACE" --scrape-interval "${SCRAPE_S}s" \
  --output "$PNG" --note "${note%,}; Prometheus scraping every ${SCRAPE_S} s" |
  tee "$OUT/render.log"
echo "$PNG: $(du -k "$PNG" | cut -f1) KiB"
