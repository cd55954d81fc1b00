#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for FUZZ_SECONDS
# (default 60). Exits non-zero on the first finding; the crashing input is left in
# fuzz-corpus/<target>/. Not part of CI (too long); run before a release or after parser changes.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 2; }
cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGECD_FUZZ=ON -DGECD_CUDA=OFF \
  -DGECD_BUILD_TESTS=OFF -DGECD_BUILD_BENCH=OFF >/dev/null
targets=$(cd tests/fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
ninja -C "$build" $targets

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

for t in $targets; do
  echo "== $t: ${seconds}s"
  mkdir -p "fuzz-corpus/$t"
  ASAN_OPTIONS=detect_leaks=1 "$build/fuzz/$t" -max_total_time="$seconds" -max_len=65536 \
    -timeout=10 -rss_limit_mb=4096 -artifact_prefix="fuzz-corpus/$t/" "fuzz-corpus/$t" 2>&1 \
    | grep -E '^(#[0-9]+ +DONE|==[0-9]+==ERROR|SUMMARY|Done)' || true
  if ls "fuzz-corpus/$t"/crash-* "fuzz-corpus/$t"/leak-* "fuzz-corpus/$t"/timeout-* >/dev/null 2>&1; then
    echo "fuzz.sh: $t found a failing input in fuzz-corpus/$t/"; exit 1
  fi
done
echo "fuzz.sh: all targets ran ${seconds}s without a finding"
