#!/usr/bin/env bash
# The format gate of .ci/run: every tracked C++/CUDA file (*.h, *.cc, *.cu, *.cuh) must be as
# clang-format formats it with the checked-in .clang-format. Prints each offender with the
# number of lines clang-format would change, and fails when there is one. Fix with
#   git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang-format >/dev/null || {
  echo "format_check.sh: clang-format not found (scripts/install_deps.sh installs it)"
  exit 2
}
start=$SECONDS
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
offenders=0
changed_lines=0
for f in "${files[@]}"; do
  # --dry-run --Werror is the check itself; the diff only counts what it would change.
  if ! clang-format --style=file --dry-run --Werror "$f" 2>/dev/null; then
    n=$(clang-format --style=file "$f" | diff "$f" - | grep -c '^[<>]' || true)
    echo "format_check.sh: $f: $n lines differ"
    offenders=$((offenders + 1))
    changed_lines=$((changed_lines + n))
  fi
done
echo "format_check.sh: $(clang-format --version | head -1): ${#files[@]} files checked," \
  "$offenders not formatted ($changed_lines diff lines); $((SECONDS - start)) s"
((offenders == 0))
