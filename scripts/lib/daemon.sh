# shellcheck shell=bash
# Sourced by the scripts that start `gecd serve` on free local ports (scripts/bench_daemon.sh,
# bench/cpu_peer/run.sh): free_port prints an unused TCP port of 127.0.0.1; DAEMON_PID holds the
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
