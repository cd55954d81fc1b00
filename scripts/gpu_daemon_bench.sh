#!/usr/bin/env bash
# The daemon's requests/s on the lent GPU (issue 13), called by scripts/gpu_check.sh:
#
#   bash scripts/gpu_daemon_bench.sh BUILD_DIR OUT_DIR
#
# Writes a random Llama-3.2-1B-shaped model (bench/write_bench_model --shape llama1b: bf16,
# byte-level tokenizer, no EOS, so every request is exactly 50 prompt + 50 generated tokens),
# then for each configuration starts `gecd serve` with engine.backend=cuda and runs
# `gecd-load --find-max --slo-p99 1s` on 50-byte sentences:
#   fp8     FP8 weights (attention and MLP), decode graphs on   (the production setting)
#   bf16    engine.quantization=none, graphs on
#   eager   FP8, engine.graph_batch_sizes="" (no graphs)
# and prints, last, one line per configuration (max req/s within the SLO, its p99) plus the
# engine's own log lines: the backend it ran and its device busy/idle time between steps.
# Environment: BACKEND (cuda), SHAPE (llama1b), LAYERS (the shape's), WORKERS (8), QPS (1000,
# find-max's first trial), TRIAL (5s), MAX_TRIALS (7), CONFIGS ("fp8 bf16 eager"),
# READY_LIMIT (180 s to load and warm up), MODEL_DIR (a new temp dir). BACKEND=cpu SHAPE=tiny rehearses it without a GPU.
# SLO_P99_MS (3600000): server.slo_p99_ms. An hour leaves only the requests' own 5 s deadline to
# shed load, so that find-max measures what the engine path sustains within the SLO; the
# default 1000 refuses once a sentence's predicted time passes 1 s, which would stop a trial
# near capacity on refusals rather than on latency.
# Traffic goes to 127.0.0.1 only; every run is bounded.
set -uo pipefail
BUILD="${1:?usage: gpu_daemon_bench.sh BUILD_DIR OUT_DIR}"
OUT="${2:?usage: gpu_daemon_bench.sh BUILD_DIR OUT_DIR}"
BACKEND="${BACKEND:-cuda}"
SHAPE="${SHAPE:-llama1b}"
WORKERS="${WORKERS:-8}"
QPS="${QPS:-1000}"
TRIAL="${TRIAL:-5s}"
MAX_TRIALS="${MAX_TRIALS:-7}"
CONFIGS="${CONFIGS:-fp8 bf16 eager}"
READY_LIMIT="${READY_LIMIT:-180}"
SLO_P99_MS="${SLO_P99_MS:-3600000}"
mkdir -p "$OUT"
for bin in gecd gecd-load bench/write_bench_model; do
  [[ -x "$BUILD/$bin" ]] || { echo "gpu_daemon_bench: missing $BUILD/$bin" >&2; exit 1; }
done

# The model (2.5 GB for llama1b) stays out of OUT, whose files the device tool brings back.
MODEL="${MODEL_DIR:-$(mktemp -d /tmp/gecd-daemon-bench.XXXXXX)}/model-$SHAPE"
layers=()
[[ -n "${LAYERS:-}" ]] && layers=(--layers "$LAYERS")
t0=$SECONDS
"$BUILD/bench/write_bench_model" --shape "$SHAPE" "${layers[@]}" "$MODEL" || exit 1
echo "gpu_daemon_bench: wrote $SHAPE to $MODEL in $((SECONDS - t0)) s"

# 50 bytes each: 50 prompt tokens with the byte-level tokenizer.
python3 - "$OUT/sentences.txt" <<'PY'
import random, sys
rng = random.Random(3)
words = "she go to school every day and like her teacher they was happy in the park".split()
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        s = ""
        while len(s) < 50:
            s += rng.choice(words) + " "
        f.write(s[:49].strip().ljust(49, "x") + ".\n")
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A MAXQPS=() P99=()
for config in $CONFIGS; do
  sets=(--set server.sentence_cache_mb=0 --set "model.dir=$MODEL" --set "engine.backend=$BACKEND"
    --set "server.workers=$WORKERS"
        --set model.prompt_template={text} --set model.copy_bias=0 --set model.max_input_tokens=64
        --set model.max_output_tokens=50 --set spelling.dictionary= --set spelling.lexicon=
        --set "server.slo_p99_ms=$SLO_P99_MS" --set logging.level=info)
  case "$config" in
    fp8) sets+=(--set engine.quantization=fp8) ;;
    bf16) sets+=(--set engine.quantization=none) ;;
    eager) sets+=(--set engine.quantization=fp8 --set engine.graph_batch_sizes=) ;;
    *) echo "gpu_daemon_bench: unknown configuration $config" >&2; continue ;;
  esac
  grpc="$(free_port)"; metrics="$(free_port)"
  log="$OUT/daemon-$config.log"
  "$BUILD/gecd" serve "${sets[@]}" --set "server.listen=127.0.0.1:$grpc" \
    --set "server.metrics_listen=127.0.0.1:$metrics" 2>"$log" &
  pid=$!
  ready=0
  for _ in $(seq $((READY_LIMIT * 10))); do
    if curl -sf "http://127.0.0.1:$metrics/readyz" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ((ready == 0)); then
    echo "gpu_daemon_bench: $config did not become ready; its log:"; tail -n 20 "$log"
    kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    MAXQPS[$config]="not ready"; P99[$config]="-"
    continue
  fi
  echo "== $config: find-max from $QPS req/s, trials of $TRIAL"
  timeout 300 "$BUILD/gecd-load" --target "127.0.0.1:$grpc" --input "$OUT/sentences.txt" \
    --find-max --qps "$QPS" --slo-p99 1s --duration "$TRIAL" --warmup 2s \
    --max-trials "$MAX_TRIALS" --channels 32 --threads 4 --json "$OUT/find-max-$config.json" \
    >"$OUT/find-max-$config.txt" 2>&1
  tail -n 12 "$OUT/find-max-$config.txt"
  MAXQPS[$config]="$(sed -nE 's/^max qps meeting .*: ([0-9.]+).*/\1/p' "$OUT/find-max-$config.txt")"
  P99[$config]="$(awk -v q="${MAXQPS[$config]}" '$1 == q && $5 == "pass" {print $3}' \
                  "$OUT/find-max-$config.txt" | tail -n 1)"
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
done

echo "==== gpu_daemon_bench summary ($SHAPE, backend $BACKEND, $WORKERS workers, 50+50 tokens)"
for config in $CONFIGS; do
  printf '%-6s max %s req/s within p99 < 1 s (p99 there: %s ms)\n' "$config" \
    "${MAXQPS[$config]:-none}" "${P99[$config]:--}"
  grep -hoE 'engine (backend|steps): .*' "$OUT/daemon-$config.log" 2>/dev/null | sed 's/^/       /'
  # Where start-up went (CUDA context, weights read/upload, FP8 quantization, graph capture).
  grep -hoE 'engine ready.*start-up: .*' "$OUT/daemon-$config.log" 2>/dev/null | head -n 1 |
    sed 's/^/       /'
done
ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print(f'{float(a) / float(b):.2f}x')" "$1" "$2" 2>/dev/null || echo "n/a"; }
[[ -n "${MAXQPS[fp8]:-}" && -n "${MAXQPS[bf16]:-}" ]] &&
  echo "fp8 / bf16:  $(ratio "${MAXQPS[fp8]}" "${MAXQPS[bf16]}")  (goal >= 1.3x)"
[[ -n "${MAXQPS[fp8]:-}" && -n "${MAXQPS[eager]:-}" ]] &&
  echo "graphs / eager: $(ratio "${MAXQPS[fp8]}" "${MAXQPS[eager]}")  (goal >= 1.2x)"
exit 0
