#!/usr/bin/env bash
# Benchmarks the daemon end to end with gecd-load. Builds nothing; first:
#   ninja -C build gecd gecd-load write_bench_model
# (write_bench_model, from bench/write_bench_model.cc, writes the random ~9M-parameter model of
# BenchmarkModelOptions() with a byte-level tokenizer and no EOS token.)
#
#   scripts/bench_daemon.sh [echo|cpu|tls|all]     (default all)
#
# echo backend (front-end path alone), 1 and 2 workers: find-max under p99 < 20 ms, then a
#   closed loop at 64 in flight.
# cpu backend, the ~9M model: 50-byte prompts (= 50 tokens with the byte-level tokenizer) and
#   exactly 50 generated tokens (max_output_tokens 50, no EOS), find-max under p99 < 1 s; then
#   the gecd_batch_size histogram from /metrics.
# tls (not in all): the cost of TLS on the front end: echo backend, 2 workers, find-max under
#   p99 < 20 ms in plaintext and with TLS (a throwaway EC P-256 CA and server pair made by the
#   openssl command in $OUT), then with TLS and a bearer token, in turns, twice; each also a
#   closed loop at 64 in flight (steadier than find-max on a busy machine).
# Every gecd-load run is bounded (trials x (warmup + duration) <= 60 s). Reports and daemon logs
# go to $OUT (default: a new temp dir).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
GECD="$BUILD/gecd"
LOAD="$BUILD/gecd-load"
WRITE_MODEL="$BUILD/bench/write_bench_model"
OUT="${OUT:-$(mktemp -d /tmp/gecd-bench.XXXXXX)}"
WHAT="${1:-all}"
for bin in "$GECD" "$LOAD" "$WRITE_MODEL"; do
  [[ -x "$bin" ]] || { echo "missing $bin: ninja -C $BUILD gecd gecd-load write_bench_model" >&2; exit 1; }
done
mkdir -p "$OUT"

# free_port, start_daemon NAME ARGS..., DAEMON_PID, stop_daemon (run on exit).
# shellcheck source=scripts/lib/daemon.sh
source "$ROOT/scripts/lib/daemon.sh"

run() { echo "+ $*"; "$@"; }

# Sentences of ~50 bytes, one per line.
SENTENCES="$ROOT/bench/short_sentences.txt"

# The ~9M model (also gives the echo backend its tokenizer).
"$WRITE_MODEL" "$OUT/model"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"

if [[ "$WHAT" == all || "$WHAT" == echo ]]; then
  for workers in 1 2; do
    start_daemon "echo-w$workers" --set engine.backend=echo --set "server.workers=$workers" \
      --set "model.dir=$OUT/model"
    echo "== echo backend, $workers worker(s): find-max, SLO p99 < 20 ms"
    run "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$SENTENCES" --find-max --slo-p99 20ms \
      --qps 2000 --warmup 1s --duration 3s --max-trials 12 --channels 8 --threads 2 \
      --json "$OUT/echo-w$workers-findmax.json"
    echo "== echo backend, $workers worker(s): closed loop, 64 in flight, 10 s"
    run "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$SENTENCES" --concurrency 64 \
      --warmup 1s --duration 10s --channels 8 --threads 2 --json "$OUT/echo-w$workers-closed.json"
    stop_daemon
  done
fi

if [[ "$WHAT" == all || "$WHAT" == cpu ]]; then
  # Exactly 50 bytes per line: 50 prompt tokens with the byte-level tokenizer.
  awk 'length($0) == 50' "$SENTENCES" >"$OUT/sentences50.txt"
  start_daemon cpu --set engine.backend=cpu --set "server.workers=${CPU_WORKERS:-2}" \
    --set "model.dir=$OUT/model" --set model.max_output_tokens=50
  echo "== cpu backend, ~9M model, 50 prompt + 50 generated tokens: find-max, SLO p99 < 1 s"
  run "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$OUT/sentences50.txt" --find-max \
    --slo-p99 1s --qps 20 --warmup 2s --duration 5s --max-trials 8 --channels 8 --threads 2 \
    --json "$OUT/cpu-findmax.json"
  echo "== cpu backend: /metrics after the run"
  curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | tee "$OUT/cpu-metrics.txt" |
    grep -E '^gecd_(batch_size|prompt_tokens_total|generated_tokens_total|requests_total|cancelled)'
  stop_daemon
fi
if [[ "$WHAT" == tls ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca \
    -keyout "$OUT/ca.key" -out "$OUT/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$OUT/tls.key" -out "$OUT/tls.csr" 2>/dev/null
  openssl x509 -req -in "$OUT/tls.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial \
    -days 1 -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1') -out "$OUT/tls.crt" 2>/dev/null
  head -c 24 /dev/urandom | base64 >"$OUT/token"
  printf 'bench %s\n' "$(tr -d '\n' <"$OUT/token" | sha256sum | cut -d' ' -f1)" >"$OUT/tokens"
  for round in 1 2; do
    for mode in plain tls tls+token; do
      serve=() load=()
      if [[ "$mode" != plain ]]; then
        serve=(--set "tls.cert_file=$OUT/tls.crt" --set "tls.key_file=$OUT/tls.key")
        load=(--tls-ca "$OUT/ca.crt" --tls-server-name localhost)
      fi
      if [[ "$mode" == tls+token ]]; then
        serve+=(--set "auth.tokens_file=$OUT/tokens")
        load+=(--token-file "$OUT/token")
      fi
      start_daemon "$mode-$round" --set engine.backend=echo --set server.workers=2 \
        --set "model.dir=$OUT/model" "${serve[@]}"
      echo "== echo backend, 2 workers, $mode (round $round): find-max, SLO p99 < 20 ms"
      run "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$SENTENCES" --find-max --slo-p99 20ms \
        --qps 2000 --warmup 1s --duration 3s --max-trials 10 --channels 8 --threads 2 \
        "${load[@]}" --json "$OUT/$mode-$round-findmax.json"
      echo "== echo backend, 2 workers, $mode (round $round): closed loop, 64 in flight, 5 s"
      run "$LOAD" --target "127.0.0.1:$GRPC_PORT" --input "$SENTENCES" --concurrency 64 \
        --warmup 1s --duration 5s --channels 8 --threads 2 "${load[@]}" \
        --json "$OUT/$mode-$round-closed.json"
      stop_daemon
    done
  done
fi
echo "reports and logs: $OUT"
