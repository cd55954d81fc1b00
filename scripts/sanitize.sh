#!/usr/bin/env bash
# The sanitizer gates of .ci/run. Each builds, into its own directory and with clang, only the
# suites it runs, then runs them through ctest; a finding aborts the test that hit it, which
# fails the gate. Usage: sanitize.sh [address|thread]... (default: both, in that order).
#   address  build-asan: ASan + UBSan (undefined behaviour aborts, leaks are findings), the
#            serve processes' suites (ipc, daemon, metrics, worker, engine_host, supervisor), the
#            text, engine, model, tokenizer and spelling suites, and tests/integration's where it
#            exists. Tests
#            that start the daemon start this build's gecd, so its processes are checked too.
#            The directory is configured with GECD_FUZZ as well (coverage instrumentation), so
#            that scripts/fuzz.sh builds the fuzz targets there without compiling it all again.
#   thread   build-tsan: ThreadSanitizer, the ring, ring engine link, grammar service,
#            connection gate and engine suites. TSan sees the threads of one process: the
#            rings' cross-process atomics are checked by the ring tests that use threads.
# Build directories: SANITIZE_ASAN_DIR, SANITIZE_TSAN_DIR. Extra ctest arguments (e.g. -R to
# narrow): SANITIZE_CTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang++ >/dev/null || {
  echo "sanitize.sh: clang++ not found (scripts/install_deps.sh installs it)"
  exit 2
}
bash scripts/install_deps.sh

# Test executables: one per tests/<area>/*_test.cc (tests/CMakeLists.txt), GPU tests excepted.
tests_of() {
  local area
  for area in "$@"; do
    (cd "tests/$area" && ls ./*_test.cc | grep -v '_gpu_test\.cc$' | sed 's|^\./||; s|\.cc$||')
  done
}

# configure DIR CMAKE_ARGS...: the flags both gates share. -O1 and line tables only: compiling
# is most of a gate's time, and a report still names file and line.
# Without oneDNN (-DGECD_ONEDNN=OFF; the int8 tests skip): Debian's libdnnl runs on GNU OpenMP,
# clang links LLVM's, and the two under ThreadSanitizer crash the test binaries at start.
configure() {
  local dir="$1"
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DGECD_CUDA=OFF -DGECD_BUILD_BENCH=OFF -DGECD_BUILD_TESTS=ON -DGECD_ONEDNN=OFF \
    -DPython3_EXECUTABLE="$PWD/.venv-test/bin/python3" "$@" >/dev/null
}

# run_gate NAME DIR CTEST_ARGS...: runs the selected suites and fails on a failed test or on any
# sanitizer report. Reports go to files (log_path in the *SAN_OPTIONS set by the caller), so
# that what a daemon the test started found is seen as well as the test's own.
run_gate() {
  local name="$1" dir="$2"
  shift 2
  local ran status=0
  # shellcheck disable=SC2086 # SANITIZE_CTEST_ARGS is a list of words
  ran=$(ctest --test-dir "$dir" -N "$@" ${SANITIZE_CTEST_ARGS:-} | sed -n 's/^Total Tests: //p')
  echo "sanitize.sh: $name: running $ran tests"
  # A test that fails is run again (up to 3 times): sanitizers slow the code 2-15x, which some
  # tests' timing (drain quiet periods, admission budgets) notices. A sanitizer report from any
  # attempt still fails the gate (below).
  # shellcheck disable=SC2086 # SANITIZE_CTEST_ARGS is a list of words
  ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 --repeat until-pass:3 "$@" \
    ${SANITIZE_CTEST_ARGS:-} || status=$?
  local report
  for report in "$reports"/*; do
    [ -f "$report" ] || continue
    echo "== sanitizer report $report:"
    head -150 "$report"
    status=1
  done
  if ((status != 0)); then
    echo "sanitize.sh: $name: FAILED (tests above, reports in $reports); $((SECONDS - gate_start)) s"
    return 1
  fi
  echo "sanitize.sh: $name: $ran tests passed, no sanitizer report; $((SECONDS - gate_start)) s"
}

address() {
  local dir="${SANITIZE_ASAN_DIR:-build-asan}"
  gate_start=$SECONDS
  configure "$dir" -DGECD_SANITIZE=ON -DGECD_FUZZ=ON
  # Daemon-level suites (whole gecd processes) live in tests/integration where it exists.
  local areas=(ipc daemon metrics worker engine_host supervisor text engine model tokenizer
    spelling)
  [ -d tests/integration ] && areas+=(integration)
  # shellcheck disable=SC2046 # one word per target
  cmake --build "$dir" --target gecd $(tests_of "${areas[@]}")
  reports="$PWD/$dir/sanitizer-reports"
  rm -rf "$reports" && mkdir -p "$reports"
  local common="halt_on_error=1:abort_on_error=1"
  export ASAN_OPTIONS="$common:log_path=$reports/asan:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
  export UBSAN_OPTIONS="$common:log_path=$reports/ubsan:print_stacktrace=1"
  local labels="${areas[*]}"
  run_gate "ASan+UBSan (${labels// /, })" "$dir" -L "^(${labels// /|})\$"
}

thread() {
  local dir="${SANITIZE_TSAN_DIR:-build-tsan}"
  gate_start=$SECONDS
  configure "$dir" -DGECD_SANITIZE=thread
  # shellcheck disable=SC2046 # one word per target
  cmake --build "$dir" --target ring_test ring_engine_link_test grammar_service_test \
    connection_gate_test $(tests_of engine)
  reports="$PWD/$dir/sanitizer-reports"
  rm -rf "$reports" && mkdir -p "$reports"
  export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:log_path=$reports/tsan:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/sanitizer/tsan.supp"
  run_gate "TSan (ring, ring engine link, grammar service, connection gate, engine)" "$dir" \
    -R '^(ipc/(Ring|Doorbell)Test|worker/(RingEngineLink|GrammarService|ConnectionGate|AdmissionWindow)Test|engine/)'
}

gates=("$@")
((${#gates[@]})) || gates=(address thread)
for gate in "${gates[@]}"; do
  case "$gate" in
    address | thread) "$gate" ;;
    *)
      echo "sanitize.sh: unknown gate '$gate' (address or thread)"
      exit 2
      ;;
  esac
done
