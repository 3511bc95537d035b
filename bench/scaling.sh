#!/usr/bin/env bash
# The scaling table of bench/README.md: `trainsim gen pp-fsdp --sim --json` (generate and simulate in memory,
# no file, no per-op records) for 16 stages x DP replicas x 64 microbatches per replica, DP = 1 .. 1024
# (16 .. 16,384 ranks). Prints a Markdown table: ranks, ops, generate s, simulate s, simulated ops/s, wall s,
# peak RSS MiB, and the exponent of simulate time in ops between consecutive rows.
# Usage: bench/scaling.sh [BUILD_DIR] [DP...]   (default: build, and 1 4 16 64 256 1024)
set -euo pipefail
build=${1:-build}
shift || true
dps=("$@")
[ ${#dps[@]} -gt 0 ] || dps=(1 4 16 64 256 1024)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "| ranks | ops | generate s | simulate s | simulated ops/s | wall s | peak RSS MiB | exponent (simulate s vs ops) |"
echo "|---|---|---|---|---|---|---|---|"
prev_ops=""; prev_sim=""
for dp in "${dps[@]}"; do
  /usr/bin/time -f "%e %M" -o "$tmp.time" "$build/trainsim" gen pp-fsdp --stages 16 --dp "$dp" --microbatches 64 \
    --sim --json > "$tmp"
  field() { sed -n "s/^  \"$1\": \\(.*\\),\$/\\1/p" "$tmp"; }
  ops=$(field ops); gen=$(field generate_seconds); sim=$(field sim_seconds)
  read -r wall rss_kib < "$tmp.time"
  exponent=$(awk -v o="$ops" -v s="$sim" -v po="$prev_ops" -v ps="$prev_sim" \
    'BEGIN { if (po == "" || ps <= 0 || s <= 0) print "—"; else printf "%.2f", log(s / ps) / log(o / po) }')
  awk -v r=$((16 * dp)) -v o="$ops" -v g="$gen" -v s="$sim" -v w="$wall" -v m="$rss_kib" -v e="$exponent" \
    'BEGIN { printf "| %d | %d | %.2f | %.2f | %.0f | %.2f | %d | %s |\n", r, o, g, s, o / s, w, m / 1024, e }'
  prev_ops=$ops; prev_sim=$sim
done
rm -f "$tmp.time"
