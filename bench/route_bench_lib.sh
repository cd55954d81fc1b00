# Shell helpers of the router benchmarks (bench/route_bench.sh, bench/route_tls_bench.sh),
# sourced once they set ROOT: the binaries (GECD, LOAD, from BUILD_DIR; check_binaries) and the
# model the echo daemons load; then, once they set WORK (their temporary directory) and PIDS=(),
# starting echo daemons on free ports, waiting for them, stopping what they started.
# shellcheck shell=bash

BUILD_DIR="${BUILD_DIR:-build}"
[[ "$BUILD_DIR" = /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"
GECD="$BUILD_DIR/gecd"
LOAD="$BUILD_DIR/gecd-load"
MODEL_DIR="$ROOT/models/gecd-gec-small"  # the echo backend needs only its tokenizer

check_binaries() {
  for bin in "$GECD" "$LOAD"; do
    [[ -x "$bin" ]] ||
      { echo "missing $bin: cmake --build $BUILD_DIR --target gecd gecd-load" >&2; exit 1; }
  done
}

# stop PID: SIGTERM, up to 10 s to exit (a daemon drains), then SIGKILL.
stop() {
  local pid="$1"
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do stop "$pid"; done
  PIDS=()
}
forget() {  # forget PID: drop a stopped process from PIDS
  local kept=() pid
  for pid in "${PIDS[@]}"; do [[ "$pid" == "$1" ]] || kept+=("$pid"); done
  PIDS=("${kept[@]}")
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
http_ok() { curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$1$2"; }
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_until PID LOG WHAT CMD...: polls CMD for up to 60 s; fails naming LOG if PID exits first.
wait_until() {
  local pid="$1" log="$2" what="$3"; shift 3
  for _ in $(seq 600); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$what did not become ready; its log ($log):" >&2
  tail -20 "$log" >&2
  exit 1
}

# start_daemon NAME [--set K=V]...: an echo daemon on free ports; sets <NAME>_GRPC, _METRICS,
# _PID (its supervisor's).
start_daemon() {
  local name="$1"; shift
  local grpc metrics
  grpc="$(free_port)"; metrics="$(free_port)"
  "$GECD" serve --set engine.backend=echo --set "model.dir=$MODEL_DIR" \
    --set "server.listen=127.0.0.1:$grpc" --set "server.metrics_listen=127.0.0.1:$metrics" \
    --set server.workers=1 --set logging.level=warn --set server.grace_period_ms=2000 \
    --set server.drain_quiet_ms=100 --set server.sentence_cache_mb=0 "$@" 2>"$WORK/daemon-$name.log" &
  PIDS+=($!)
  wait_until $! "$WORK/daemon-$name.log" "daemon $name" http_ok "$metrics" /readyz
  printf -v "${name}_GRPC" %s "$grpc"
  printf -v "${name}_METRICS" %s "$metrics"
  printf -v "${name}_PID" %s "$!"
}

