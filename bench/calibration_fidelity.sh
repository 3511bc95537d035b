#!/bin/sh
# Calibration fidelity of the hardware cost model on the executor's CPU backend (bench/README.md,
# "Hardware cost model (issue 9)"): replay five schedules of the `small` model with measured traces,
# calibrate the cpu device and network on two of them (gpipe, ddp), predict the step time of all five with
# `trainsim sim`, and compare each prediction with the MEDIAN measured step of its schedule.
#
# Measurement: ROUNDS rounds; each round replays every schedule once, in turn, for STEPS steps and traces
# all but the first (--trace-steps: the first step warms up). Interleaving the rounds spreads a shared
# machine's changing load over every schedule alike; calibrate pools the rounds of a schedule (per-op medians
# over all its traced steps, schedules/calibration.h) and the measured step is the median over all of them.
# Wall-clock timings on a shared machine move with what else runs: the script prints, for each round and for
# all of them, how many cores other processes kept busy on average (all CPU time in /proc/stat less this
# script's children's), and the load average; compare tables taken with other processes near 0.
# A round in which other processes kept more than MAX_OTHER cores busy on average is set aside (its traces
# renamed *.disturbed.json) and another round is run, up to MAX_ROUNDS rounds in all; when no round is
# clean, the disturbed ones are used, and the script says so.
# Usage: [ROUNDS=3] [STEPS=4] [MAX_OTHER=0.25] [MAX_ROUNDS=2*ROUNDS] bench/calibration_fidelity.sh
# [BUILD_DIR] [OUT_DIR]. Two ranks per schedule: the machine has 2 cores and the simulator gives every rank
# its own device.
set -eu
B=${1:-build}
O=${2:-/tmp/trainsim-calibration}
T="$B/trainsim"
mkdir -p "$O"
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-4}
MAX_OTHER=${MAX_OTHER:-0.25}
MAX_ROUNDS=${MAX_ROUNDS:-$((2 * ROUNDS))}
KINDS="gpipe ddp 1f1b zb-h1 fsdp"
load() { cut -d' ' -f1-3 /proc/loadavg; }
# CPU seconds all processes have used (/proc/stat), CPU seconds this script's finished children have used
# (/proc/$$/stat cutime + cstime) and the time, to tell how much of the machine other work took meanwhile.
cpu() {
  python3 - "$$" <<'PY'
import os, sys, time
tick = os.sysconf('SC_CLK_TCK')
busy = sum(int(x) for i, x in enumerate(open('/proc/stat').readline().split()[1:]) if i not in (3, 4))
own = sum(int(x) for x in open('/proc/%s/stat' % sys.argv[1]).read().rsplit(')', 1)[1].split()[13:15])
print(busy / tick, own / tick, time.time())
PY
}
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')  commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "cpus: $(nproc)  rounds: $ROUNDS (at most $MAX_ROUNDS; a round with other processes above $MAX_OTHER cores is set aside)  steps per replay: $STEPS (the last $((STEPS - 1)) traced)"
echo "load average before: $(load)"
"$T" gen gpipe --stages 2 --microbatches 8 -o "$O/gpipe.sched"
"$T" gen ddp --dp 2 --layers 4 --microbatches 4 -o "$O/ddp.sched"
"$T" gen 1f1b --stages 2 --microbatches 8 -o "$O/1f1b.sched"
"$T" gen zb-h1 --stages 2 --microbatches 8 -o "$O/zb-h1.sched"
"$T" gen fsdp --dp 2 --layers 4 --microbatches 4 -o "$O/fsdp.sched"
# Prints "WHAT: N s; other processes kept X of C cores busy on average" between two cpu snapshots; fails
# when X is above MAX_OTHER.
others() {
  python3 - "$@" "$(nproc)" "$MAX_OTHER" <<'PY'
import sys
what = sys.argv[1]
b0, o0, t0, b1, o1, t1, n, most = map(float, sys.argv[2:])
other = max((b1 - b0) - (o1 - o0), 0) / (t1 - t0)
print('%s: %.0f s; other processes kept %.2f of %d cores busy on average (0: an idle machine)' % (what, t1 - t0, other, n))
sys.exit(0 if other <= most else 1)
PY
}
rm -f "$O"/*.trace.json "$O"/*.disturbed.json
start=$(cpu)
r=1
kept=0
while [ "$kept" -lt "$ROUNDS" ] && [ "$r" -le "$MAX_ROUNDS" ]; do
  round=$(cpu)
  for k in $KINDS; do
    "$T" replay "$O/$k.sched" --model small --steps "$STEPS" --grad-clip 0 --trace-steps $((STEPS - 1)) \
      --trace "$O/$k.r$r.trace.json" > "$O/$k.r$r.replay.txt"
  done
  if others "round $r" $round $(cpu); then
    kept=$((kept + 1))
  else
    echo "  set aside (other processes above $MAX_OTHER cores)"
    for k in $KINDS; do mv "$O/$k.r$r.trace.json" "$O/$k.r$r.disturbed.json"; done
  fi
  r=$((r + 1))
done
others "all rounds" $start $(cpu) || true
if [ "$kept" -eq 0 ]; then
  echo "NO CLEAN ROUND: the table below uses the disturbed rounds; its timings hold other processes' load"
  for f in "$O"/*.disturbed.json; do mv "$f" "${f%.disturbed.json}.trace.json"; done
else
  echo "rounds used: $kept clean of $((r - 1)) run"
fi
echo "load average after the replays: $(load) (the replays themselves add about 2)"
"$T" calibrate "$O"/gpipe.r*.trace.json "$O"/ddp.r*.trace.json --model small -o "$O/cpu.json" \
  --network-output "$O/cpu-net.json"
printf '%-8s %-11s %6s %11s %11s %11s %11s %8s\n' schedule role steps measured_s min_s max_s predicted_s error
for k in $KINDS; do
  case $k in gpipe | ddp) role=calibration ;; *) role=prediction ;; esac
  p=$("$T" sim "$O/$k.sched" --model small --microbatch-size 8 --device "$O/cpu.json" --network "$O/cpu-net.json" --json |
      python3 -c "import json,sys; print(json.load(sys.stdin)['step_time_s'])")
  python3 - "$k" "$role" "$p" "$O"/"$k".r*.trace.json <<'PY'
import json, statistics, sys
kind, role, p = sys.argv[1], sys.argv[2], float(sys.argv[3])
steps = []
for path in sys.argv[4:]:
    other = json.load(open(path))['otherData']
    steps += [s['makespan_us'] / 1e6 for s in other.get('steps', [])] or [other['makespan_us'] / 1e6]
m = statistics.median(steps)
print('%-8s %-11s %6d %11.4f %11.4f %11.4f %11.4f %+7.1f%%' % (kind, role, len(steps), m, min(steps), max(steps), p, 100 * (p - m) / m))
PY
done
echo "load average at the end: $(load)"
