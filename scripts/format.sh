#!/usr/bin/env bash
# One C++ style for the tree (.clang-format at the root).
#   scripts/format.sh           rewrites every tracked .cc/.h file in place
#   scripts/format.sh --check   changes nothing; names each file that differs and exits 1
# scripts/test.sh runs the check before building.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tool=$(command -v clang-format || true)
if [ -z "$tool" ]; then
  echo "format.sh: clang-format is not installed (apt-get install clang-format; scripts/setup.sh does)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" != "--check" ]; then
  "$tool" -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$tool" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "format.sh: $f is not formatted as .clang-format says; run scripts/format.sh" >&2
    bad=1
  fi
done
exit $bad
