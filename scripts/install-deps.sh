#!/usr/bin/env bash
# Installs what trainsim needs to build and test, from Debian packages. Safe to run again.
# Usage: scripts/install-deps.sh [--build-only]   --build-only: what building the trainsim command needs, without
# the tests' and the tools' packages (PyTorch among them): the main job's quick start (scripts/setup.sh trainsim).
set -euo pipefail
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  cmake g++ make pkg-config
  ninja-build           # scripts/setup.sh's build tool: both cores busy where make waits for each library
  libboost1.81-dev      # Boost.Asio: rank coroutines on a single-threaded io_context
  libfmt-dev            # formatting
  doctest-dev           # tests
  libcli11-dev          # command line
  nlohmann-json3-dev    # --json output, traces
  libtomlplusplus-dev   # torchtitan's TOML job configurations (gen --from-torchtitan --job.config_file)
  libgraphviz-dev       # dependency graphs (libgvc / cgraph)
  libopenblas-dev       # the executor's CPU backend: fp64 GEMMs (gradient check; fp32 under TRAINSIM_GEMM=openblas)
  libdnnl-dev           # the executor's CPU backend: fp32 GEMMs (oneDNN's sgemm, one thread per rank)
  libsleef-dev          # the executor's CPU backend: vectorised exp (SwiGLU, softmax, cross-entropy)
  libprotobuf-dev       # Chakra execution traces (trainsim convert FILE.sched PREFIX.et): protobuf's wire format
  protobuf-compiler     # protoc: C++ code of interop/chakra_et.proto
  libsodium-dev         # the rendezvous's challenge-response (HMAC-SHA-256, nonces) and checkpoint hashes (SHA-256)
  fortunes              # the executor's default training text (byte-level tokens)
)
# Only the tests and the tools use these.
TEST_PACKAGES=(
  librsvg2-bin          # rsvg-convert, to look at the SVG timelines as PNG (optional)
  bsdutils              # script: a test runs the command under a pseudo-terminal (its status line)
  python3-torch         # tests/torch/reference_test.py: trainsim's training step against PyTorch's autograd and AdamW
)
if [ "$BUILD_ONLY" -eq 0 ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
