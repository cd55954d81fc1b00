# shellcheck shell=bash
# Sourced by the scripts that start `gecd serve` on free local ports (scripts/bench_daemon.sh,
# scripts/bench_speculative.sh, bench/cpu_peer/run.sh): free_port prints an unused TCP port of
# 127.0.0.1; start_daemon NAME ARGS... starts "$GECD" serve with ARGS on free ports (GRPC_PORT,
# METRICS_PORT), its log in $OUT/NAME.daemon.log, and waits for /readyz; DAEMON_PID holds the
# daemon started last, which stop_daemon ends with SIGTERM (the graceful drain) and waits for.
# stop_daemon runs on exit, so a failing script leaves no daemon behind.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

DAEMON_PID=""
stop_daemon() {
  if [[ -n "$DAEMON_PID" ]]; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
  fi
}
trap stop_daemon EXIT

start_daemon() {
  local name="$1"; shift
  GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
  "$GECD" serve --set "server.listen=127.0.0.1:$GRPC_PORT" \
    --set "server.metrics_listen=127.0.0.1:$METRICS_PORT" --set logging.level=warn \
    --set server.sentence_cache_mb=0 "$@" \
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
