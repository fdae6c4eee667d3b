#!/usr/bin/env bash
# Builds everything and runs the whole test suite.
#   scripts/test.sh [--long]     release build in build/, every test but label "long" (--long:
#                                those too); the peers and DLRover too (scripts/setup_peers.sh, once per pins)
#   scripts/test.sh --asan       ASan+UBSan build in build-asan/, tests labelled "unit"
#   scripts/test.sh --tsan       TSan build in build-tsan/, tests labelled "concurrent"
# Extra arguments go to ctest (e.g. -R viewer, -L unit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"

# Label "long": the benchmarks of a minute or more (the side-by-side ones against the peers, the
# launch overhead, the collector under 10,000 ranks), left out unless --long is given;
# `ctest --test-dir build -L long -V` runs them alone.
build=build sanitize="" select=(-LE long)
case "${1:-}" in
  --long) select=(); shift ;;
  --asan) build=build-asan sanitize=address select=(-L unit -LE long); shift ;;
  --tsan) build=build-tsan sanitize=thread select=(-L concurrent -LE long); shift ;;
esac
# The peers (torchrun, DCP, py-spy, DeepSpeed, transformers, megatron-core with torch 2.15 from
# PyPI) for tests/peers and tests/realtorch: optional. Without them those tests skip with one line;
# the rest of the suite never needs them.
if [ "$build" = build ] && ! "$root/scripts/setup_peers.sh" >/dev/null; then
  echo "test: the peer environment is not installed; the peer and realtorch tests will skip (retry: scripts/setup_peers.sh)" >&2
fi
# DLRover (dlrover-run, its flash checkpoint) with torch 2.8, in an environment of its own (it
# cannot run with torch 2.15: scripts/dlrover-requirements.txt). Optional in the same way.
if [ "$build" = build ] && ! "$root/scripts/setup_peers.sh" --for dlrover >/dev/null; then
  echo "test: the DLRover environment is not installed; the comparisons with DLRover will skip (retry: scripts/setup_peers.sh --for dlrover)" >&2
fi

# ccache (setup.sh installs it) keeps compiled objects across clones on this machine: CI builds a
# fresh clone each time, and most of its objects are then found in the cache.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
jobs=$(nproc)
cmake -S "$root" -B "$root/$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DXTIMER_SANITIZE="$sanitize" "${launcher[@]}" >/dev/null
cmake --build "$root/$build" -j "$jobs"
started=$(date +%s)
rc=0
ctest --test-dir "$root/$build" --output-on-failure --timeout 600 -j "$jobs" "${select[@]}" "$@" || rc=$?
echo "tests took $(( $(date +%s) - started )) s; the ten slowest:"
"$root/scripts/slowest_tests.py" "$root/$build/Testing/Temporary/LastTest.log" 10 || true
exit $rc
