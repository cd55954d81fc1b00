#!/usr/bin/env bash
# Where the daemon's CPU time goes while it serves JFLEG dev's sentences at a steady rate:
# `gecd serve` (the config of run.sh: copy bias and spelling stage off), gecd-load open loop at
# QPS, and `perf record` (cpu-clock samples, so on-CPU time only) of every daemon process;
# ct2_peer.py's perf-groups then sums the samples by process and by part (sgemm, attention,
# sampling, norms, expf, RoPE, the engine's scheduling, ring I/O, kernel, ...).
#
#   bash bench/cpu_peer/daemon_profile.sh      (env: QPS=20 SECONDS_=20 THREADS=2 OUT=dir,
#                                                and any extra environment in DAEMON_ENV)
#
# Needs perf (Debian: linux-perf) allowed to sample this user's processes, and the binaries of
# run.sh. Builds nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
VENV="${VENV:-$BUILD/venv-cpu-peer}"
JFLEG="${JFLEG:-$ROOT/../shared/data/jfleg}"
CONFIG="${CONFIG:-$ROOT/configs/gecd.yaml}"
THREADS="${THREADS:-2}"
QPS="${QPS:-20}"
SECONDS_="${SECONDS_:-20}"
DAEMON_ENV="${DAEMON_ENV:-}"
OUT="${OUT:-$BUILD/cpu-peer/daemon-profile-$(date -u +%Y%m%dT%H%M%SZ)}"
GECD="$BUILD/gecd"
LOAD="$BUILD/gecd-load"
TOOL="$BUILD/bench/cpu_peer_tool"
HERE="$ROOT/bench/cpu_peer"

die() { echo "daemon_profile: $*" >&2; exit 1; }
[[ -r "$JFLEG/dev.src" ]] || die "no $JFLEG/dev.src (../shared/data/jfleg; set JFLEG=DIR)"
for bin in "$GECD" "$LOAD" "$TOOL"; do
  [[ -x "$bin" ]] || die "missing $bin: cmake --build $BUILD --target gecd gecd-load cpu_peer_tool"
done
command -v perf >/dev/null || die "no perf (Debian: apt-get install linux-perf)"
PY=python3
[[ -x "$VENV/bin/python" ]] && PY="$VENV/bin/python"
mkdir -p "$OUT"
SETS=(--set model.copy_bias=0 --set spelling.dictionary= --set spelling.lexicon=
      --set "engine.threads=$THREADS")
"$TOOL" prompts --config "$CONFIG" "${SETS[@]}" --jfleg-src "$JFLEG/dev.src" \
  --texts-out "$OUT/texts.txt" >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC_PORT="$(free_port)"
METRICS_PORT="$(free_port)"
# shellcheck disable=SC2086  # KEY=VALUE words
env $DAEMON_ENV "$GECD" serve --config "$CONFIG" "${SETS[@]}" \
  --set "server.listen=127.0.0.1:$GRPC_PORT" --set "server.metrics_listen=127.0.0.1:$METRICS_PORT" \
  --set logging.level=warn --set server.sentence_cache_mb=0 2>"$OUT/daemon.log" &
DAEMON_PID=$!
trap 'kill -TERM "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true' EXIT
ready=0
for _ in $(seq 600); do
  if curl -sf "http://127.0.0.1:$METRICS_PORT/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$DAEMON_PID" 2>/dev/null || break
  sleep 0.1
done
[[ "$ready" == 1 ]] || die "gecd serve did not become ready; log: $OUT/daemon.log"
PIDS="$(pgrep -d, -P "$DAEMON_PID" || true)"
[[ -n "$PIDS" ]] || die "no child processes of gecd serve ($DAEMON_PID)"
PIDS="$DAEMON_PID,$PIDS"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "load average: $(cut -d' ' -f1-3 /proc/loadavg); daemon env: ${DAEMON_ENV:-none}"
"$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/texts.txt" --qps "$QPS" --warmup 3s \
  --duration "${SECONDS_}s" --channels 8 --threads 2 --json "$OUT/load.json" >"$OUT/load.txt" 2>&1 &
LOAD_PID=$!
sleep 4  # past the warm-up
perf record -q -F 999 -p "$PIDS" -o "$OUT/perf.data" -- sleep "$((SECONDS_ - 2))" 2>"$OUT/perf.log" ||
  die "perf record failed: $OUT/perf.log"
wait "$LOAD_PID" || die "gecd-load failed: $OUT/load.txt"
grep -E "achieved|p99 |p50 " "$OUT/load.txt" || true
# Thread id -> its process's name (threads keep the name they were born with: OpenBLAS's
# threads, started before the process sets its title, show as "exe").
for pid in ${PIDS//,/ }; do
  name="$(tr -d '\n' <"/proc/$pid/comm" 2>/dev/null || true)"
  for task in /proc/"$pid"/task/*; do echo "${task##*/} $name"; done
done >"$OUT/threads.txt"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$OUT/metrics.txt" || true
perf report -i "$OUT/perf.data" --stdio --no-children --sort pid,dso,sym -F overhead,pid,dso,sym \
  2>/dev/null >"$OUT/perf.txt"
"$PY" "$HERE/ct2_peer.py" perf-groups --perf "$OUT/perf.txt" --threads "$OUT/threads.txt" \
  --metrics "$OUT/metrics.txt" |
  tee "$OUT/groups.md"
