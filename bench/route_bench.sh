#!/usr/bin/env bash
# The router's cost and its balancing, side by side with HAProxy, in one run on this machine.
# Builds nothing; first: cmake --build "$BUILD_DIR" --target gecd gecd-load
#
#   bench/route_bench.sh [--out FILE] [--qps N] [--duration S] [--warmup S] [--slow-ms N]
#                        [--find-max] [--rounds N] [--slo-p99 D] [--scenario A|B|both]
#
# Echo daemons (engine.backend=echo, 1 worker each, the repository's default model for its
# tokenizer): A and B fast, C with engine.echo_step_ms=--slow-ms (a slow backend: every answer
# waits for a step of that length, and a step answers at most engine.max_batch_size, 128).
#   Scenario A, A and B: gecd-load straight to both (--target A,B: its channels split over
#     them), then through HAProxy (balance leastconn, balance random(2)) and gecd route (p2c).
#   Scenario B, A and C: the same direct row, HAProxy roundrobin, leastconn, random(2), and
#     gecd route round_robin, p2c, least_request.
# Every row offers the same open-loop rate (gecd-load --qps, Poisson, --duration after
# --warmup) and reports achieved req/s, OK and failed answers, the share of the requests the
# second daemon answered, p50/p90/p99 of the OK ones, what the proxy adds to the direct row's
# p50 and p99, and the proxy's CPU per request: utime+stime of its processes (/proc/PID/stat)
# over the run, divided by the requests the daemons answered meanwhile (the change in their
# gecd_requests_total). --find-max adds, per proxy in scenario A, the highest rate meeting
# p99 <= --slo-p99 (gecd-load --find-max, short trials), searched --rounds times (1) with the
# paths taking turns in each round, so that the machine's noise falls on all of them alike;
# the table gives every round and the median.
# gecd route rows are skipped, with a note, when `gecd route --help` fails (not built in).
# The Markdown table goes to stdout and, with --out, to FILE. Every process the script started
# is stopped on exit. Everything (proxies, daemons, gecd-load) shares this machine's cores: the
# figures compare the proxies with each other, they are not a dedicated server's.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# BUILD_DIR, GECD, LOAD, MODEL_DIR; check_binaries, stop, stop_all, forget, free_port, http_ok,
# tcp_open, wait_until, start_daemon
# shellcheck source=bench/route_bench_lib.sh
source "$ROOT/bench/route_bench_lib.sh"

OUT_FILE=""
QPS=2000
DURATION=10
WARMUP=1
SLOW_MS=20
FIND_MAX=0
ROUNDS=1
SLO_P99=20ms
SCENARIOS=both
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT_FILE="$2"; shift 2 ;;
    --qps) QPS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --slow-ms) SLOW_MS="$2"; shift 2 ;;
    --find-max) FIND_MAX=1; shift ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --slo-p99) SLO_P99="$2"; shift 2 ;;
    --scenario) SCENARIOS="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "route_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] ||
  { echo "route_bench.sh: --rounds must be a positive integer, got '$ROUNDS'" >&2; exit 2; }
case "$SCENARIOS" in
  A|B|both) ;;
  *) echo "route_bench.sh: --scenario must be A, B or both, got '$SCENARIOS'" >&2; exit 2 ;;
esac
check_binaries
command -v haproxy >/dev/null ||
  { echo "haproxy is not installed (scripts/install_deps.sh)" >&2; exit 1; }
[[ -f "$MODEL_DIR/tokenizer.model" ]] || { echo "missing $MODEL_DIR" >&2; exit 1; }

WORK="$(mktemp -d /tmp/gecd-route-bench.XXXXXX)"
PIDS=()  # every long-running process started here, stopped by stop_all

on_exit() {
  local rc=$?
  stop_all
  if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "route_bench.sh: logs kept in $WORK" >&2; fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# start_haproxy BALANCE PORT BACKEND...: HAProxy proxying gRPC (HTTP/2 both sides); sets PROXY_PID.
start_haproxy() {
  local balance="$1" port="$2"; shift 2
  local cfg="$WORK/haproxy-${balance//[^a-z0-9]/_}.cfg" i=0 backend
  {
    cat <<CFG
global
  maxconn 4000
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
frontend grpc_in
  bind 127.0.0.1:$port proto h2
  default_backend daemons
backend daemons
  balance $balance
CFG
    for backend in "$@"; do
      i=$((i + 1))
      echo "  server d$i $backend proto h2"
    done
  } >"$cfg"
  haproxy -c -q -f "$cfg" >"$WORK/haproxy.log" 2>&1 || { cat "$WORK/haproxy.log" >&2; exit 1; }
  haproxy -db -f "$cfg" >>"$WORK/haproxy.log" 2>&1 &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  wait_until "$PROXY_PID" "$WORK/haproxy.log" "haproxy ($balance)" tcp_open "$port"
}

# start_route POLICY PORT BACKEND...: gecd route with a static endpoint list; sets PROXY_PID.
start_route() {
  local policy="$1" port="$2"; shift 2
  local metrics endpoints
  metrics="$(free_port)"
  endpoints="$(IFS=,; echo "$*")"
  : >"$WORK/route.yaml"  # every setting comes from --set
  "$GECD" route --config "$WORK/route.yaml" --set "route.listen=127.0.0.1:$port" \
    --set "route.metrics_listen=127.0.0.1:$metrics" --set "route.policy=$policy" \
    --set "route.endpoints.static=$endpoints" --set route.slow_start_s=0 \
    --set logging.level=warn 2>"$WORK/route-$policy.log" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  wait_until "$PROXY_PID" "$WORK/route-$policy.log" "gecd route ($policy)" \
    http_ok "$metrics" /readyz
}

stop_proxy() {
  stop "$PROXY_PID"
  forget "$PROXY_PID"
  PROXY_PID=""
}

# CPU clock ticks (utime + stime) of PID and its descendants.
cpu_ticks() {
  python3 - "$1" <<'PY'
import os, sys
stats = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, ticks
tree, total, grew = {int(sys.argv[1])}, 0, True
while grew:
    grew = False
    for pid, (ppid, _) in stats.items():
        if ppid in tree and pid not in tree:
            tree.add(pid)
            grew = True
print(sum(stats[p][1] for p in tree if p in stats))
PY
}

# Requests each daemon (by metrics port) has answered, every code: "N1 N2".
answered() {
  local port counts=()
  for port in "$@"; do
    counts+=("$(curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" |
      awk '/^gecd_requests_total[{ ]/ { s += $NF } END { printf "%d", s }')")
  done
  echo "${counts[*]}"
}

SENTENCES="$ROOT/bench/short_sentences.txt"

ROWS=()         # Markdown rows
FINDMAX_ROWS=()
NOTES=()
DIRECT_P50=""
DIRECT_P99=""
LOAD_FLAGS=(--input "$SENTENCES" --channels 8 --threads 2)

# row SCENARIO PATH POLICY TARGET PROXY_PID|- METRICS_PORT...: one gecd-load run, one row.
row() {
  local scenario="$1" path="$2" policy="$3" target="$4" pid="$5"; shift 5
  local name="${scenario}-${path}-${policy}" ticks0=0 ticks1=0 rc=0 a0 b0 a1 b1
  name="${name//[^A-Za-z0-9_.-]/_}"
  read -r a0 b0 <<<"$(answered "$@")"
  [[ "$pid" == - ]] || ticks0="$(cpu_ticks "$pid")"
  "$LOAD" --target "$target" "${LOAD_FLAGS[@]}" --qps "$QPS" --duration "$DURATION" \
    --warmup "$WARMUP" --json "$WORK/$name.json" >"$WORK/$name.txt" 2>&1 || rc=$?
  [[ "$pid" == - ]] || ticks1="$(cpu_ticks "$pid")"
  read -r a1 b1 <<<"$(answered "$@")"
  if [[ $rc -ne 0 ]]; then
    local why
    why="$(tail -1 "$WORK/$name.txt")"
    ROWS+=("| $scenario | $path | $policy | gecd-load failed (exit $rc): $why |")
    echo "  $path $policy: gecd-load failed (exit $rc)" >&2
    return
  fi
  local line
  line="$(python3 - "$WORK/$name.json" "$scenario" "$path" "$policy" "$QPS" \
    "$((ticks1 - ticks0))" "$((a1 - a0))" "$((b1 - b0))" "$(getconf CLK_TCK)" "$pid" \
    "${DIRECT_P50:-}" "${DIRECT_P99:-}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
scenario, path, policy, qps = sys.argv[2:6]
ticks, first, second = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
hz, pid, base50, base99 = int(sys.argv[9]), sys.argv[10], sys.argv[11], sys.argv[12]
answered = first + second
share = f"{100 * second / answered:.1f}" if answered else "n/a"
lat = r["latency_ms"]
p50, p90, p99 = lat["p50"], lat["p90"], lat["p99"]
if pid == "-":
    cpu = "—"
elif answered > 0:
    cpu = f"{ticks / hz * 1e6 / answered:.1f}"
else:
    cpu = "n/a"
d50 = f"{p50 - float(base50):+.2f}" if base50 and pid != "-" else "—"
d99 = f"{p99 - float(base99):+.2f}" if base99 and pid != "-" else "—"
codes = ", ".join(f"{k} {v}" for k, v in sorted(r["errors_by_code"].items()))
failed = f'{r["errors"]}' + (f" ({codes})" if codes else "")
print(f'| {scenario} | {path} | {policy} | {float(qps):.0f} | {r["achieved_qps"]:.0f} | '
      f'{r["ok"]} | {failed} | {share} | {p50:.2f} | {p90:.2f} | {p99:.2f} | {d50} | {d99} | '
      f'{cpu} |'
      f'\t{p50}\t{p99}\t{r["ok"]}')
PY
)"
  local cells="${line%%$'\t'*}" rest="${line#*$'\t'}"
  ROWS+=("$cells")
  echo "  $cells" >&2
  if [[ "$pid" == - ]]; then
    DIRECT_P50="$(cut -f1 <<<"$rest")"
    DIRECT_P99="$(cut -f2 <<<"$rest")"
  fi
  if [[ "$(cut -f3 <<<"$rest")" == 0 ]]; then
    local said
    said="$(tail -3 "$WORK/$name.txt" | tr '\n' ' ')"
    NOTES+=("$scenario $path $policy answered nothing; gecd-load said: $said")
  fi
}

# find_max PATH POLICY TARGET ROUND: prints the highest rate gecd-load finds within --slo-p99.
find_max() {
  local path="$1" policy="$2" target="$3" round="$4" name rc=0
  name="findmax-${path}-${policy}-${round}"
  name="${name//[^A-Za-z0-9_.-]/_}"
  "$LOAD" --target "$target" "${LOAD_FLAGS[@]}" --find-max --slo-p99 "$SLO_P99" --qps "$QPS" \
    --warmup 0.5s --duration 2s --max-trials 7 --precision 0.1 --json "$WORK/$name.json" \
    >"$WORK/$name.txt" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "failed (gecd-load exit $rc: $WORK/$name.txt)"
  else
    python3 -c "import json, sys; print('%.0f' % json.load(open(sys.argv[1]))['max_qps'])" \
      "$WORK/$name.json"
  fi
}

# find_max_rounds: scenario A's find-max, --rounds rounds, every path in turn in each.
find_max_rounds() {
  local backends=("127.0.0.1:$A_GRPC" "127.0.0.1:$B_GRPC") proxy="127.0.0.1:$PROXY_PORT"
  local keys=("direct|client round robin" "haproxy|leastconn" "haproxy|random(2)")
  [[ $ROUTE == 0 ]] || keys+=("gecd route|p2c")
  declare -A found
  local r key path policy max
  for r in $(seq "$ROUNDS"); do
    for key in "${keys[@]}"; do
      path="${key%%|*}"; policy="${key#*|}"
      case "$path" in
        direct) max="$(find_max "$path" "$policy" "${backends[0]},${backends[1]}" "$r")" ;;
        haproxy)
          start_haproxy "$policy" "$PROXY_PORT" "${backends[@]}"
          max="$(find_max "$path" "$policy" "$proxy" "$r")"
          stop_proxy ;;
        *)
          start_route "$policy" "$PROXY_PORT" "${backends[@]}"
          max="$(find_max "$path" "$policy" "$proxy" "$r")"
          stop_proxy ;;
      esac
      if [[ $max == failed* ]]; then
        NOTES+=("find-max $path $policy round $r: $max")
        max=failed
      fi
      found[$key]+="$max "
      echo "  find-max round $r $path $policy: $max" >&2
    done
  done
  for key in "${keys[@]}"; do
    FINDMAX_ROWS+=("$(python3 - "$key" ${found[$key]} <<'PY'
import statistics, sys
key, values = sys.argv[1], sys.argv[2:]
path, policy = key.split("|", 1)
numbers = [float(v) for v in values if v != "failed"]
median = "%.0f" % statistics.median(numbers) if numbers else "—"
print("| %s | %s | %s | %s |" % (path, policy, " | ".join(values), median))
PY
)")
  done
}

ROUTE=1
if ! "$GECD" route --help >/dev/null 2>&1; then
  ROUTE=0
  NOTES+=("gecd route rows skipped: \`$GECD route --help\` failed (the router is not in this build)")
fi

echo "starting daemons (echo backend, 1 worker each; C: engine.echo_step_ms=$SLOW_MS)" >&2
start_daemon A
if [[ $SCENARIOS != B ]]; then start_daemon B; fi
if [[ $SCENARIOS != A ]]; then start_daemon C --set "engine.echo_step_ms=$SLOW_MS"; fi
PROXY_PORT="$(free_port)"
PROXY_PID=""

# scenario NAME DAEMON DAEMON HAPROXY_BALANCES ROUTE_POLICIES
scenario() {
  local name="$1" x="$2" y="$3" balances="$4" policies="$5" b p
  local gx="${x}_GRPC" gy="${y}_GRPC" mx="${x}_METRICS" my="${y}_METRICS"
  local backends=("127.0.0.1:${!gx}" "127.0.0.1:${!gy}") ports=("${!mx}" "${!my}")
  local proxy="127.0.0.1:$PROXY_PORT"
  echo "scenario $name: daemons $x and $y" >&2
  DIRECT_P50=""; DIRECT_P99=""
  row "$name" direct "client round robin" "${backends[0]},${backends[1]}" - "${ports[@]}"
  for b in $balances; do
    start_haproxy "$b" "$PROXY_PORT" "${backends[@]}"
    row "$name" haproxy "$b" "$proxy" "$PROXY_PID" "${ports[@]}"
    stop_proxy
  done
  if [[ $ROUTE == 0 ]]; then return 0; fi
  for p in $policies; do
    start_route "$p" "$PROXY_PORT" "${backends[@]}"
    row "$name" "gecd route" "$p" "$proxy" "$PROXY_PID" "${ports[@]}"
    stop_proxy
  done
}

if [[ $SCENARIOS == A || $SCENARIOS == both ]]; then
  scenario A A B "leastconn random(2)" "p2c"
  if [[ $FIND_MAX == 1 ]]; then find_max_rounds; fi
fi
if [[ $SCENARIOS == B || $SCENARIOS == both ]]; then
  scenario B A C "roundrobin leastconn random(2)" "round_robin p2c least_request"
fi

{
  echo "## gecd route vs HAProxy $(haproxy -v | head -1 | awk '{print $3}'): two echo daemons"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared by the proxy, both daemons and gecd-load."
  echo "Open loop $QPS req/s (Poisson) for ${DURATION} s after ${WARMUP} s warm-up, 8 channels; daemons: echo backend, 1 worker;"
  echo "scenario A: two fast daemons; scenario B: one fast, one with engine.echo_step_ms=$SLOW_MS."
  echo "HAProxy: mode http, h2 on both sides, its default threads (one per core)."
  echo "2nd %: the share of the requests the second daemon answered (B in scenario A; C, the slow one, in B)."
  echo "Δ p50/p99: over the scenario's direct row. CPU: the proxy's utime+stime per request answered."
  echo
  echo "| scenario | path | policy | offered req/s | achieved req/s | ok | failed | 2nd % | p50 ms | p90 ms | p99 ms | Δ p50 ms | Δ p99 ms | proxy CPU µs/req |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${ROWS[@]}"
  if [[ ${#FINDMAX_ROWS[@]} -gt 0 ]]; then
    echo
    echo "Scenario A, highest rate with p99 <= $SLO_P99 (gecd-load --find-max, 2 s trials, $ROUNDS"
    echo "round(s), the paths in turn in each: a coarse figure, as noisy as the machine is shared):"
    echo
    header="| path | policy |"; rule="| --- | --- |"
    for r in $(seq "$ROUNDS"); do header+=" round $r |"; rule+=" ---: |"; done
    echo "$header median req/s |"
    echo "$rule ---: |"
    printf '%s\n' "${FINDMAX_ROWS[@]}"
  fi
  if [[ ${#NOTES[@]} -gt 0 ]]; then
    echo
    printf -- '- %s\n' "${NOTES[@]}"
  fi
} >"$WORK/table.md"
cat "$WORK/table.md"
[[ -z "$OUT_FILE" ]] || cp "$WORK/table.md" "$OUT_FILE"
