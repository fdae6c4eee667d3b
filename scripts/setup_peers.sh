#!/usr/bin/env bash
# Installs the peers: the tools our users would otherwise pick (torchrun and DCP from PyTorch 2.x,
# DLRover's dlrover-run and flash checkpoint, py-spy), pinned in scripts/peers-requirements.txt,
# in a Python 3.11 virtual environment that the peer tests (tests/peers/) run beside ours.
#
#   scripts/setup_peers.sh           build it if missing, link .peers to it, print its path
#   scripts/setup_peers.sh --check   exit 0 if .peers is ready, 1 if not (installs nothing)
#
# The environment lives outside the checkout, in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/xtimer/peers-<first 16 hex of the requirements' sha256>
# so that every clone on this machine (CI clones afresh in another folder) shares one copy of its
# 6.7 GB, and it is rebuilt only when the pins change. `.peers` in the checkout is a symlink to it
# (ignored by git). A build is done in a temporary folder and renamed when complete, under a lock,
# so an interrupted or concurrent run never leaves a half environment behind the final name.
#
# Nothing of the core depends on it: scripts/test.sh calls this and goes on when it fails; the
# peer tests then skip (exit 77) with one line saying how to install.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req=$root/scripts/peers-requirements.txt
python=/usr/bin/python3.11  # Debian's: the interpreter the build's xtimer._ckpt module is built for

hash=$(sha256sum "$req" | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/xtimer
venv=$cache/peers-$hash
link=$root/.peers

ready() { [ -f "$venv/.complete" ] && [ -x "$venv/bin/python" ]; }

if [ "${1:-}" = "--check" ]; then
  ready && [ "$(readlink -f "$link")" = "$(readlink -f "$venv")" ]
  exit $?
fi

relink() {
  # ln -sfn onto an existing link to a folder replaces the link itself (-n), atomically enough
  # for one checkout; a real folder at .peers (an older layout) is left alone with a message.
  if [ -e "$link" ] && [ ! -L "$link" ]; then
    echo "setup_peers: $link exists and is not a symlink; remove it and run $0 again" >&2
    exit 1
  fi
  ln -sfn "$venv" "$link"
  touch "$venv/.complete"  # last used: environments of other pins unused for 3 days are removed
  echo "$venv"
}

if ready; then
  relink
  exit 0
fi

# From here on .peers must not point at an environment of other pins: the tests would run the
# wrong versions. Until this build completes, they skip.
[ -L "$link" ] && rm -f "$link"

if [ ! -x "$python" ]; then
  echo "setup_peers: $python is missing (Debian package python3.11; scripts/setup.sh installs it)" >&2
  exit 1
fi
if ! "$python" -c "import ensurepip, venv" 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup_peers: Python's venv module is missing and installing python3-venv needs root" >&2
    exit 1
  fi
  echo "setup_peers: installing python3-venv"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; }
fi

mkdir -p "$cache"
exec 9>"$cache/peers-$hash.lock"
flock 9  # a concurrent run builds it; we wait and use it
if ready; then
  relink
  exit 0
fi

tmp=$venv.tmp-$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
start=$(date +%s)
echo "setup_peers: building the peer environment ($(grep -c "==" "$req") pinned packages; the first time about 4 GB to download)"
"$python" -m venv "$tmp"
# pip's own cache (~/.cache/pip) keeps the wheels, so a change of one pin downloads only that one.
# --no-compile: no .pyc for torch's ~20k files now (minutes on 2 cores); Python writes those it
# imports on first use.
"$tmp/bin/pip" install -q --disable-pip-version-check --no-input --no-compile -r "$req" >"$tmp.log" 2>&1 || {
  echo "setup_peers: pip install failed; last lines of $tmp.log:" >&2
  tail -15 "$tmp.log" >&2
  exit 1
}
rm -f "$tmp.log"
# `.peers/bin/python` finds xtimer.ckpt in the checkout's build, as the tests' PYTHONPATH does:
# through the symlink, sys.prefix is CHECKOUT/.peers, so CHECKOUT/build/lib/python is appended
# (when it exists; the tests set PYTHONPATH to their own build tree, which comes first).
site=$("$tmp/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import os, sys; p = os.path.join(os.path.dirname(sys.prefix), 'build', 'lib', 'python'); os.path.isdir(p) and p not in sys.path and sys.path.append(p)" \
  >"$site/xtimer-build.pth"
# The venv records its own path in scripts and pyvenv.cfg: build under the final name's parent,
# so rename into place and fix the recorded paths (console scripts' shebangs).
grep -rlF "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" 2>/dev/null | while read -r f; do
  [ -L "$f" ] || sed -i "s#$tmp#$venv#g" "$f"
done
touch "$tmp/.complete"
rm -rf "$venv"
mv "$tmp" "$venv"
trap - EXIT
for old in "$cache"/peers-*/.complete; do
  dir=$(dirname "$old")
  if [ -e "$old" ] && [ "$dir" != "$venv" ] && [ -n "$(find "$old" -mtime +3)" ]; then
    rm -rf "$dir"
    echo "setup_peers: removed $dir (other pins, unused for 3 days)" >&2
  fi
done
echo "setup_peers: done in $(($(date +%s) - start)) s, $(du -sh "$venv" | cut -f1) on disk" >&2
relink
