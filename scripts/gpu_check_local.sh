#!/usr/bin/env bash
# Runs scripts/gpu_check.sh on THIS machine (no GPU needed: the GPU tests skip) the way the GPU
# machine sees it: in a private mount namespace where the Debian -dev packages that
# .gpu-deps/ replaces are hidden, so the configure can only resolve them from .gpu-deps/
# (gpu_check.sh's summary says so: "deps: all N resolved from .../.gpu-deps"):
#   - the CMake and pkg-config directories: /usr/lib/x86_64-linux-gnu/{cmake,pkgconfig},
#     /usr/share/{cmake,pkgconfig} (and so yaml-cpp, gRPC, protobuf too);
#   - their header folders and headers under /usr/include (Abseil ... OpenBLAS, and the daemon's:
#     gRPC, protobuf, re2, c-ares, OpenSSL, zlib, yaml-cpp, Hunspell, libmicrohttpd, GnuTLS,
#     libcurl),
#     and their .a/.so files (overlaid with /dev/null, so that a stray use fails loudly);
#   - the code generators /usr/bin/protoc and /usr/bin/grpc_cpp_plugin (/dev/null too: not
#     executable), so protoc can only be the bundle's, and pkg-config (the GPU machine may have
#     none: the bundle defines the PkgConfig::* targets itself);
#   - the hunspell dictionaries /usr/share/hunspell (the bundle has en_US).
# Shared libraries that programs used here (cmake, ninja, the compiler) need stay: libz.so.1,
# libssl.so.3, libcrypto.so.3, libcurl.so.4 and GnuTLS's; their .a and headers are hidden, and a
# gecd that picked them up at run time would show in gpu_check.sh's "runtime:" line only as "found"
# (ldd sees the system copy), so the bundle's build checks (scripts/gpu_deps.sh) cover those.
# Needs root or unprivileged user namespaces (unshare). Arguments and environment pass through
# to gpu_check.sh; GPU_JOBS defaults to 2 here.
#   bash scripts/gpu_check_local.sh -- CMD ARGS...   runs CMD in the same namespace instead
#                                  (e.g. build-gpu/gecd version, after a rehearsal)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d .gpu-deps ]] || bash scripts/gpu_deps.sh
export GPU_JOBS="${GPU_JOBS:-2}" GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-3600}"
export GPU_BUILD_LIMIT="${GPU_BUILD_LIMIT:-3000}" GPU_CONFIGURE_LIMIT="${GPU_CONFIGURE_LIMIT:-300}"
unshare_args=(-m --propagation private)
[[ "$(id -u)" == 0 ]] || unshare_args=(-r -m --propagation private)
exec unshare "${unshare_args[@]}" bash -c '
set -euo pipefail
L=/usr/lib/x86_64-linux-gnu
for d in $L/cmake $L/pkgconfig /usr/share/cmake /usr/share/pkgconfig $L/openblas-pthread \
         /usr/include/{absl,gtest,gmock,benchmark,spdlog,fmt,nlohmann,yaml-cpp,google,grpc,grpcpp} \
         /usr/include/{grpc++,re2,openssl,hunspell,gnutls} /usr/include/x86_64-linux-gnu/openssl \
         /usr/include/x86_64-linux-gnu/curl \
         /usr/include/x86_64-linux-gnu/openblas-pthread /usr/share/hunspell; do
  [[ -d "$d" ]] && mount -t tmpfs -o ro,size=1m gecd-hidden "$d"
done
hidden=0
shopt -s nullglob
for f in /usr/include/{pcre2.h,utf8proc.h,sentencepiece_processor.h,sentencepiece_trainer.h} \
         $L/libabsl_*.a $L/libabsl_*.so.* $L/libgtest*.a $L/libgmock*.a $L/libbenchmark* \
         $L/libspdlog.so.* $L/libfmt.so.* $L/libutf8proc.a $L/libutf8proc.so.* $L/libpcre2-8.a \
         $L/libsentencepiece*.so.* $L/libyaml-cpp.a $L/libyaml-cpp.so.* \
         /usr/include/{microhttpd.h,zlib.h,zconf.h,ares.h,ares_build.h,ares_version.h} \
         $L/libgrpc*.a $L/libgrpc*.so.* $L/libgpr.* $L/libupb.* $L/libaddress_sorting.* \
         $L/libprotobuf*.a $L/libprotobuf*.so.* $L/libprotoc.so.* $L/libre2.* $L/libcares.* \
         $L/libssl.a $L/libcrypto.a $L/libz.a $L/libhunspell* $L/libmicrohttpd.* \
         /usr/bin/protoc /usr/bin/protoc-* /usr/bin/grpc_cpp_plugin /usr/bin/pkg-config \
         /usr/bin/pkgconf /usr/bin/x86_64-linux-gnu-pkg-config; do
  if [[ -f "$f" && ! -L "$f" ]]; then mount --bind /dev/null "$f"; hidden=$((hidden + 1)); fi
done
echo "gpu_check_local.sh: hid the -dev packages (tmpfs over their folders, /dev/null over $hidden files)" >&2
if [[ "${1:-}" == -- ]]; then shift; exec "$@"; fi
exec bash scripts/gpu_check.sh "$@"
' gpu_check_local "$@"
