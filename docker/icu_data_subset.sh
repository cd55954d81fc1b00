#!/usr/bin/env bash
# Writes OUT_DIR/libicudata.so.<major>: Debian's ICU data cut down to what gecd loads, for the
# images (docker/Dockerfile, docker/Dockerfile.cuda): 3.9 MB instead of Debian's 31 MB, most of
# which is locale data (collation, time zones, currencies, transliterators) gecd never opens.
# gecd's one use of ICU's data is the sentence splitter (src/sentences:
# BreakIterator::createSentenceInstance("en@ss=standard")): the break-iterator tree's English
# and root bundles, sent.brk, what icupkg says those depend on, and the root locale bundles
# every resource lookup starts from. image_check.sh runs the README's request and the TLS check
# against it; the sentence tests pass with it (SentenceSplitterTest's golden set, WholeTextTest).
#
#   bash docker/icu_data_subset.sh OUT_DIR     needs libicu72, icu-devtools, binutils, gcc
set -euo pipefail
out="$1"
lib="$(readlink -f "$(ls /usr/lib/x86_64-linux-gnu/libicudata.so.* | head -1)")"
major="$(basename "$lib" | sed 's/^libicudata\.so\.\([0-9]*\).*/\1/')"
symbol="icudt${major}_dat"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The common data is one symbol in .rodata: copy its bytes out.
read -r address size < <(nm -D -S --defined-only "$lib" | awk -v s="$symbol" '$4 == s { print $1, $2 }')
rodata="$(readelf -S -W "$lib" | awk '$2 == ".rodata" { print $4 }')"
[[ -n "$address" && -n "$rodata" ]] || { echo "icu_data_subset: no $symbol in $lib" >&2; exit 1; }
objcopy -O binary -j .rodata "$lib" "$work/rodata.bin"
# A package's name is its file's base name, which icupkg and ICU check: icudt<major>l.
mkdir "$work/in" "$work/pkg"
full="$work/in/icudt${major}l.dat"
pkg="$work/pkg/icudt${major}l.dat"
tail -c +$((16#$address - 16#$rodata + 1)) "$work/rodata.bin" | head -c $((16#$size)) >"$full"

keep='^(brkitr/(res_index|root|en|en_US|en_US_POSIX)\.res|brkitr/sent\.brk|(res_index|root|en|en_US|en_US_POSIX|pool|likelySubtags|metadata|supplementalData|keyTypeData|langInfo)\.res|cnvalias\.icu)$'
icupkg -l "$full" | grep -v -E "$keep" >"$work/remove.txt"
for _ in 1 2 3 4 5; do
  rm -f "$pkg"
  report="$(icupkg -r "$work/remove.txt" "$full" "$pkg" 2>&1 || true)"
  # Items the kept ones depend on (root.res names the break dictionaries) are kept too.
  needed="$( (grep -o 'depends on missing item [^ ]*' <<<"$report" || true) | awk '{ print $5 }' |
    sort -u)"
  [[ -z "$needed" ]] && break
  grep -v -x -F -f <(printf '%s\n' "$needed") "$work/remove.txt" >"$work/remove.next" || true
  mv "$work/remove.next" "$work/remove.txt"
done
[[ -s "$pkg" ]] || { echo "icu_data_subset: icupkg failed: $report" >&2; exit 1; }
genccode -q -a gcc -e "icudt${major}" -d "$work" -f icudata "$pkg"
mkdir -p "$out"
gcc -shared -o "$out/libicudata.so.$major" -Wl,-soname,"libicudata.so.$major" "$work/icudata.S"
strip --strip-unneeded "$out/libicudata.so.$major"
echo "icu_data_subset: $out/libicudata.so.$major, $(icupkg -l "$pkg" | wc -l) items, $(stat -c %s "$out/libicudata.so.$major") bytes"
