#!/bin/sh
# Memory by strategy (issue 21; bench/README.md, "Memory by strategy"): the same model trained on the same
# ranks with DDP, ZeRO-1, ZeRO-2, FSDP (ZeRO-3) and pipeline + FSDP, each replayed for real on the CPU backend,
# and each rank's measured peak (the device allocator's, every buffer) next to the hardware cost model's
# prediction in bytes, split as the learning material's tables split it: parameters, gradients, optimizer
# state, activations (with what each forward saves for its backward) and the working memory inside the op at the
# peak (docs/executor.md §4, "Memory: which figure is which").
#
# Every strategy runs RANKS ranks and the same tokens per step: the data-parallel ones MB microbatches per rank
# over LAYERS layers, pipeline + FSDP 2 stages of RANKS/2 replicas with 2*MB microbatches each. STEPS steps (the
# second and later hold the carried state as well). MODEL_FLAGS sizes the model (`trainsim replay` flags).
# Usage: [RANKS=4] [LAYERS=4] [MB=2] [STEPS=2] [MODEL_FLAGS="--model small --seq 64 --microbatch-size 2"]
#        bench/memory_by_strategy.sh [BUILD_DIR] [OUT_DIR] [-- extra replay flags, e.g. --data FILE]
set -eu
B=${1:-build}
O=${2:-/tmp/trainsim-memory}
[ $# -ge 2 ] && shift 2 || shift $#
[ "${1:-}" = "--" ] && shift
T="$B/trainsim"
RANKS=${RANKS:-4}
LAYERS=${LAYERS:-4}
MB=${MB:-2}
STEPS=${STEPS:-2}
MODEL_FLAGS=${MODEL_FLAGS:-"--model small --seq 64 --microbatch-size 2"}
mkdir -p "$O"
for k in ddp zero1 zero2 fsdp; do
  "$T" gen "$k" --dp "$RANKS" --layers "$LAYERS" --microbatches "$MB" -o "$O/$k.sched"
done
"$T" gen pp-fsdp --stages 2 --dp $((RANKS / 2)) --microbatches $((2 * MB)) -o "$O/pp-fsdp.sched"
for k in ddp zero1 zero2 fsdp pp-fsdp; do
  # shellcheck disable=SC2086
  "$T" replay "$O/$k.sched" $MODEL_FLAGS --blocks "$LAYERS" --steps "$STEPS" --json "$@" > "$O/$k.json"
done
python3 - "$O" <<'PY'
import json, sys
out = sys.argv[1]
mib = lambda b: '%.2f' % (b / 2**20)
print('| strategy | rank | parameters | gradients | optimizer | activations | working | predicted MiB | measured MiB | predicted - measured |')
print('|---|---|---|---|---|---|---|---|---|---|')
worst = 0
for k in ['ddp', 'zero1', 'zero2', 'fsdp', 'pp-fsdp']:
    j = json.load(open('%s/%s.json' % (out, k)))
    if not j['ok']:
        sys.exit('%s: the replay failed: %s' % (k, j['error']))
    for r, (m, p) in enumerate(zip(j['peak_bytes'], j['predicted_memory'])):
        pred = p['weights'] + p['grads'] + p['optimizer'] + p['activations'] + p['working']
        worst = max(worst, abs(pred - m) / m)
        print('| %s | %d | %s | %s | %s | %s | %s | %s | %s | %+.1f %% |' % (
            k, r, mib(p['weights']), mib(p['grads']), mib(p['optimizer']), mib(p['activations']), mib(p['working']),
            mib(pred), mib(m), (pred - m) / m * 100))
print()
print('model: %s; largest |predicted - measured| / measured: %.2f %%' % (j['model'], worst * 100))
PY
