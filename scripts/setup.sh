#!/usr/bin/env bash
# Installs the dependencies, configures and builds trainsim into ./build.
# Usage: scripts/setup.sh [TARGET...]   no target: everything (the tests too); `trainsim`: the command alone,
# which is all the main job (`trainsim puzzles`) needs, and the quick edit-rebuild loop.
set -euo pipefail
cd "$(dirname "$0")/.."
# Building only the trainsim command (the main job) needs none of the tests' packages (PyTorch among them).
if [ "$*" = "trainsim" ]; then scripts/install-deps.sh --build-only; else scripts/install-deps.sh; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ $# -gt 0 ]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
