#!/bin/sh
# Calibration fidelity of the hardware cost model on the executor's CPU backend (bench/README.md,
# "Hardware cost model: calibration"): replay five schedules of the `small` model with measured traces,
# calibrate the cpu device and network on two of them, predict the step time of the other three with
# `trainsim sim`, and compare with their measured steps (the last step of each replay, host clock).
# Usage: bench/calibration_fidelity.sh [BUILD_DIR] [OUT_DIR]. Two ranks per schedule: the machine has 2 cores
# and the simulator gives every rank its own device.
set -eu
B=${1:-build}
O=${2:-/tmp/trainsim-calibration}
T="$B/trainsim"
mkdir -p "$O"
STEPS=${STEPS:-4}
gen() { "$T" gen "$@"; }
gen gpipe --stages 2 --microbatches 8 -o "$O/gpipe.sched"
gen ddp --dp 2 --layers 4 --microbatches 4 -o "$O/ddp.sched"
gen 1f1b --stages 2 --microbatches 8 -o "$O/1f1b.sched"
gen zb-h1 --stages 2 --microbatches 8 -o "$O/zb-h1.sched"
gen fsdp --dp 2 --layers 4 --microbatches 4 -o "$O/fsdp.sched"
for k in gpipe ddp 1f1b zb-h1 fsdp; do
  "$T" replay "$O/$k.sched" --model small --steps "$STEPS" --grad-clip 0 --trace "$O/$k.trace.json" > "$O/$k.replay.txt"
done
"$T" calibrate "$O/gpipe.trace.json" "$O/ddp.trace.json" --model small -o "$O/cpu.json" --network-output "$O/cpu-net.json"
printf '%-8s %12s %12s %8s\n' schedule measured_s predicted_s error
for k in gpipe ddp 1f1b zb-h1 fsdp; do
  m=$(python3 -c "import json,sys; print(json.load(open('$O/$k.trace.json'))['otherData']['makespan_us']/1e6)")
  p=$("$T" sim "$O/$k.sched" --model small --microbatch-size 8 --device "$O/cpu.json" --network "$O/cpu-net.json" --json |
      python3 -c "import json,sys; print(json.load(sys.stdin)['step_time_s'])")
  python3 -c "m=$m; p=$p; print('%-8s %12.4f %12.4f %7.1f%%' % ('$k', m, p, 100*(p-m)/m))"
done
