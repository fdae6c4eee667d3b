#!/usr/bin/env bash
# Installs the peers: the tools our users would otherwise pick (torchrun and DCP from PyTorch 2.15,
# py-spy, DeepSpeed, transformers, megatron-core), pinned in scripts/peers-requirements.txt, in a
# Python 3.11 virtual environment that the peer tests (tests/peers/) run beside ours, and that runs
# real torch on the simulated GPUs (tests/realtorch, scripts/simgpu.sh).
#
#   scripts/setup_peers.sh           build it if missing, link .peers to it, print its path
#   scripts/setup_peers.sh --check   exit 0 if .peers is ready, 1 if not (installs nothing)
#   scripts/setup_peers.sh --for dlrover [--check]
#                                    the same for .dlrover, from scripts/dlrover-requirements.txt:
#                                    DLRover's dlrover-run and flash checkpoint with torch 2.8, the
#                                    newest torch that DLRover runs with
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
name=peers
if [ "${1:-}" = "--for" ]; then
  name=${2:?"setup_peers: --for needs a name (dlrover)"}
  shift 2
fi
req=$root/scripts/$name-requirements.txt
if [ ! -f "$req" ]; then
  echo "setup_peers: $req is missing; --for takes peers or dlrover" >&2
  exit 2
fi
python=/usr/bin/python3.11  # Debian's: the interpreter the build's xtimer._ckpt module is built for

hash=$(sha256sum "$req" | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/xtimer
venv=$cache/peers-$hash
link=$root/.$name

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
trap 'rm -rf "$tmp" "$tmp.req"' EXIT
rm -rf "$tmp" "$tmp.log"
start=$(date +%s)

# Seed: the newest complete environment of other pins (last used first) with the same torch, else
# the newest of any torch, copied as hard links, so that pip installs only what differs (a pin
# change costs seconds, not a 4 GB download; .peers and .dlrover pin different torches).
# That never alters the seed: pip removes a file before writing its replacement (uninstall moves
# files away, install unlinks an existing destination first), and every file this script changes
# is rewritten into a new file (sed -i, rm before writing). `.complete` is not copied: touching a
# shared inode would refresh the seed's "last used" time.
seed= any=
torch_pin=$(sed -n 's/^torch==//p' "$req")
for c in $(ls -t "$cache"/peers-*/.complete 2>/dev/null); do
  d=$(dirname "$c")
  [[ $(basename "$d") =~ ^peers-[0-9a-f]{16}$ ]] || continue  # not a temporary folder
  [ "$d" != "$venv" ] && [ -x "$d/bin/python" ] || continue
  any=${any:-$d}
  if compgen -G "$d/lib/python3*/site-packages/torch-$torch_pin.dist-info" >/dev/null; then seed=$d && break; fi
done
seed=${seed:-$any}
if [ -n "$seed" ] && cp -al "$seed" "$tmp" 2>/dev/null; then
  rm -f "$tmp/.complete"
  # The seed's recorded paths (console scripts' shebangs, pyvenv.cfg) become the new folder's.
  # The path it recorded is read from its pip's shebang: a cache copied elsewhere keeps the old.
  recorded=$(head -1 "$seed/bin/pip" | sed -n 's|^#!\(.*\)/bin/python[0-9.]*$|\1|p')
  recorded=${recorded:-$seed}
  { grep -rlF "$recorded" "$tmp/bin" "$tmp/pyvenv.cfg" 2>/dev/null || true; } | while read -r f; do
    [ -L "$f" ] || sed -i "s#$recorded#$tmp#g" "$f"
  done
  echo "setup_peers: building the peer environment from $seed (only what differs is installed)"
else
  rm -rf "$tmp"
  echo "setup_peers: building the peer environment ($(grep -c "==" "$req") pinned packages; the first time about 4 GB to download)"
  "$python" -m venv "$tmp"
fi
# pip's own cache (~/.cache/pip) keeps the wheels, so a change of one pin downloads only that one.
# --no-compile: no .pyc for torch's ~20k files now (minutes on 2 cores); Python writes those it
# imports on first use.
# Two steps: packages whose build imports torch (DeepSpeed's setup.py) are installed after torch,
# without build isolation and without compiling their optional kernels (DS_BUILD_OPS=0: they are
# compiled on first use, and the CPU runs here use none of them).
builds_on_torch='^(deepspeed)=='
pip_install() {
  "$tmp/bin/pip" install -q --disable-pip-version-check --no-input --no-compile "$@" >>"$tmp.log" 2>&1 || {
    echo "setup_peers: pip install failed; last lines of $tmp.log:" >&2
    tail -15 "$tmp.log" >&2
    exit 1
  }
}
# A seed may hold packages that these pins dropped: remove them first, so the environment is
# exactly the file (names compared as pip normalises them). First, not last: two packages may
# share files (nvidia-cusparselt-cu13 and -cu12 both write nvidia/cusparselt/lib), and removing
# the dropped one after installing its successor would delete the successor's files.
norm() { tr 'A-Z_.' 'a-z--' | sort -u; }
extra=$(comm -23 <("$tmp/bin/pip" freeze --disable-pip-version-check | cut -d= -f1 | norm) \
  <(grep -E '^[A-Za-z0-9]' "$req" | cut -d= -f1 | norm))
if [ -n "$extra" ]; then
  # shellcheck disable=SC2086
  "$tmp/bin/pip" uninstall -q -y --disable-pip-version-check $extra >>"$tmp.log" 2>&1 || {
    echo "setup_peers: pip uninstall of $extra failed; see $tmp.log" >&2
    exit 1
  }
fi
grep -viE "$builds_on_torch" "$req" >"$tmp.req"
pip_install -r "$tmp.req"
DS_BUILD_OPS=0 pip_install --no-build-isolation -r "$req"
rm -f "$tmp.log" "$tmp.req"
# `.peers/bin/python` finds xtimer.ckpt in the checkout's build, as the tests' PYTHONPATH does:
# through the symlink, sys.prefix is CHECKOUT/.peers, so CHECKOUT/build/lib/python is appended
# (when it exists; the tests set PYTHONPATH to their own build tree, which comes first).
site=$("$tmp/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -f "$site/xtimer-build.pth"  # a new file, never the seed's (hard-linked) one
echo "import os, sys; p = os.path.join(os.path.dirname(sys.prefix), 'build', 'lib', 'python'); os.path.isdir(p) and p not in sys.path and sys.path.append(p)" \
  >"$site/xtimer-build.pth"
# The venv records its own path in scripts and pyvenv.cfg: build under the final name's parent,
# so rename into place and fix the recorded paths (console scripts' shebangs).
{ grep -rlF "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" 2>/dev/null || true; } | while read -r f; do
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
