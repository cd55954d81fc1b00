#!/usr/bin/env bash
# What TLS costs the router and the daemon, in one run on this machine: gecd route in plaintext,
# with TLS on its listener, and with TLS on its listener and mTLS to daemons that require client
# certificates; then gecd serve called directly, in plaintext and with TLS.
# Builds nothing; first: cmake --build "$BUILD_DIR" --target gecd gecd-load
#
#   bench/route_tls_bench.sh [--out FILE] [--qps N] [--duration S] [--rounds N] [--slo-p99 D]
#
# Five echo daemons (engine.backend=echo, 1 worker each): two plaintext (A, B), two requiring a
# client certificate (tls.require_client_cert; C, D), one with TLS only (E). Three routers (p2c),
# all running throughout:
#   plaintext:   plaintext listener, plaintext to the plaintext daemons;
#   tls:         TLS listener, plaintext to the plaintext daemons;
#   tls + mtls:  TLS listener, mTLS (route.upstream_tls) to the daemons that require it;
# and two daemons called without a router: A (plaintext) and E (gRPC's TLS), where the load's
# cost is the worker's (the echo backend answers at once).
# Certificates: a CA, the routers' and daemons' server certificates (localhost, 127.0.0.1) and
# the routers' client certificate, made with the openssl CLI in a temporary directory.
# Per round, each router in turn: a fixed-rate run (--qps, open loop, --duration after 1 s of
# warm-up: achieved rate, p50/p99, the router's CPU per call from /proc/PID/stat), then
# gecd-load --find-max (the highest rate within p99 <= --slo-p99, short trials). gecd-load keeps
# its connections for the whole run, so the handshakes are a few per run: the figures are the
# per-call cost of encrypting both ways, not of handshakes. Everything shares this machine's
# cores: compare the rows with each other.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# BUILD_DIR, GECD, LOAD, MODEL_DIR; check_binaries, stop_all, free_port, http_ok, wait_until,
# start_daemon
# shellcheck source=bench/route_bench_lib.sh
source "$ROOT/bench/route_bench_lib.sh"
SENTENCES="$ROOT/bench/short_sentences.txt"

OUT_FILE=""
QPS=2000
DURATION=5
ROUNDS=3
SLO_P99=20ms
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT_FILE="$2"; shift 2 ;;
    --qps) QPS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --slo-p99) SLO_P99="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
check_binaries

WORK="$(mktemp -d /tmp/gecd-route-tls-bench.XXXXXX)"
PIDS=()
on_exit() {
  local rc=$?
  stop_all
  if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "route_tls_bench.sh: logs kept in $WORK" >&2; fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# Certificates: one CA signs everything (EC P-256).
cert() {  # cert NAME: NAME.key and NAME.crt signed by the CA
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$WORK/$1.key" -out "$WORK/$1.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' \
    >"$WORK/$1.ext"
  openssl x509 -req -in "$WORK/$1.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 1 -extfile "$WORK/$1.ext" -out "$WORK/$1.crt" 2>/dev/null
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench CA" \
  -days 1 -keyout "$WORK/ca.key" -out "$WORK/ca.crt" 2>/dev/null
cert daemon
cert router
cert router-client

MTLS_DAEMON=(--set "tls.cert_file=$WORK/daemon.crt" --set "tls.key_file=$WORK/daemon.key"
  --set "tls.client_ca_file=$WORK/ca.crt" --set tls.require_client_cert=true)
start_daemon A
start_daemon B
start_daemon C "${MTLS_DAEMON[@]}"
start_daemon D "${MTLS_DAEMON[@]}"
start_daemon E --set "tls.cert_file=$WORK/daemon.crt" --set "tls.key_file=$WORK/daemon.key"

# start_route NAME ENDPOINTS [--set K=V]...: a router on a free port; sets <NAME>_PORT, _PID.
start_route() {
  local name="$1" endpoints="$2"; shift 2
  local port metrics
  port="$(free_port)"; metrics="$(free_port)"
  : >"$WORK/route.yaml"  # every setting comes from --set
  "$GECD" route --config "$WORK/route.yaml" --set "route.listen=127.0.0.1:$port" \
    --set "route.metrics_listen=127.0.0.1:$metrics" --set route.policy=p2c \
    --set "route.endpoints.static=$endpoints" --set route.slow_start_s=0 \
    --set logging.level=warn "$@" 2>"$WORK/route-$name.log" &
  PIDS+=($!)
  wait_until $! "$WORK/route-$name.log" "gecd route ($name)" http_ok "$metrics" /readyz
  printf -v "${name}_PORT" %s "$port"
  printf -v "${name}_PID" %s "$!"
}
TLS_LISTENER=(--set "tls.cert_file=$WORK/router.crt" --set "tls.key_file=$WORK/router.key")
start_route plain "127.0.0.1:$A_GRPC,127.0.0.1:$B_GRPC"
start_route tls "127.0.0.1:$A_GRPC,127.0.0.1:$B_GRPC" "${TLS_LISTENER[@]}"
start_route mtls "127.0.0.1:$C_GRPC,127.0.0.1:$D_GRPC" "${TLS_LISTENER[@]}" \
  --set "route.upstream_tls.ca_file=$WORK/ca.crt" \
  --set "route.upstream_tls.cert_file=$WORK/router-client.crt" \
  --set "route.upstream_tls.key_file=$WORK/router-client.key"

# The daemons called directly, read like the routers through ${NAME}_PORT and ${NAME}_PID.
# shellcheck disable=SC2034 # read indirectly
{
  daemon_plain_PORT="$A_GRPC"; daemon_plain_PID="$A_PID"
  daemon_tls_PORT="$E_GRPC"; daemon_tls_PID="$E_PID"
}
NAMES=(plain tls mtls daemon_plain daemon_tls)

LOAD_FLAGS=(--input "$SENTENCES" --channels 8 --threads 2)
flags_of() {  # the client side of target NAME
  [[ $1 == plain || $1 == daemon_plain ]] || echo "--tls-ca $WORK/ca.crt --tls-server-name localhost"
}
# CPU ticks (user + system) of process $1 and its children (a daemon's worker and engine).
ticks() {
  local pid total=0
  for pid in "$1" $(pgrep -P "$1"); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

declare -A FIXED FOUND
for r in $(seq "$ROUNDS"); do
  for name in "${NAMES[@]}"; do
    port_var="${name}_PORT"; pid_var="${name}_PID"
    read -r -a client <<<"$(flags_of "$name")"
    before="$(ticks "${!pid_var}")"
    "$LOAD" --target "127.0.0.1:${!port_var}" "${LOAD_FLAGS[@]}" "${client[@]}" --qps "$QPS" \
      --warmup 1s --duration "${DURATION}s" --json "$WORK/fixed-$name-$r.json" \
      >"$WORK/fixed-$name-$r.txt" 2>&1 || { cat "$WORK/fixed-$name-$r.txt" >&2; exit 1; }
    after="$(ticks "${!pid_var}")"
    row="$(python3 - "$WORK/fixed-$name-$r.json" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ticks = int(sys.argv[3]) - int(sys.argv[2])
# The target's CPU (a daemon's: its supervisor, worker and engine) over the whole run (warm-up
# included) per call sent.
cpu_us = ticks / int(sys.argv[4]) * 1e6 / max(1, d["sent"])
lat = d["latency_ms"]
print(f"{d['achieved_qps']:.0f} req/s, {d['errors']} errors, p50 {lat['p50']:.2f} ms, "
      f"p99 {lat['p99']:.2f} ms, CPU {cpu_us:.0f} us/call")
PY
)"
    FIXED[$name]+="$row; "
    echo "round $r $name fixed: $row" >&2
    "$LOAD" --target "127.0.0.1:${!port_var}" "${LOAD_FLAGS[@]}" "${client[@]}" --find-max \
      --slo-p99 "$SLO_P99" --qps "$QPS" --warmup 0.5s --duration 2s --max-trials 7 \
      --precision 0.1 --json "$WORK/max-$name-$r.json" >"$WORK/max-$name-$r.txt" 2>&1 ||
      { cat "$WORK/max-$name-$r.txt" >&2; exit 1; }
    max="$(python3 -c "import json, sys; print('%.0f' % json.load(open(sys.argv[1]))['max_qps'])" \
      "$WORK/max-$name-$r.json")"
    FOUND[$name]+="$max "
    echo "round $r $name find-max: $max" >&2
  done
done

{
  echo "## gecd route and gecd serve: plaintext vs TLS ($(date -u +%Y-%m-%d), $(nproc) cores, p2c, two echo daemons a router)"
  echo
  echo "| target | fixed $QPS req/s, ${DURATION} s (each round) | find-max within p99 $SLO_P99 (each round) | median |"
  echo "| --- | --- | --- | ---: |"
  for name in "${NAMES[@]}"; do
    case "$name" in
      plain) label="gecd route, plaintext" ;;
      tls) label="gecd route, TLS listener" ;;
      mtls) label="gecd route, TLS listener + mTLS to the daemons" ;;
      daemon_plain) label="gecd serve called directly, plaintext" ;;
      daemon_tls) label="gecd serve called directly, TLS" ;;
    esac
    # shellcheck disable=SC2086 # one word per round
    median="$(python3 -c "import statistics, sys; print('%.0f' % statistics.median(map(float, sys.argv[1:])))" ${FOUND[$name]})"
    echo "| $label | ${FIXED[$name]%; } | ${FOUND[$name]% } | $median |"
  done
} | tee "${OUT_FILE:-/dev/null}"
