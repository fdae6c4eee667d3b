#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test xtimer. Idempotent: it only
# runs apt-get when a package is missing. CUDA 13 itself is expected at /usr/local/cuda.
set -euo pipefail

packages=(
  # build
  g++ make cmake ninja-build pkg-config ccache
  # preload / capture / symbolisation
  libunwind-dev libdw-dev libelf-dev
  # collector, agent, viewer
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  nlohmann-json3-dev libsimdjson-dev libcpp-httplib-dev libgraphviz-dev graphviz libabsl-dev
  # flash checkpoint (Python package over the C++ core)
  pybind11-dev python3-dev python3-numpy python3-torch
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev clang-format
  black flake8
  chromium curl prometheus iproute2 nftables procps psmisc
  # native stacks compared with gdb's (tests/capture/unwind_gdb_test), libc with its debug info
  gdb libc6-dbg
  # elastic launcher: a real etcd v3 for multi-node rendezvous tests
  etcd-server
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f /usr/local/cuda/include/cuda.h ] || [ ! -f /usr/local/cuda/include/nccl.h ]; then
  echo "setup: CUDA 13 (with nccl.h) is expected at /usr/local/cuda; install the CUDA toolkit and NCCL there" >&2
  exit 1
fi
