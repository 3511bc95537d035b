#!/usr/bin/env bash
# A 3D-parallel schedule (TP 2 x PP 2 x DP 2, Llama 3 8B on H100s, the hardware cost model) exported as Chakra
# execution traces for ASTRA-sim (docs/chakra.md): trainsim generates and checks the schedule, then writes one
# trace per rank and the communicator groups. Usage: examples/chakra-astra-sim.sh [OUTDIR]   (default: chakra-3d)
set -euo pipefail
TRAINSIM=${TRAINSIM:-$(dirname "$0")/../build/trainsim}
OUT=${1:-chakra-3d}
mkdir -p "$OUT"
"$TRAINSIM" gen 3d --tp 2 --pp 2 --dp 2 --microbatches 4 --model llama3-8b -o "$OUT/3d.sched"
"$TRAINSIM" sim "$OUT/3d.sched"                        # trainsim's own prediction, to compare with ASTRA-sim's
"$TRAINSIM" convert "$OUT/3d.sched" "$OUT/3d.et"       # $OUT/3d.0.et .. 3d.7.et, $OUT/3d.comm_groups.json
"$TRAINSIM" convert "$OUT/3d.et" "$OUT/3d.json"        # the nodes as JSON, to read
cat <<TEXT

ASTRA-sim (not part of trainsim; its analytical network backend, with system, network and memory files of your
cluster) reads the traces by their prefix:

  AstraSim_Analytical_Congestion_Unaware --workload-configuration=$OUT/3d \\
    --comm-group-configuration=$OUT/3d.comm_groups.json \\
    --system-configuration=SYSTEM.json --network-configuration=NETWORK.yml \\
    --remote-memory-configuration=MEMORY.json
TEXT
