#!/usr/bin/env bash
# Installs the Debian packages gecd builds and tests with. Idempotent; needs root (or sudo).
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config git python3
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenblas-dev libpcre2-dev libsentencepiece-dev libutf8proc-dev
  libhunspell-dev hunspell-en-us
  libgtest-dev libgmock-dev libbenchmark-dev
  libmicrohttpd-dev libcurl4-openssl-dev libnghttp2-dev python3-grpcio python3-protobuf
  libcpp-httplib-dev  # the route tests' fake Kubernetes API server
  haproxy  # bench/route_bench.sh: the router's measured peer
  python3-yaml python3-pip  # tests/tools/k8s_*_test.py; pip for python_packages below
  prometheus  # tests/tools/prometheus_autoscaling_test.py: prometheus and promtool
  patchelf  # scripts/gpu_deps.sh
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

# Python packages Debian 12 does not have, for the python3 the tests run with (CMake's Python3,
# the first python3 on PATH): kubernetes-validate ships the Kubernetes API's JSON schemas that
# tests/tools/k8s_manifests.py validates the manifests against.
python_packages=(kubernetes-validate==1.37.0)
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  pip_flags=(--quiet --disable-pip-version-check)
  # Debian's own python3 is externally managed (PEP 668); a pyenv or venv one is not.
  if python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'
  then
    pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" "${python_packages[@]}"
fi
