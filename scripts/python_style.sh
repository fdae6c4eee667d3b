#!/usr/bin/env bash
# One Python style for the tree (pyproject.toml, .flake8): black formats, flake8 lints.
#   scripts/python_style.sh           rewrites every tracked .py file with black, then lints
#   scripts/python_style.sh --check   changes nothing; names each file black would change and
#                                     each flake8 finding; exits 1 on any
# The check is the ctest `python_style_check` (label unit; tests/CMakeLists.txt). It exits 77
# (ctest's "skipped") when it cannot check: black or flake8 missing, or not a git checkout.
# Both are Debian's (scripts/setup.sh installs them): the core suite keeps Debian's packages, and
# their versions are pinned by the release (black 23.1, flake8 5.0.4 on Debian 12).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
check=0
[ "${1:-}" = "--check" ] && check=1
cannot() {  # what is missing, then: skip the check (77) or fail the rewrite (2)
  echo "python_style.sh: $1" >&2
  exit $((check ? 77 : 2))
}
for tool in black flake8; do
  command -v "$tool" >/dev/null || cannot "$tool is not installed (apt-get install black flake8; scripts/setup.sh does)"
done
files=$(git ls-files '*.py' 2>/dev/null) || cannot "$root is not a git checkout: no list of tracked files to check"
[ -n "$files" ] || cannot "git lists no .py files in $root"
mapfile -t files <<<"$files"
rc=0
if [ $check = 0 ]; then
  black -q "${files[@]}"
else
  black --check -q "${files[@]}" 2>/dev/null || {
    rc=1
    black --check "${files[@]}" 2>&1 | sed -n 's/^would reformat /python_style.sh: black would reformat /p' >&2 || true
    echo "python_style.sh: run scripts/python_style.sh to rewrite them" >&2
  }
fi
flake8 "${files[@]}" >&2 || rc=1
exit $rc
