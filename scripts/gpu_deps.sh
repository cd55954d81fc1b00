#!/usr/bin/env bash
# Assembles .gpu-deps/: everything the GPU build (scripts/gpu_check.sh: the whole daemon,
# -DGECD_CUDA=ON -DGECD_SERVER=ON -DGECD_CLI=ON) links or runs that the lent GPU machine lacks,
# copied from this machine's Debian packages. It travels to that machine (carry [".gpu-deps"];
# see docs/GPU.md), which has CUDA, CMake, ninja and g++ but none of these.
#
#   bash scripts/gpu_deps.sh            (installs the Debian packages first if missing)
#
# What travels (~20 MB):
#   gecd-deps.tar.xz              a relocatable CMake prefix, xz-packed (below)
#   lib/cmake/GecdDeps/           GecdDepsConfig.cmake: the first find_package of the top-level
#                                 CMakeLists; unpacks the prefix into <build>/gecd-deps once,
#                                 puts it first in CMAKE_PREFIX_PATH and defines the imported
#                                 targets gecd otherwise gets from pkg-config or Find modules
#                                 (PkgConfig::*, ZLIB, OpenSSL, c-ares, re2, protobuf::libprotobuf)
#   share/hunspell/en_US.{aff,dic}  the dictionary configs/gecd.yaml names
#                                 (spelling.dictionary=$PWD/.gpu-deps/share/hunspell/en_US there)
# The prefix:
#   include/                      headers (OpenBLAS's under include/openblas/, libcurl's under
#                                 include/curl/, GnuTLS's under include/gnutls/)
#   lib/x86_64-linux-gnu/         static .a where Debian ships them: Abseil, GTest, GMock, PCRE2,
#                                 utf8proc, ICU (icuuc, icudata), gRPC (grpc++,
#                                 grpc++_reflection, grpc, gpr, upb, address_sorting), re2,
#                                 c-ares, zlib, protobuf,
#                                 yaml-cpp, Hunspell; otherwise .so under their SONAMEs
#                                 (benchmark, spdlog, fmt, sentencepiece, libmicrohttpd and the
#                                 GnuTLS libraries it needs, libcurl and what it needs, OpenSSL's
#                                 libssl.so.3/libcrypto.so.3 among them), each with RUNPATH
#                                 $ORIGIN
#   lib/x86_64-linux-gnu/libopenblas.so.0   linked from Debian's libopenblas.a keeping only
#                                 cblas_sgemm + openblas_set_num_threads (and what they pull)
#   lib/x86_64-linux-gnu/cmake/   Debian's config files for absl, GTest, benchmark, spdlog, fmt,
#                                 gRPC, yaml-cpp (relocatable: they locate the prefix from their
#                                 own path); absl's, gRPC's and yaml-cpp's import the .a instead
#                                 of the .so, gRPC's only the targets gecd links
#   share/cmake/nlohmann_json/    Debian's config (header-only, relocatable)
#   bin/protoc bin/grpc_cpp_plugin  Debian's code generators, RUNPATH $ORIGIN/../lib/tools, where
#                                 their libprotoc/libprotobuf/libgrpc_plugin_support .so are
# The binaries built against it find the .so by CMake's build RPATH (absolute paths into
# <build>/gecd-deps), the .so find theirs by $ORIGIN: no LD_LIBRARY_PATH is needed.
# Everything in it is Debian's build of those libraries; never commit it (.gitignore).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DEST="${GPU_DEPS_DIR:-$ROOT/.gpu-deps}"
ARCH_LIB=/usr/lib/x86_64-linux-gnu
OPENBLAS_DIR="$ARCH_LIB/openblas-pthread"

bash scripts/install_deps.sh

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
P="$tmp/gecd-deps"  # the prefix, packed into $DEST/gecd-deps.tar.xz at the end
mkdir -p "$P/include" "$P/bin" "$P/lib/x86_64-linux-gnu/cmake" "$P/lib/tools" "$P/share/cmake"
L="$P/lib/x86_64-linux-gnu"

# Headers.
for d in absl gtest gmock benchmark spdlog fmt nlohmann grpc grpcpp grpc++ google yaml-cpp \
         hunspell unicode; do
  cp -a "/usr/include/$d" "$P/include/"
done
cp -a /usr/include/pcre2.h /usr/include/utf8proc.h /usr/include/sentencepiece_processor.h \
  /usr/include/microhttpd.h "$P/include/"
cp -a /usr/include/x86_64-linux-gnu/curl /usr/include/nghttp2 /usr/include/gnutls "$P/include/"
mkdir -p "$P/include/openblas"
cp -aL /usr/include/x86_64-linux-gnu/openblas-pthread/. "$P/include/openblas/"

# Static libraries. gRPC's and protobuf's must be the .a: a libgrpc.so would bring Debian's
# shared Abseil next to the static one gecd links.
cp -a "$ARCH_LIB"/libabsl_*.a "$ARCH_LIB"/libgtest.a "$ARCH_LIB"/libgtest_main.a \
  "$ARCH_LIB"/libgmock.a "$ARCH_LIB"/libgmock_main.a "$ARCH_LIB"/libbenchmark_main.a \
  "$ARCH_LIB"/libpcre2-8.a "$ARCH_LIB"/libutf8proc.a "$ARCH_LIB"/libicuuc.a \
  "$ARCH_LIB"/libicudata.a \
  "$ARCH_LIB"/libgrpc++.a "$ARCH_LIB"/libgrpc++_reflection.a "$ARCH_LIB"/libgrpc.a \
  "$ARCH_LIB"/libgpr.a "$ARCH_LIB"/libupb.a "$ARCH_LIB"/libaddress_sorting.a \
  "$ARCH_LIB"/libre2.a "$ARCH_LIB"/libcares.a \
  "$ARCH_LIB"/libz.a "$ARCH_LIB"/libprotobuf.a "$ARCH_LIB"/libyaml-cpp.a \
  "$ARCH_LIB"/libhunspell-1.7.a "$L/"

# deps_closure FILE...: the shared libraries FILE needs, beyond glibc (libresolv is glibc's too),
# libstdc++ and libgcc (which every machine with g++ has, newer).
SYSTEM_LIBS='libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s'
deps_closure() {
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    grep -vE "/($SYSTEM_LIBS|ld-linux[^/]*)\.so" |
    sort -u
}
# copy_so DIR FILE...: copies FILE (resolved) under its SONAME into DIR.
copy_so() {
  local dir="$1" f soname; shift
  for f in "$@"; do
    soname="$(objdump -p "$f" | awk '$1 == "SONAME" { print $2 }')"
    cp -L "$f" "$dir/${soname:-$(basename "$f")}"
  done
}

# Shared libraries: Debian ships no .a for these (or, for libmicrohttpd, none whose GnuTLS
# dependencies all have one), so they go by SONAME with what they need, each finding the rest
# next to itself ($ORIGIN).
# benchmark, spdlog and fmt keep their file names and SONAME links (their configs import the
# full names); the unversioned development links go, so that no find_library picks a .so.
cp -a "$ARCH_LIB"/libbenchmark.so* "$ARCH_LIB"/libspdlog.so* "$ARCH_LIB"/libfmt.so* \
  "$ARCH_LIB"/libsentencepiece.so.0* "$L/"
find "$L" -maxdepth 1 -type l -name '*.so' -delete
copy_so "$L" "$ARCH_LIB"/libmicrohttpd.so.12
# shellcheck disable=SC2046
copy_so "$L" $(deps_closure "$ARCH_LIB"/libmicrohttpd.so.12 | grep -v libmicrohttpd)
# libcurl (gecd route's Kubernetes discovery) likewise. Its closure holds libssl.so.3 and
# libcrypto.so.3, and gRPC links those too (OpenSSL::SSL below): one OpenSSL in the process,
# where static archives for gRPC would have put a second copy beside libcurl's.
copy_so "$L" "$ARCH_LIB"/libcurl.so.4
# shellcheck disable=SC2046
copy_so "$L" $(deps_closure "$ARCH_LIB"/libcurl.so.4 | grep -v libcurl)

# The code generators and what they load, in lib/tools (apart from what gecd links).
cp -L /usr/bin/protoc /usr/bin/grpc_cpp_plugin "$P/bin/"
# shellcheck disable=SC2046
copy_so "$P/lib/tools" $(deps_closure /usr/bin/protoc /usr/bin/grpc_cpp_plugin)
patchelf --set-rpath '$ORIGIN/../lib/tools' "$P/bin/protoc" "$P/bin/grpc_cpp_plugin"

# CMake package configs.
for d in absl GTest benchmark spdlog fmt grpc yaml-cpp; do
  cp -a "$ARCH_LIB/cmake/$d" "$L/cmake/"
done
cp -a /usr/share/cmake/nlohmann_json "$P/share/cmake/"
# Debian's configs import the shared libabsl_*.so.20220623.0.0, libgrpc*.so.*, libyaml-cpp.so.*:
# point them at the .a (the targets stay SHARED IMPORTED, which links an archive all the same).
sed -i -E 's#(libabsl_[A-Za-z0-9_]+)\.so\.[0-9.]+"#\1.a"#' "$L/cmake/absl/abslTargets-none.cmake"
sed -i -E 's#(libyaml-cpp)\.so\.[0-9.]+"#\1.a"#; /IMPORTED_SONAME/d' \
  "$L/cmake/yaml-cpp/yaml-cpp-targets-none.cmake"
# gRPC's: keep only the targets gecd uses (the others, e.g. grpc_unsecure, channelz, the other
# languages' plugins, stay defined without a file, so using one fails at generate time).
python3 - "$L/cmake/grpc/gRPCTargets-none.cmake" <<'PY'
import re, sys
path = sys.argv[1]
keep = {"address_sorting", "gpr", "grpc", "grpc++", "grpc++_reflection", "upb", "grpc_cpp_plugin"}
text = open(path).read()
block = re.compile(r'# Import target "gRPC::([^"]+)" for configuration "None"\n.*?'
                   r'list\(APPEND _cmake_import_check_files_for_gRPC::\1 [^\n]*\n\n', re.S)
text, n = block.subn(lambda m: m.group(0) if m.group(1) in keep else "", text)
if n < len(keep) or len(re.findall(r'# Import target', text)) != len(keep):
    sys.exit("gpu_deps.sh: unexpected layout of " + path)
text = re.sub(r'(lib(?:address_sorting|gpr|grpc|grpc\+\+|grpc\+\+_reflection|upb))\.so\.[0-9.]+"',
              r'\1.a"', text)
text = re.sub(r'\n *IMPORTED_SONAME_NONE "[^"]*"', "", text)
open(path, "w").write(text)
PY

# OpenBLAS: a cut-down shared library from Debian's static archive.
gcc -shared -o "$L/libopenblas.so.0" -Wl,-soname,libopenblas.so.0 -Wl,--no-undefined \
  -Wl,-u,cblas_sgemm -Wl,-u,openblas_set_num_threads -Wl,-u,openblas_get_corename \
  "$(readlink -f "$OPENBLAS_DIR/libopenblas.a")" -lpthread -lm
strip --strip-unneeded "$L/libopenblas.so.0"
syms="$(nm -D --defined-only "$L/libopenblas.so.0")"
for sym in cblas_sgemm openblas_set_num_threads; do
  grep -qw "$sym" <<<"$syms" ||
    { echo "gpu_deps.sh: $sym missing from the cut-down libopenblas.so.0" >&2; exit 1; }
done

find "$L" "$P/lib/tools" -maxdepth 1 -type f -name '*.so*' -exec patchelf --set-rpath '$ORIGIN' {} +

# The configs must not point back into /usr (the "_realOrig" lines only compare paths).
if grep -rn '/usr' "$P/lib" "$P/share" --include='*.cmake' | grep -vE ':[0-9]+: *#' |
   grep -v '_realOrig\|PACKAGE_PREFIX_DIR "/usr"\|_IMPORT_PREFIX "/usr/lib'; then
  echo "gpu_deps.sh: a config above still names /usr" >&2; exit 1
fi
for f in $(grep -ho '"${_IMPORT_PREFIX}/[^"]*"' "$L"/cmake/*/*-none.cmake | tr -d '"' |
           sed 's#${_IMPORT_PREFIX}#'"$P"'#'); do
  [[ -e "$f" ]] || { echo "gpu_deps.sh: a config imports $f, which is not in the bundle" >&2; exit 1; }
done
# Every .so and tool finds what it needs inside the prefix, without the system's copies.
for f in "$L"/*.so.* "$P"/lib/tools/*.so* "$P"/bin/*; do
  if missing="$(env -u LD_LIBRARY_PATH ldd "$f" | grep -E '=> /(usr/)?lib/' |
                grep -vE "/($SYSTEM_LIBS)\.so")" &&
     [[ -n "$missing" ]]; then
    echo "gpu_deps.sh: $f loads from the system:" >&2; echo "$missing" >&2; exit 1
  fi
done
"$P/bin/protoc" --version >/dev/null

rm -rf "$DEST"
mkdir -p "$DEST/lib/cmake/GecdDeps" "$DEST/share/hunspell"
cp -L /usr/share/hunspell/en_US.aff /usr/share/hunspell/en_US.dic "$DEST/share/hunspell/"
(cd "$tmp" && XZ_OPT="-6 -T0" tar -cJf "$DEST/gecd-deps.tar.xz" gecd-deps)
cat >"$DEST/lib/cmake/GecdDeps/GecdDepsConfig.cmake" <<'CMAKE'
# Generated by scripts/gpu_deps.sh, for a machine without pkg-config or the Debian -dev
# packages. The top-level CMakeLists finds it first (with -DCMAKE_PREFIX_PATH=<this bundle>):
# it unpacks the bundle's prefix (gecd-deps.tar.xz) into <build>/gecd-deps once, puts that first
# in CMAKE_PREFIX_PATH, so that the find_package calls that follow (absl, GTest, benchmark,
# spdlog, fmt, nlohmann_json, yaml-cpp, gRPC, Protobuf) resolve there, and defines the imported
# targets gecd and gRPC's config otherwise get from pkg-config or CMake's Find modules.
get_filename_component(_gecd_deps_bundle "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(GecdDeps_BUNDLE "${_gecd_deps_bundle}")
set(GecdDeps_PREFIX "${CMAKE_BINARY_DIR}/gecd-deps")
set(_gecd_deps_stamp "${GecdDeps_PREFIX}/.unpacked")
if(NOT EXISTS "${_gecd_deps_stamp}"
   OR "${_gecd_deps_bundle}/gecd-deps.tar.xz" IS_NEWER_THAN "${_gecd_deps_stamp}")
  file(REMOVE_RECURSE "${GecdDeps_PREFIX}")
  file(ARCHIVE_EXTRACT INPUT "${_gecd_deps_bundle}/gecd-deps.tar.xz"
       DESTINATION "${CMAKE_BINARY_DIR}" TOUCH)
  file(TOUCH "${_gecd_deps_stamp}")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${GecdDeps_PREFIX}")
set(_gecd_deps_lib "${GecdDeps_PREFIX}/lib/x86_64-linux-gnu")
set(_gecd_deps_include "${GecdDeps_PREFIX}/include")
find_package(Threads REQUIRED)

# _gecd_deps_import(TARGET STATIC|SHARED FILE [LINK libs...]): a global imported library with
# the prefix's include/ (and, for a SHARED one, its file name as SONAME).
function(_gecd_deps_import target type file)
  cmake_parse_arguments(arg "" "" "LINK" ${ARGN})
  if(NOT TARGET ${target})
    add_library(${target} ${type} IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${_gecd_deps_lib}/${file}"
      INTERFACE_INCLUDE_DIRECTORIES "${_gecd_deps_include}")
    if(type STREQUAL "SHARED")
      set_target_properties(${target} PROPERTIES IMPORTED_SONAME "${file}")
    endif()
    if(arg_LINK)
      set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${arg_LINK}")
    endif()
  endif()
endfunction()

# What the top-level CMakeLists and src/ otherwise take from pkg-config.
_gecd_deps_import(PkgConfig::OPENBLAS SHARED libopenblas.so.0)
set_target_properties(PkgConfig::OPENBLAS PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_gecd_deps_include}/openblas")
_gecd_deps_import(PkgConfig::PCRE2 STATIC libpcre2-8.a)
_gecd_deps_import(PkgConfig::UTF8PROC STATIC libutf8proc.a)
set_target_properties(PkgConfig::UTF8PROC PROPERTIES INTERFACE_COMPILE_DEFINITIONS UTF8PROC_STATIC)
_gecd_deps_import(PkgConfig::ICU_DATA STATIC libicudata.a)
_gecd_deps_import(PkgConfig::ICU_UC STATIC libicuuc.a
                  LINK PkgConfig::ICU_DATA ${CMAKE_DL_LIBS} Threads::Threads)
_gecd_deps_import(PkgConfig::SENTENCEPIECE SHARED libsentencepiece.so.0)
_gecd_deps_import(PkgConfig::HUNSPELL STATIC libhunspell-1.7.a)
set_property(TARGET PkgConfig::HUNSPELL APPEND PROPERTY
  INTERFACE_INCLUDE_DIRECTORIES "${_gecd_deps_include}/hunspell")
_gecd_deps_import(PkgConfig::MICROHTTPD SHARED libmicrohttpd.so.12)
# The metrics listener's client certificates: the libgnutls already in libmicrohttpd's closure.
_gecd_deps_import(PkgConfig::GNUTLS SHARED libgnutls.so.30)
_gecd_deps_import(PkgConfig::CURL SHARED libcurl.so.4)
# gecd route's relay: the libnghttp2 already in libcurl's closure.
_gecd_deps_import(PkgConfig::NGHTTP2 SHARED libnghttp2.so.14)

# What gRPC's config (and FindProtobuf) would look for with CMake's Find modules and
# pkg-config: defined here as the static archives, and marked found so that it does not.
_gecd_deps_import(ZLIB::ZLIB STATIC libz.a)
set(ZLIB_FOUND TRUE)
set(ZLIB_INCLUDE_DIRS "${_gecd_deps_include}")
set(ZLIB_LIBRARIES ZLIB::ZLIB)
# OpenSSL: the shared libraries libcurl loads, so that gRPC and libcurl share one copy.
_gecd_deps_import(OpenSSL::Crypto SHARED libcrypto.so.3)
_gecd_deps_import(OpenSSL::SSL SHARED libssl.so.3 LINK OpenSSL::Crypto)
set(OPENSSL_FOUND TRUE)
_gecd_deps_import(c-ares::cares STATIC libcares.a)
set(c-ares_FOUND TRUE)
_gecd_deps_import(re2::re2 STATIC libre2.a LINK Threads::Threads)
set(re2_FOUND TRUE)
# FindProtobuf keeps a protobuf::libprotobuf that exists; the archive needs zlib.
_gecd_deps_import(protobuf::libprotobuf STATIC libprotobuf.a LINK ZLIB::ZLIB Threads::Threads)
set(GecdDeps_FOUND TRUE)
CMAKE

echo "gpu_deps.sh: $DEST (prefix unpacked: $(du -sh "$P" | cut -f1))"
du -sh "$DEST"/gecd-deps.tar.xz "$DEST"/share/hunspell
du -sh "$DEST"
