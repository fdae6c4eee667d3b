#!/usr/bin/env bash
# One C++ style for the tree (.clang-format at the root).
#   scripts/format.sh           rewrites every tracked .cc/.h file in place
#   scripts/format.sh --check   changes nothing; names each file that differs and exits 1
# The check is the ctest `format_check` (label unit; tests/CMakeLists.txt). It exits 77 (ctest's
# "skipped") when it cannot check: no clang-format, or not a git checkout (no list of files).
# Style differs between clang-format versions; the tree is kept as Debian's (14) writes it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
check=0
[ "${1:-}" = "--check" ] && check=1
cannot() {  # what is missing, then: skip the check (77) or fail the rewrite (2)
  echo "format.sh: $1" >&2
  exit $((check ? 77 : 2))
}
tool=$(command -v clang-format || true)
[ -n "$tool" ] || cannot "clang-format is not installed (apt-get install clang-format; scripts/setup.sh does)"
files=$(git ls-files '*.cc' '*.h' 2>/dev/null) || cannot "$root is not a git checkout: no list of tracked files to format"
[ -n "$files" ] || cannot "git lists no .cc/.h files in $root"
mapfile -t files <<<"$files"
if [ $check = 0 ]; then
  "$tool" -i --style=file "${files[@]}"
  exit 0
fi
# One clang-format for all files (a process per file took 20 times longer); it names each
# difference "path:line:col: error: code should be clang-formatted".
rc=0
out=$("$tool" --style=file --dry-run --Werror "${files[@]}" 2>&1 >/dev/null) || rc=$?
bad=$(sed -nE 's/^([^:]+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
if [ $rc != 0 ] && [ -z "$bad" ]; then  # it failed for another reason (a bad .clang-format...)
  echo "$out" | head -20 >&2
  echo "format.sh: clang-format failed (exit $rc) before it could compare the files" >&2
  exit 1
fi
if [ -n "$bad" ]; then
  while read -r f; do echo "format.sh: $f is not formatted as .clang-format says; run scripts/format.sh" >&2; done <<<"$bad"
  echo "format.sh: $(wc -l <<<"$bad") of ${#files[@]} files differ" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files are formatted"
