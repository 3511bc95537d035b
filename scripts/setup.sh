#!/usr/bin/env bash
# Installs the dependencies, configures and builds trainsim into ./build.
# Usage: scripts/setup.sh [TARGET...]   no target: everything (the tests too); `trainsim`: the command alone,
# which is all the main job (`trainsim puzzles`) needs, and the quick edit-rebuild loop.
set -euo pipefail
cd "$(dirname "$0")/.."
# Building only the trainsim command (the main job) needs none of the tests' packages (PyTorch among them).
if [ "$*" = "trainsim" ]; then scripts/install-deps.sh --build-only; else scripts/install-deps.sh; fi
# Release (-O2, no debug info) and a unity build: the command builds in about a third of the time of a
# RelWithDebInfo build file by file (bench/README.md, "Build time"). For debugging, configure with
# -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=OFF.
# Ninja (ninja-build) for a new build directory: it keeps both cores busy where make waits for each library.
GENERATOR=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja > /dev/null; then GENERATOR=(-G Ninja); fi
cmake -S . -B build "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON
if [ $# -gt 0 ]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
