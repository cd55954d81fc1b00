#!/usr/bin/env bash
# The GPU check, in one call on the lent GPU machine (docs/GPU.md):
#
#   bash scripts/gpu_check.sh          (from the repository root; .gpu-deps/ carried along)
#
# Prints the GPU / driver / nvcc versions, configures a Release build in build-gpu/ with
# -DGECD_CUDA=ON -DGECD_SERVER=ON -DGECD_CLI=ON (the whole daemon) against the bundle .gpu-deps/
# (made here by scripts/gpu_deps.sh; its prefix is unpacked into build-gpu/gecd-deps), builds
# the targets `gpu_check` (every GPU test executable and engine_bench when it exists), `gecd`
# (serve, with the cuda backend) and `gecd-load`, checks that those two load all their shared
# libraries (from the bundle, by RPATH: no LD_LIBRARY_PATH), runs `ctest -L gpu`, then the
# daemon's requests/s (scripts/gpu_daemon_bench.sh: gecd serve on the cuda backend with a
# Llama-3.2-1B-shaped model, find-max under p99 < 1 s for FP8, bf16 and eager), then
# engine_bench, and prints a summary LAST. It also runs on a machine without a GPU: the GPU
# tests then skip.
#
# Every stage runs under `timeout`, within an overall budget; the bench runs even after a test
# or build failure (when its binary exists). Exit status: 0 when configure, build, tests and
# bench (if run) all succeeded and gecd / gecd-load load their libraries, 1 otherwise.
#
# Logs go to $OUT when set, else build-gpu/gpu-check-logs/: env.log configure.log build.log
#   ctest.log ctest-junit.xml hf.log hf-check.log daemon.log daemon/ (per configuration: the daemon's log, find-max
#   text and JSON) bench.log bench.json summary.txt
#
# Environment:
#   GECD_BENCH_ARGS      extra arguments for engine_bench (split on spaces)
#   GECD_BENCH=0         skip the bench          GECD_DAEMON=0   skip the daemon benchmark
#   GECD_HF=0            skip the Hugging Face logits check; GPU_HF_LIMIT its seconds (160)
#   GPU_DAEMON_LIMIT     seconds for the daemon benchmark (default 170; its own knobs:
#                        scripts/gpu_daemon_bench.sh)
#   GPU_CHECK_BUDGET     seconds for the whole check (default 540)
#   GPU_CONFIGURE_LIMIT GPU_BUILD_LIMIT GPU_TEST_LIMIT GPU_BENCH_LIMIT   per stage (90 270 120 180)
#   GPU_BUILD_TARGETS    what the build stage builds (default "gpu_check gecd gecd-load
#                        write_bench_model")
#   GPU_TEST_TIMEOUT     per ctest test (default 60)
#   GPU_JOBS             ninja -j (default 16)
#   GPU_BUILD_DIR        (default build-gpu)   GPU_DEPS_DIR   (default .gpu-deps)
#   GPU_CMAKE_ARGS       extra configure arguments (split on spaces)
#   GPU_CXX_FLAGS        C++ (not CUDA) flags, default "-include cstdint": the GPU image's g++ 13
#                        libstdc++ no longer pulls <cstdint> in through other headers, which
#                        Debian's Abseil 20220623 headers (made for g++ 12) still rely on in
#                        places. (nvcc breaks with -include; .cu files include <cstdint>
#                        themselves.) Set it empty to build without.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT="$PWD"
BUILD="${GPU_BUILD_DIR:-build-gpu}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
DEPS="${GPU_DEPS_DIR:-$ROOT/.gpu-deps}"
[[ "$DEPS" = /* ]] || DEPS="$ROOT/$DEPS"
JOBS="${GPU_JOBS:-16}"
BUDGET="${GPU_CHECK_BUDGET:-540}"
LOGS="${OUT:-$BUILD/gpu-check-logs}"
mkdir -p "$LOGS"
rm -rf "$LOGS"/daemon
rm -f "$LOGS"/{env,configure,build,ctest,hf,hf-check,daemon,bench}.log "$LOGS"/ctest-junit.xml "$LOGS"/bench.json \
  "$LOGS"/summary.txt

declare -A RESULT=() ELAPSED=() LIMIT=()
STAGES=(configure build test hf daemon bench)
for s in "${STAGES[@]}"; do RESULT[$s]="not run"; ELAPSED[$s]="-"; LIMIT[$s]="-"; done

# run_stage NAME LIMIT LOG CMD...: runs CMD under timeout (capped by what is left of the
# budget), output to LOG; sets RESULT/ELAPSED/LIMIT; returns CMD's status (124: timed out).
run_stage() {
  local name="$1" limit="$2" log="$3"; shift 3
  local left=$((BUDGET - SECONDS))
  ((left < limit)) && limit=$left
  ((limit < 5)) && limit=5
  LIMIT[$name]="${limit}s"
  echo "== $name (limit ${limit}s): $*"
  local t0=$SECONDS rc
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  ELAPSED[$name]="$((SECONDS - t0))s"
  if ((rc == 0)); then RESULT[$name]=ok
  elif ((rc == 124 || rc == 137)); then RESULT[$name]="TIMEOUT"
  else RESULT[$name]="FAIL($rc)"; fi
  echo "   $name: ${RESULT[$name]} in ${ELAPSED[$name]}"
  return $rc
}

# ---- machine
NVCC="${CUDACXX:-}"
[[ -n "$NVCC" ]] || NVCC="$(command -v nvcc || true)"
[[ -n "$NVCC" ]] || { [[ -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc; }
HAVE_GPU=0
GPU_LINE="no GPU (nvidia-smi not found)"
if command -v nvidia-smi >/dev/null; then
  if GPU_LINE="$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap \
                 --format=csv,noheader 2>&1)" && [[ -n "$GPU_LINE" ]]; then
    HAVE_GPU=1
  else
    GPU_LINE="no GPU: $(echo "$GPU_LINE" | head -1)"
  fi
fi
NVCC_LINE="$([[ -n "$NVCC" ]] && "$NVCC" --version 2>&1 | grep -i release || echo 'nvcc not found')"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; uname -a; echo "cores: $(nproc)"
  echo "gpu: $GPU_LINE"; command -v nvidia-smi >/dev/null && nvidia-smi 2>&1
  echo "nvcc: $NVCC"; [[ -n "$NVCC" ]] && "$NVCC" --version 2>&1
  g++ --version 2>&1 | head -1; cmake --version 2>&1 | head -1; echo "ninja $(ninja --version 2>&1)"
  ldd --version 2>&1 | head -1
  echo "deps: $DEPS"; du -sh "$DEPS" 2>&1
} >"$LOGS/env.log" 2>&1
echo "gpu:   $GPU_LINE"
echo "nvcc:  $NVCC ($NVCC_LINE)"
echo "g++:   $(g++ --version 2>&1 | head -1); $(cmake --version 2>&1 | head -1); ninja $(ninja --version 2>&1)"

# ---- configure
prefix_args=()
if [[ -d "$DEPS" ]]; then
  prefix_args=(-DCMAKE_PREFIX_PATH="$DEPS")
else
  echo "WARNING: $DEPS is missing (make it with bash scripts/gpu_deps.sh and carry it):" \
       "configuring against the system's packages"
fi
# A build tree configured elsewhere (another checkout path) cannot be reused.
if [[ -f "$BUILD/CMakeCache.txt" ]] &&
   ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD/CMakeCache.txt"; then
  echo "   $BUILD was configured for another source tree: removing it"
  rm -rf "$BUILD"; mkdir -p "$LOGS"
fi
CXX_FLAGS="${GPU_CXX_FLAGS--include cstdint}"
# shellcheck disable=SC2086
run_stage configure "${GPU_CONFIGURE_LIMIT:-90}" "$LOGS/configure.log" \
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGECD_CUDA=ON \
    -DGECD_SERVER=ON -DGECD_CLI=ON -DGECD_BUILD_TESTS=ON -DGECD_BUILD_BENCH=ON -DGECD_ONEDNN=OFF \
    ${NVCC:+-DCMAKE_CUDA_COMPILER="$NVCC"} "${prefix_args[@]}" \
    -DCMAKE_CXX_FLAGS="$CXX_FLAGS" ${GPU_CMAKE_ARGS:-}
DEP_LINES="$(grep -h 'gecd: dependency' "$LOGS/configure.log" | sed 's/^-- //')"
# The bundle's prefix is unpacked into $BUILD/gecd-deps (GecdDepsConfig.cmake).
DEPS_OUTSIDE="$(grep -v -F -e "$DEPS" -e "$BUILD/gecd-deps/" <<<"$DEP_LINES" | grep -v "^$" || true)"
if [[ "${RESULT[configure]}" != ok ]]; then
  echo "---- configure.log (tail)"; tail -n 40 "$LOGS/configure.log"
fi

# ---- build
# shellcheck disable=SC2206
BUILD_TARGETS=(${GPU_BUILD_TARGETS:-gpu_check gecd gecd-load write_bench_model})
RUNTIME_LINE=""
if [[ "${RESULT[configure]}" == ok ]]; then
  run_stage build "${GPU_BUILD_LIMIT:-270}" "$LOGS/build.log" \
    ninja -C "$BUILD" -j "$JOBS" -k 0 "${BUILD_TARGETS[@]}"
  if [[ "${RESULT[build]}" != ok ]]; then
    echo "---- build.log (errors, then tail)"
    grep -E -m 40 'error|FAILED' "$LOGS/build.log"; echo "..."; tail -n 30 "$LOGS/build.log"
  fi
  # The binaries find the bundle's .so by RPATH alone (docs/GPU.md): say which did not.
  for bin in gecd gecd-load; do
    [[ -x "$BUILD/$bin" ]] || continue
    missing="$(env -u LD_LIBRARY_PATH ldd "$BUILD/$bin" 2>&1 | awk '/not found/ { print $1 }' |
               tr '\n' ' ')"
    RUNTIME_LINE+="${RUNTIME_LINE:+; }$bin: ${missing:+MISSING }${missing:-all libraries found}"
  done
fi

# ---- tests
TESTS_SUMMARY=""
if [[ "${RESULT[configure]}" == ok ]]; then
  run_stage test "${GPU_TEST_LIMIT:-120}" "$LOGS/ctest.log" \
    ctest --test-dir "$BUILD" -L gpu -E 'HfLogits' --output-on-failure --no-tests=error \
      --timeout "${GPU_TEST_TIMEOUT:-60}" --output-junit "$LOGS/ctest-junit.xml"
  # ctest lines: "  1/4 Test  #3: kernels/Foo.Bar ......   Passed    0.12 sec" (parameterised
  # tests add "  # GetParam() = X" after the name)
  TESTS_SUMMARY="$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$LOGS/ctest.log" |
    sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +# GetParam\(\) = [^ ]+)? \.*[ *]*([A-Za-z_: ]+[A-Za-z_]) +([0-9.]+ sec).*$/\3|\1|\4/')"
  if [[ "${RESULT[test]}" != ok ]]; then
    echo "---- ctest.log (tail)"; tail -n 60 "$LOGS/ctest.log" | cut -c1-200
  fi
fi

# ---- logits against Hugging Face (scripts/gpu_hf_check.sh; its tests need the references it
# writes, so ctest -L gpu above leaves them out)
if [[ "${GECD_HF:-1}" == 0 ]]; then
  RESULT[hf]="skipped (GECD_HF=0)"
elif [[ "${RESULT[build]}" != ok ]]; then
  RESULT[hf]="skipped (build failed)"
elif ((HAVE_GPU == 0)) && [[ "${HF_CHECK_GPU:-1}" != 0 ]]; then
  RESULT[hf]="skipped (no GPU; HF_CHECK_GPU=0 runs its CPU half)"
else
  export HF_CHECK_LOG="$LOGS/hf-check.log"
  run_stage hf "${GPU_HF_LIMIT:-160}" "$LOGS/hf.log" \
    bash "$ROOT/scripts/gpu_hf_check.sh" "$BUILD"
fi

# ---- the daemon's requests/s
if [[ "${GECD_DAEMON:-1}" == 0 ]]; then
  RESULT[daemon]="skipped (GECD_DAEMON=0)"
elif [[ "${RESULT[build]}" != ok ]]; then
  RESULT[daemon]="skipped (build failed)"
elif ((HAVE_GPU == 0)) && [[ -z "${BACKEND:-}" ]]; then
  RESULT[daemon]="skipped (no GPU)"
else
  run_stage daemon "${GPU_DAEMON_LIMIT:-170}" "$LOGS/daemon.log" \
    bash "$ROOT/scripts/gpu_daemon_bench.sh" "$BUILD" "$LOGS/daemon"
fi

# ---- bench
BENCH_BIN=""
for b in "$BUILD/bench/engine_bench" "$BUILD/engine_bench"; do
  [[ -x "$b" ]] && { BENCH_BIN="$b"; break; }
done
if [[ "${GECD_BENCH:-1}" == 0 ]]; then
  RESULT[bench]="skipped (GECD_BENCH=0)"
elif [[ -z "$BENCH_BIN" ]]; then
  RESULT[bench]="skipped (no engine_bench)"
else
  read -r -a bench_args <<<"${GECD_BENCH_ARGS:-}"
  if [[ "${GECD_BENCH_ARGS:-}" != *benchmark_out* ]] &&
     timeout 10 "$BENCH_BIN" --help 2>&1 | grep -q benchmark_out; then
    bench_args+=("--benchmark_out=$LOGS/bench.json" --benchmark_out_format=json)
  fi
  run_stage bench "${GPU_BENCH_LIMIT:-180}" "$LOGS/bench.log" "$BENCH_BIN" "${bench_args[@]}"
fi

# ---- summary (last: the device tool returns only the end of the output)
status=0
for s in configure build test; do [[ "${RESULT[$s]}" == ok ]] || status=1; done
for s in hf daemon bench; do
  [[ "${RESULT[$s]}" == ok || "${RESULT[$s]}" == skipped* ]] || status=1
done
[[ "$RUNTIME_LINE" != *MISSING* ]] || status=1
{
  echo
  echo "==================== gpu_check summary ===================="
  echo "gpu:  $GPU_LINE"
  echo "nvcc: $NVCC_LINE"
  printf '%-10s %-28s %8s %8s\n' stage result time limit
  for s in "${STAGES[@]}"; do
    printf '%-10s %-28s %8s %8s\n' "$s" "${RESULT[$s]}" "${ELAPSED[$s]}" "${LIMIT[$s]}"
  done
  if [[ -n "$DEP_LINES" ]]; then
    if [[ -z "$DEPS_OUTSIDE" ]]; then
      echo "deps: all $(wc -l <<<"$DEP_LINES") resolved from $DEPS"
    else
      echo "deps NOT from $DEPS:"; cut -c1-200 <<<"$DEPS_OUTSIDE"
    fi
  fi
  [[ -n "$RUNTIME_LINE" ]] && echo "runtime: $RUNTIME_LINE"
  if [[ -n "$TESTS_SUMMARY" ]]; then
    passed=$(grep -c '^Passed|' <<<"$TESTS_SUMMARY")
    skipped=$(grep -c '^Skipped|' <<<"$TESTS_SUMMARY")
    other=$(grep -vc -e '^Passed|' -e '^Skipped|' <<<"$TESTS_SUMMARY")
    echo "gpu tests: $passed passed, $other failed, $skipped skipped"
    { grep -v -e '^Passed|' -e '^Skipped|' <<<"$TESTS_SUMMARY"; grep '^Skipped|' <<<"$TESTS_SUMMARY"
      grep '^Passed|' <<<"$TESTS_SUMMARY" | head -n 40; } |
      awk -F'|' '{ printf "  %-8s %-70s %s\n", $1, substr($2, 1, 70), $3 }'
    ((passed > 40)) && echo "  ... ($((passed - 40)) more passed: ctest.log)"
    ((HAVE_GPU == 1 && skipped > 0)) && echo "  NOTE: tests skipped although nvidia-smi sees a GPU"
  elif [[ "${RESULT[test]}" != "not run" ]]; then
    echo "gpu tests: none listed; ctest.log:"; tail -n 5 "$LOGS/ctest.log"
  fi
  if [[ -s "$LOGS/hf.log" ]]; then
    echo "---- hf (scripts/gpu_hf_check.sh)"
    tail -n 14 "$LOGS/hf.log" | cut -c1-200
  fi
  if [[ -s "$LOGS/daemon.log" ]]; then
    echo "---- daemon (scripts/gpu_daemon_bench.sh; logs: $LOGS/daemon)"
    sed -n '/^==== gpu_daemon_bench summary/,$p' "$LOGS/daemon.log" | cut -c1-200
  fi
  if [[ -s "$LOGS/bench.log" ]]; then
    echo "---- engine_bench ${GECD_BENCH_ARGS:-} (last ${GECD_BENCH_TAIL:-40} lines of bench.log)"
    tail -n "${GECD_BENCH_TAIL:-40}" "$LOGS/bench.log" | cut -c1-160
  fi
  echo "logs: $LOGS: $(cd "$LOGS" && ls | tr '\n' ' ')"
  echo "gpu_check: $([[ $status == 0 ]] && echo PASS || echo FAIL) (exit $status)"
} | tee "$LOGS/summary.txt"

# The device tool brings back files under 16 MiB only.
for f in "$LOGS"/*; do
  if [[ -f "$f" ]] && (($(stat -c %s "$f") > 15 * 1024 * 1024)); then
    tail -c $((15 * 1024 * 1024)) "$f" >"$f.tmp" && mv "$f.tmp" "$f"
  fi
done
exit $status
