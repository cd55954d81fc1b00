#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang (ASan + UBSan) and runs each
# for FUZZ_SECONDS (default 60), FUZZ_JOBS (default 2) at a time. Fails on the first finding
# (a crash, leak, timeout, out-of-memory or undefined behaviour); the failing input is left in
# fuzz-corpus/<target>/ and the fuzzer's log printed. .ci/run runs it for 30 s per target in
# build-asan, which scripts/sanitize.sh configures with GECD_FUZZ, so nothing is compiled twice
# (FUZZ_BUILD_DIR, default build-fuzz). Run it longer before a release or after parser changes.
#
# Each target starts from its checked-in seeds (tests/fuzz/corpus/<target>/, read only) and
# fuzz-corpus/<target>/, where the seeds made from fixtures below and what the fuzzer finds
# interesting accumulate between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-2}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 2; }
start=$SECONDS
# The options the fuzz targets need; anything else already in $build's cache stays.
cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGECD_FUZZ=ON -DGECD_CUDA=OFF -DGECD_BUILD_BENCH=OFF >/dev/null
targets=$(cd tests/fuzz && ls ./*_fuzz.cc | sed 's|^\./||; s|\.cc$||')
# shellcheck disable=SC2086 # one word per target
cmake --build "$build" --target $targets
echo "fuzz.sh: built $(echo $targets | wc -w) targets in $((SECONDS - start)) s"

# Seeds: real files of each kind, so the fuzzer starts from valid inputs.
seed() {
  local dir="fuzz-corpus/$1"; shift
  mkdir -p "$dir"
  for f in "$@"; do [ -f "$f" ] && cp -n "$f" "$dir/" || true; done
}
seed yaml_config_fuzz configs/*.yaml
seed model_config_fuzz tests/fixtures/models/*/config.json tests/fixtures/models/*/generation_config.json
seed safetensors_header_fuzz tests/fixtures/models/*/model.safetensors
seed endpoint_slice_fuzz tests/fixtures/k8s/*.json
mkdir -p fuzz-corpus/tokenizer_fuzz
for i in $(seq 1 40 1200); do  # a spread of the golden strings (as their JSON lines)
  sed -n "${i}p" tests/fixtures/tokenizers/qwen3_golden.jsonl > "fuzz-corpus/tokenizer_fuzz/golden-$i"
done

# fuzz TARGET: runs it, its log in $build/fuzz/TARGET.log and its exit status in TARGET.status.
fuzz() {
  local t="$1" checked_in=()
  mkdir -p "fuzz-corpus/$t"
  [ -d "tests/fuzz/corpus/$t" ] && checked_in=("tests/fuzz/corpus/$t")
  local status=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/fuzz/$t" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="fuzz-corpus/$t/" "fuzz-corpus/$t" "${checked_in[@]}" \
    >"$build/fuzz/$t.log" 2>&1 || status=$?
  echo "$status" >"$build/fuzz/$t.status"
}

echo "fuzz.sh: running each target for ${seconds}s, $jobs at a time"
running=0
for t in $targets; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz "$t" &
  running=$((running + 1))
done
wait

failed=0
for t in $targets; do
  status=$(cat "$build/fuzz/$t.status")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz/$t.log")
  cov=$(grep -oE 'cov: [0-9]+' "$build/fuzz/$t.log" | tail -1 || true)
  if [ "$status" -ne 0 ]; then
    echo "== $t: FINDING (exit $status), input in fuzz-corpus/$t/; its log:"
    grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED)' "$build/fuzz/$t.log" | tail -60
    failed=1
  else
    echo "== $t: ${runs:-?} runs, ${cov:-cov: ?}, no finding"
  fi
done
((failed == 0)) || { echo "fuzz.sh: a target found a failing input"; exit 1; }
echo "fuzz.sh: all targets ran ${seconds}s without a finding; $((SECONDS - start)) s in all"
