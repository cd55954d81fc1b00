#!/usr/bin/env bash
# gecd's CPU engine beside CTranslate2 on the same weights, prompts and greedy decoding, in one
# run (bench/cpu_peer/README.md):
#   1. a pinned venv (requirements.txt, PyPI) with CTranslate2, made once in $VENV;
#   2. gecd's prompts of JFLEG dev's sources (cpu_peer_tool: gecd's tokenizer and pipeline, copy
#      bias and spelling stage off), and the model converted for CTranslate2 (ct2_peer.py);
#   3. ROUNDS rounds, each back to back: CTranslate2 int8, CTranslate2 float32, `gecd eval`
#      in-process in each precision the CPU has (ROWS below); then `gecd serve` in the best of
#      them and in f32, each with gecd-load --find-max at p99 < 1 s on the same texts;
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
# gecd's rows, each `gecd eval` in-process on the same sources: TAG|LABEL|ENV|SETS. The first,
# f32 (OpenBLAS, whose outputs CTranslate2 float32's match), is the reference the others'
# outputs are compared with. Every row decodes as the config does otherwise, speculation
# (engine.speculate_tokens) included; the int8 row runs again with it off. GECD_SKIP="TAG ..."
# leaves rows out.
# GECD_ONEDNN_ENV: the oneDNN rows' extra environment; oneDNN threads with OpenMP, whose
# threads spin at a barrier before they sleep: as long as `gecd serve` lets its engine's
# (docs/OPERATIONS.md). Runs before 2026-12-06 used OMP_WAIT_POLICY=passive.
GECD_ONEDNN_ENV="${GECD_ONEDNN_ENV-GOMP_SPINCOUNT=10000}"
GECD_SKIP="${GECD_SKIP-}"
ROWS=("f32|f32 OpenBLAS||--set engine.cpu_matmul=f32")
# The development boxes' environment sets OPENBLAS_CORETYPE=Haswell (AVX2 kernels; unset, Debian
# 12's OpenBLAS picks Cooperlake on AMD Zen 5); where the CPU has AVX-512, a row runs its
# SkylakeX kernels.
if grep -qm1 -w avx512f /proc/cpuinfo; then
  ROWS+=("f32-skx|f32 OpenBLAS, SkylakeX kernels|OPENBLAS_CORETYPE=SkylakeX|--set engine.cpu_matmul=f32")
fi
# bf16 needs BF16 dot products (AVX512-BF16 or AMX-BF16), int8 VNNI (src/cpu_matmul/).
if grep -qm1 -wE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  ROWS+=("bf16|bf16 oneDNN|$GECD_ONEDNN_ENV|--set engine.cpu_matmul=bf16")
fi
BEST=auto  # the precision the daemon rows run in: the config's, or int8 where the CPU can
if grep -qm1 -wE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then
  ROWS+=("int8|int8 oneDNN|$GECD_ONEDNN_ENV|--set engine.quantization=int8")
  ROWS+=("int8-nospec|int8 oneDNN, speculation off|$GECD_ONEDNN_ENV|--set engine.quantization=int8 --set engine.speculate_tokens=0")
  BEST=int8
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
# The same decoding on both sides: greedy, no copy bias, no spelling stage; each row adds its
# precision.
SETS=(--set model.copy_bias=0 --set spelling.dictionary= --set spelling.lexicon=
      --set "engine.threads=$THREADS")
: >"$OUT/gecd-rows.txt"

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
  for row in "${ROWS[@]}"; do
    IFS='|' read -r tag label env sets <<<"$row"
    [[ " $GECD_SKIP " == *" $tag "* ]] && continue
    [[ "$r" == 1 ]] && printf '%s\t%s\t%s\n' "$tag" "$label" "$env" >>"$OUT/gecd-rows.txt"
    # shellcheck disable=SC2086  # ENV and SETS are lists of words
    env $env "$GECD" eval --config "$CONFIG" "${SETS[@]}" $sets --jfleg "$JFLEG" --report-outputs \
      --report "$OUT/gecd-eval-$tag-r$r.json" >"$OUT/gecd-eval-$tag-r$r.txt" \
      2>"$OUT/gecd-eval-$tag-r$r.log" || die "gecd eval ($label) failed: $OUT/gecd-eval-$tag-r$r.log"
    grep -m1 "sentences/s" "$OUT/gecd-eval-$tag-r$r.txt" | sed "s/^ */gecd eval, $label: /"
  done
done
for ct in int8 float32; do
  "$TOOL" decode --config "$CONFIG" <"$OUT/ct2-$ct.ids" >"$OUT/ct2-$ct.txt.jsonl"
done

# free_port, DAEMON_PID, stop_daemon (run on exit).
# shellcheck source=scripts/lib/daemon.sh
source "$ROOT/scripts/lib/daemon.sh"
# findmax NAME [--set K=V...] -- [KEY=VALUE...]: gecd serve (same config and SETS, then the
# --set words, in the environment's KEY=VALUE words) on free ports, then gecd-load's find-max at
# p99 < 1 s on the same texts; NAME.json, NAME.txt, NAME-metrics.txt, NAME.label.
findmax() {
  local name="$1"; shift
  local sets=() grpc_port metrics_port ready=0
  while [[ $# -gt 0 && "$1" != -- ]]; do sets+=("$1"); shift; done
  shift
  echo "${sets[*]} $*" >"$OUT/$name.label"
  grpc_port="$(free_port)"
  metrics_port="$(free_port)"
  env "$@" "$GECD" serve --config "$CONFIG" "${SETS[@]}" "${sets[@]}" --set "server.listen=127.0.0.1:$grpc_port" \
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
  echo "== gecd serve $(cat "$OUT/$name.label"): gecd-load --find-max --slo-p99 1s on the same texts"
  "$LOAD" --target "127.0.0.1:$grpc_port" --input "$OUT/texts.txt" --find-max --slo-p99 1s \
    --qps 20 --warmup 2s --duration 5s --max-trials 8 --channels 8 --threads 2 \
    --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || die "gecd-load failed: $OUT/$name.txt"
  tail -1 "$OUT/$name.txt"
  curl -s "http://127.0.0.1:$metrics_port/metrics" >"$OUT/$name-metrics.txt" || true
  stop_daemon
}
# The daemon in the best precision this CPU has (BEST), with oneDNN's environment, and in f32.
if [[ "$FINDMAX" == 1 ]]; then
  if [[ "$BEST" == int8 ]]; then
    # shellcheck disable=SC2086  # KEY=VALUE words
    findmax gecd-findmax-int8 --set engine.quantization=int8 -- $GECD_ONEDNN_ENV
  else
    # shellcheck disable=SC2086  # KEY=VALUE words
    findmax gecd-findmax-auto -- $GECD_ONEDNN_ENV
  fi
  findmax gecd-findmax-f32 --set engine.cpu_matmul=f32 --
fi

"$PY" "$HERE/ct2_peer.py" report --dir "$OUT" | tee "$OUT/table.md"
