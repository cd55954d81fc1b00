#!/usr/bin/env bash
# The Hugging Face check (docs/GPU.md, "The Hugging Face check"), run by scripts/gpu_check.sh
# after its build on the GPU machine, or alone:
#
#   bash scripts/gpu_hf_check.sh [BUILD_DIR]        (default $GPU_BUILD_DIR or build-gpu)
#
# Writes a random Llama-3.2-1B-shaped and a Qwen2-0.5B-shaped model (per-layer shapes of the
# real ones, 4 layers, vocabulary 32000) with HF transformers reference logits into a temporary
# directory (tools/gpu/hf_reference.py, with the python3 on PATH: torch, transformers and
# safetensors), then runs BUILD_DIR's hf_logits_gpu_test and hf_logits_test (the CPU backend;
# built here first, the gpu_check target does not hold it) with GECD_HF_REFERENCE_DIR pointing
# there. Prints one line per model and comparison (max relative error, top-1 agreement,
# tolerances, PASS/FAIL) and a last line "hf check: PASS|FAIL". Exit 0 only when every step ran
# and passed; a skipped GPU test is a failure.
#
# Environment: HF_CHECK_GPU=0 / HF_CHECK_CPU=0 leave out the cuda / CPU comparison (the CPU
# one alone rehearses the check without a GPU), HF_CHECK_BUDGET seconds for all of it (default
# 150; 89 s on 2 CPU cores without the GPU test, far less expected on the GPU machine),
# HF_CHECK_LAYERS / HF_CHECK_VOCAB (4 / 32000), HF_CHECK_LOG (default BUILD_DIR/hf-check.log:
# the generator's and the tests' full output), HF_CHECK_KEEP=1 keeps the models (path printed).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT="$PWD"
BUILD="${1:-${GPU_BUILD_DIR:-build-gpu}}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
BUDGET="${HF_CHECK_BUDGET:-150}"
LOG="${HF_CHECK_LOG:-$BUILD/hf-check.log}"
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gecd-hf-check.XXXXXX")"
[[ "${HF_CHECK_KEEP:-0}" == 1 ]] || trap 'rm -rf "$WORK"' EXIT

status=0
fail() { echo "hf check: $*"; status=1; }
# bounded LIMIT CMD...: CMD under timeout, capped by what is left of the budget; output to LOG.
bounded() {
  local limit="$1"; shift
  local left=$((BUDGET - SECONDS))
  ((left < limit)) && limit=$left
  ((limit < 5)) && limit=5
  echo "== (limit ${limit}s) $*" >>"$LOG"
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
}

# The CPU comparison (hf_logits_test) is not part of the gpu_check target: build it here.
if [[ "${HF_CHECK_CPU:-1}" == 1 && -f "$BUILD/build.ninja" ]]; then
  bounded 90 ninja -C "$BUILD" hf_logits_test || fail "building hf_logits_test failed"
fi
GPU_TEST="$(find "$BUILD" -name hf_logits_gpu_test -type f -perm -u+x 2>/dev/null | head -1)"
CPU_TEST="$(find "$BUILD" -name hf_logits_test -type f -perm -u+x 2>/dev/null | head -1)"
[[ "${HF_CHECK_GPU:-1}" == 1 ]] || GPU_TEST=""
[[ "${HF_CHECK_CPU:-1}" == 1 ]] || CPU_TEST=""
[[ -n "$GPU_TEST" ]] || [[ "${HF_CHECK_GPU:-1}" == 0 ]] ||
  fail "no hf_logits_gpu_test under $BUILD (build the gpu_check target with -DGECD_CUDA=ON)"

made=0
if ((status == 0)); then
  for shape in llama-3.2-1b qwen2; do
    t0=$SECONDS
    if bounded 60 python3 tools/gpu/hf_reference.py --shape "$shape" --out "$WORK/$shape" \
         --layers "${HF_CHECK_LAYERS:-4}" --vocab "${HF_CHECK_VOCAB:-32000}"; then
      made=$((made + 1))
      line="$(grep '^hf_reference:' "$LOG" | tail -1 | sed 's/ -> .*//')"
      echo "hf check: $line ($((SECONDS - t0))s)"
    else
      fail "tools/gpu/hf_reference.py --shape $shape failed (exit $?): $(tail -n 1 "$LOG")"
    fi
  done
fi

if ((made > 0)); then
  for test in "$GPU_TEST" "$CPU_TEST"; do
    [[ -n "$test" ]] || continue
    t0=$SECONDS
    from=$(($(wc -l <"$LOG") + 1))
    GECD_HF_REFERENCE_DIR="$WORK" GECD_REQUIRE_GPU=1 bounded 120 "$test"
    rc=$?
    echo "hf check: $(basename "$test") exit $rc in $((SECONDS - t0))s"
    out="$(tail -n +"$from" "$LOG")"
    if ((rc == 124 || rc == 137)); then
      fail "$(basename "$test") timed out"
    elif ((rc != 0)); then
      fail "$(basename "$test") failed:" \
        "$(grep -m1 -A5 'Failure$' <<<"$out" | tail -n +2 | tr -s ' \n' ' ' | cut -c1-200)"
    fi
    if grep -q '^\[  SKIPPED \]' <<<"$out"; then
      fail "$(basename "$test") skipped: $(grep -m1 -A1 'Skipped$' <<<"$out" | tail -1)"
    fi
  done
fi

grep '^hf-check: ' "$LOG" | sed 's/^hf-check: /  /'
grep -q '^hf-check: .* FAIL$' "$LOG" && status=1
((status == 0)) && ! grep -q '^hf-check: ' "$LOG" && fail "no comparison ran"
[[ "${HF_CHECK_KEEP:-0}" == 1 ]] && echo "hf check: models kept in $WORK"
echo "hf check: $([[ $status == 0 ]] && echo PASS || echo FAIL) in ${SECONDS}s (log: $LOG)"
exit $status
