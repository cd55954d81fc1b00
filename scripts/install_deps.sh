#!/usr/bin/env bash
# Installs the Debian packages gecd builds and tests with, and the tests' Python venv
# (.venv-test; skipped with GECD_SKIP_TEST_VENV=1). Idempotent; needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config git python3
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenblas-dev libpcre2-dev libdnnl-dev libsentencepiece-dev libutf8proc-dev
  libhunspell-dev hunspell-en-us
  libicu-dev  # src/sentences: ICU's sentence BreakIterator
  libgtest-dev libgmock-dev libbenchmark-dev
  libmicrohttpd-dev libcurl4-openssl-dev libnghttp2-dev python3-grpcio python3-protobuf
  libssl-dev  # gecd_tls and gecd_auth: certificate checks, SHA-256 of bearer tokens
  libgnutls28-dev  # gecd_daemon: the metrics listener's client certificates (libmicrohttpd's TLS)
  libcpp-httplib-dev  # the route tests' fake Kubernetes API server
  haproxy  # bench/route_bench.sh: the router's measured peer
  python3-venv  # .venv-test below
  prometheus  # prometheus and promtool: tests/tools/prometheus_autoscaling_test.py, monitoring_test.py
  patchelf  # scripts/gpu_deps.sh
  systemd  # tests/tools/systemd_unit_test.py: systemd-analyze verify/security on docs/gecd.service
  # .ci/run's gates: clang-format (scripts/format_check.sh); clang's sanitizer and libFuzzer
  # runtimes (scripts/sanitize.sh, scripts/fuzz.sh) and llvm-symbolizer for their reports
  clang clang-format libclang-rt-14-dev llvm
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tests' Python: a venv with tests/tools/requirements.txt (pinned) and the plotting pins it
# includes, rebuilt when either file changes. scripts/build.sh points CMake's Python3 at it.
# Skipped with GECD_SKIP_TEST_VENV=1 (the image build, which copies only this script first).
venv=.venv-test
if [[ -z "${GECD_SKIP_TEST_VENV:-}" ]]; then
  pins="$(cat tests/tools/requirements.txt tools/route/requirements.txt)"
  if [[ "$pins" != "$(cat "$venv/requirements.txt" 2>/dev/null)" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/tools/requirements.txt
    printf '%s\n' "$pins" >"$venv/requirements.txt"
  fi
fi
