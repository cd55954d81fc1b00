#!/usr/bin/env bash
# gecd's CPU engine beside CTranslate2 on the same weights, prompts and greedy decoding, in one
# run (bench/cpu_peer/README.md):
#   1. a pinned venv (requirements.txt, PyPI) with CTranslate2, made once in $VENV;
#   2. gecd's prompts of JFLEG dev's sources (cpu_peer_tool: gecd's tokenizer and pipeline, copy
#      bias and spelling stage off), and the model converted for CTranslate2 (ct2_peer.py);
#   3. ROUNDS rounds, each back to back: CTranslate2 int8, CTranslate2 float32, `gecd eval`
#      in-process (f32, and int8 where the CPU has VNNI); then `gecd serve` with gecd-load --find-max at p99 < 1 s on the same texts;
#   4. CTranslate2's output ids decoded by gecd's tokenizer and compared with gecd's outputs;
#      one table.
#
#   bash bench/cpu_peer/run.sh            (env: THREADS=2 BATCH=128 ROUNDS=3 FINDMAX=1 OUT=dir)
#
# CTranslate2 picks its GEMM library by CPU vendor: Intel MKL on Intel, oneDNN elsewhere. On AMD
# oneDNN's sgemm is several times slower than MKL's, and MKL's int8 several times slower than
# oneDNN's, so each compute type runs with the faster one (CT2_ENV_float32, CT2_ENV_int8: extra
# environment, e.g. CT2_USE_MKL=1 or CT2_FORCE_CPU_ISA=AVX512); the table names the backend and
# the ISA CTranslate2 logged.
#
# Builds nothing: first `cmake --build build --target gecd gecd-load cpu_peer_tool`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
VENV="${VENV:-$BUILD/venv-cpu-peer}"
JFLEG="${JFLEG:-$ROOT/../shared/data/jfleg}"
CONFIG="${CONFIG:-$ROOT/configs/gecd.yaml}"
THREADS="${THREADS:-2}"
BATCH="${BATCH:-128}"
ROUNDS="${ROUNDS:-3}"
FINDMAX="${FINDMAX:-1}"
if grep -qm1 GenuineIntel /proc/cpuinfo; then
  CT2_ENV_float32="${CT2_ENV_float32-}"
  CT2_ENV_int8="${CT2_ENV_int8-}"
else
  CT2_ENV_float32="${CT2_ENV_float32-CT2_USE_MKL=1}"
  # CTranslate2 keeps its own kernels at AVX2 on non-Intel CPUs; AVX-512 ran its int8 ~8%
  # faster on AMD Zen 5 (2026-12-02, bench/RESULTS.md), float32 no faster.
  if grep -qm1 -w avx512f /proc/cpuinfo; then
    CT2_ENV_int8="${CT2_ENV_int8-CT2_FORCE_CPU_ISA=AVX512}"
  else
    CT2_ENV_int8="${CT2_ENV_int8-}"
  fi
fi
# The development boxes' environment sets OPENBLAS_CORETYPE=Haswell (AVX2 kernels; unset, Debian
# 12's OpenBLAS picks Cooperlake on AMD Zen 5); where the CPU has AVX-512, a second gecd eval row
# runs its SkylakeX kernels.
# GECD_ALT_ENV="" leaves the row out.
if grep -qm1 -w avx512f /proc/cpuinfo; then
  GECD_ALT_ENV="${GECD_ALT_ENV-OPENBLAS_CORETYPE=SkylakeX}"
else
  GECD_ALT_ENV="${GECD_ALT_ENV-}"
fi
# gecd's int8 engine (engine.quantization int8, oneDNN) as a row of its own where the CPU has
# VNNI, which it needs; GECD_INT8=0 leaves it out.
# GECD_INT8_ENV: its extra environment; oneDNN threads with OpenMP, whose idle threads spin by
# default and take the core from gecd's other threads (OMP_WAIT_POLICY=passive ran it 1.3-2.6x
# faster on the loaded 2-core box, 2026-12-02; docs/OPERATIONS.md).
GECD_INT8_ENV="${GECD_INT8_ENV-OMP_WAIT_POLICY=passive}"
if grep -qm1 -wE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then
  GECD_INT8="${GECD_INT8-1}"
else
  GECD_INT8="${GECD_INT8-0}"
fi
OUT="${OUT:-$BUILD/cpu-peer/run-$(date -u +%Y%m%dT%H%M%SZ)}"
GECD="$BUILD/gecd"
LOAD="$BUILD/gecd-load"
TOOL="$BUILD/bench/cpu_peer_tool"
HERE="$ROOT/bench/cpu_peer"

die() { echo "cpu_peer: $*" >&2; exit 1; }

[[ -r "$JFLEG/dev.src" ]] ||
  die "no $JFLEG/dev.src: the JFLEG data lives in ../shared/data/jfleg beside the project (set JFLEG=DIR)"
for bin in "$GECD" "$LOAD" "$TOOL"; do
  [[ -x "$bin" ]] || die "missing $bin: cmake --build $BUILD --target gecd gecd-load cpu_peer_tool"
done

# The venv: made once, re-made when requirements.txt changes.
if [[ ! -x "$VENV/bin/python" ]] || ! cmp -s "$HERE/requirements.txt" "$VENV/requirements.txt"; then
  echo "cpu_peer: making the venv $VENV (PyPI: $(grep -v '^#' "$HERE/requirements.txt" | xargs))"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt" ||
    die "pip install -r $HERE/requirements.txt into $VENV failed (PyPI reachable?)"
  cp "$HERE/requirements.txt" "$VENV/requirements.txt"
fi
PY="$VENV/bin/python"
"$PY" -c 'import ctranslate2, numpy' || die "$VENV lacks ctranslate2 or numpy: rm -rf $VENV and re-run"

mkdir -p "$OUT"
# The same decoding on both sides: greedy, no copy bias, no spelling stage. gecd's rows are f32
# (engine.cpu_matmul f32: OpenBLAS, whose outputs CTranslate2 float32's match), int8 where
# asked; the config's auto would run bf16 on a CPU with BF16 dot products.
SETS=(--set model.copy_bias=0 --set spelling.dictionary= --set spelling.lexicon=
      --set "engine.threads=$THREADS" --set engine.cpu_matmul=f32)

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "isa: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|avx512f|avx512_vnni|avx512_bf16|amx_bf16|amx_int8|avx_vnni)$' | xargs)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "out: $OUT"

"$TOOL" prompts --config "$CONFIG" "${SETS[@]}" --jfleg-src "$JFLEG/dev.src" \
  --texts-out "$OUT/texts.txt" >"$OUT/prompts.jsonl"
MODEL_DIR="$(sed -n 's/^  dir: *//p' "$CONFIG" | head -1)"
MODEL_DIR="$(cd "$(dirname "$CONFIG")" && cd "$MODEL_DIR" && pwd)"
"$PY" "$HERE/ct2_peer.py" convert --model "$MODEL_DIR" --out "$OUT/ct2-model" >/dev/null

for r in $(seq "$ROUNDS"); do
  echo "== round $r of $ROUNDS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "round $r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
  for ct in int8 float32; do
    extra="CT2_ENV_$ct"
    # shellcheck disable=SC2086  # the extra environment is KEY=VALUE words
    env CT2_VERBOSE=1 ${!extra} "$PY" "$HERE/ct2_peer.py" generate --ct2 "$OUT/ct2-model" --prompts "$OUT/prompts.jsonl" \
      --compute-type "$ct" --threads "$THREADS" --batch "$BATCH" --repeat 1 \
      --ids-out "$OUT/ct2-$ct.ids" --json-out "$OUT/ct2-$ct-r$r.json" 2>"$OUT/ct2-$ct-r$r.log" ||
      die "CTranslate2 $ct failed: $OUT/ct2-$ct-r$r.log"
  done
  "$GECD" eval --config "$CONFIG" "${SETS[@]}" --jfleg "$JFLEG" --report-outputs \
    --report "$OUT/gecd-eval-r$r.json" >"$OUT/gecd-eval-r$r.txt" 2>"$OUT/gecd-eval-r$r.log" ||
    die "gecd eval failed: $OUT/gecd-eval-r$r.log"
  grep -m1 "sentences/s" "$OUT/gecd-eval-r$r.txt" | sed 's/^ */gecd eval: /'
  if [[ "$GECD_INT8" == 1 ]]; then
    # shellcheck disable=SC2086  # KEY=VALUE words
    env $GECD_INT8_ENV "$GECD" eval --config "$CONFIG" "${SETS[@]}" --set engine.quantization=int8 --jfleg "$JFLEG" \
      --report-outputs --report "$OUT/gecd-eval-int8-r$r.json" >"$OUT/gecd-eval-int8-r$r.txt" \
      2>"$OUT/gecd-eval-int8-r$r.log" || die "gecd eval (int8) failed: $OUT/gecd-eval-int8-r$r.log"
    grep -m1 "sentences/s" "$OUT/gecd-eval-int8-r$r.txt" | sed "s/^ */gecd eval, int8: /"
    echo "$GECD_INT8_ENV" >"$OUT/gecd-int8-env.txt"
  fi
  if [[ -n "$GECD_ALT_ENV" ]]; then
    # shellcheck disable=SC2086  # KEY=VALUE words
    env $GECD_ALT_ENV "$GECD" eval --config "$CONFIG" "${SETS[@]}" --jfleg "$JFLEG" \
      --report-outputs --report "$OUT/gecd-eval-alt-r$r.json" >"$OUT/gecd-eval-alt-r$r.txt" \
      2>"$OUT/gecd-eval-alt-r$r.log" || die "gecd eval ($GECD_ALT_ENV) failed: $OUT/gecd-eval-alt-r$r.log"
    grep -m1 "sentences/s" "$OUT/gecd-eval-alt-r$r.txt" | sed "s/^ */gecd eval, $GECD_ALT_ENV: /"
    echo "$GECD_ALT_ENV" >"$OUT/gecd-alt-env.txt"
  fi
done
for ct in int8 float32; do
  "$TOOL" decode --config "$CONFIG" <"$OUT/ct2-$ct.ids" >"$OUT/ct2-$ct.txt.jsonl"
done

# free_port, DAEMON_PID, stop_daemon (run on exit).
# shellcheck source=scripts/lib/daemon.sh
source "$ROOT/scripts/lib/daemon.sh"
# findmax NAME [KEY=VALUE...]: gecd serve (same config, extra environment) on free ports, then
# gecd-load's find-max at p99 < 1 s on the same texts; NAME.json, NAME.txt, NAME-metrics.txt.
findmax() {
  local name="$1"; shift
  local grpc_port metrics_port ready=0
  grpc_port="$(free_port)"
  metrics_port="$(free_port)"
  env "$@" "$GECD" serve --config "$CONFIG" "${SETS[@]}" --set "server.listen=127.0.0.1:$grpc_port" \
    --set "server.metrics_listen=127.0.0.1:$metrics_port" --set logging.level=warn \
    --set server.sentence_cache_mb=0 \
    2>"$OUT/$name-daemon.log" &
  DAEMON_PID=$!
  for _ in $(seq 600); do
    if curl -sf "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 "$DAEMON_PID" 2>/dev/null || break
    sleep 0.1
  done
  [[ "$ready" == 1 ]] || die "gecd serve did not become ready; log: $OUT/$name-daemon.log"
  echo "== gecd serve $*: gecd-load --find-max --slo-p99 1s on the same texts"
  "$LOAD" --target "127.0.0.1:$grpc_port" --input "$OUT/texts.txt" --find-max --slo-p99 1s \
    --qps 20 --warmup 2s --duration 5s --max-trials 8 --channels 8 --threads 2 \
    --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || die "gecd-load failed: $OUT/$name.txt"
  tail -1 "$OUT/$name.txt"
  curl -s "http://127.0.0.1:$metrics_port/metrics" >"$OUT/$name-metrics.txt" || true
  stop_daemon
}
if [[ "$FINDMAX" == 1 ]]; then
  findmax gecd-findmax
  # shellcheck disable=SC2086  # KEY=VALUE words
  [[ -z "$GECD_ALT_ENV" ]] || findmax gecd-findmax-alt $GECD_ALT_ENV
fi

"$PY" "$HERE/ct2_peer.py" report --dir "$OUT" | tee "$OUT/table.md"
