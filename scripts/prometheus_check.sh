#!/usr/bin/env bash
# The autoscaling signal through a real Prometheus, with its figures printed: three echo
# daemons under gecd-load (one open-loop rate each), Prometheus (Debian's package) scraping each
# twice, then the Prometheus Adapter's rule and KEDA's query from deploy/k8s run through its
# HTTP API and compared with Little's law (tests/tools/prometheus_autoscaling_test.py, which
# ctest runs as tools/PrometheusAutoscaling). About 50 s; loads only 127.0.0.1.
# Builds nothing; first: cmake --build "$BUILD_DIR" --target gecd gecd-load
#
#   BUILD_DIR=build scripts/prometheus_check.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
[[ "$BUILD_DIR" = /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"
for bin in gecd gecd-load; do
  [[ -x "$BUILD_DIR/$bin" ]] || {
    echo "missing $BUILD_DIR/$bin: cmake --build $BUILD_DIR --target gecd gecd-load" >&2
    exit 1
  }
done
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null ||
    { echo "$tool is not installed (scripts/install_deps.sh: Debian's prometheus)" >&2; exit 1; }
done
promtool --version | head -1
GECD_BINARY="$BUILD_DIR/gecd" GECD_LOAD_BINARY="$BUILD_DIR/gecd-load" \
  exec python3 "$ROOT/tests/tools/prometheus_autoscaling_test.py" -v
