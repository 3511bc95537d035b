#!/bin/sh
# Regenerates the timeline SVG of every example schedule: examples/NAME.sched -> examples/svg/NAME.svg.
# Usage: examples/render.sh [TRAINSIM]   (default: build/trainsim)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
trainsim=${1:-"$here/../build/trainsim"}
mkdir -p "$here/svg"
for f in "$here"/*.sched; do
  name=$(basename "$f" .sched)
  "$trainsim" sim "$f" --svg "$here/svg/$name.svg"
done
